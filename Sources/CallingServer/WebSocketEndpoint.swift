import CallingAuth
import CallingCore
import CallingTransport

/// A WebSocket protocol served at its own path next to the room protocol (`/v1/ws`), such as the
/// presence channel. The token is verified before `shouldUpgrade`; every method runs on the
/// service thread, in order, so implementations keep their state without locks.
protocol WebSocketEndpoint: AnyObject {
    /// Decide on an upgrade whose token already verified. Return `.accept(context:)` with what
    /// `didOpen` needs, or `.reject` with an HTTP problem (403 for a token without the scope).
    func shouldUpgrade(_ request: HTTPRequest, claims: PeerTokenClaims) -> UpgradeDecision
    func didOpen(_ connection: ConnectionID, context: any Sendable)
    func didReceive(_ message: InboundMessage, on connection: ConnectionID)
    func didClose(_ connection: ConnectionID)
    /// Every `tick_ms`, for timers (grace periods, request TTLs).
    func tick(now: Millis)
}

/// Carries an endpoint's accept context through the transport, tagged with its path.
struct EndpointTicket: Sendable {
    var path: String
    var context: any Sendable
}
