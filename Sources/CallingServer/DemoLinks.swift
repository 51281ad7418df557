import CallingAuth
import CallingCore
import Foundation

/// The links `make serve` prints (`print_demo_links`): the demo page for two peers of one room,
/// so two tabs can call each other, and the presence dashboard as a supervisor, as an agent and as
/// a caller: the caller's page has a Call button per available agent, so with the agent's link
/// open in another tab the request → accept flow runs from the pages alone, and both parties'
/// accepted requests link into the room.
/// Each carries a token minted now with the server's own secret, in the URL fragment, which the
/// browser never sends to any server.
enum DemoLinks {
    static func text(config: ServerConfig, port: Int, servePages: Bool) throws -> String {
        guard servePages else { return "demo pages are off (serve_pages = false)\n" }
        let issuer = try TokenIssuer(hs256Secret: try SigningSecret.load(config: config))
        let now = Date()
        let expires = now.addingTimeInterval(TimeInterval(config.tokenTTLSeconds))
        func token(_ peer: String, room: String?, role: String, name: String, scope: String) throws -> String {
            try issuer.issue(PeerTokenClaims(sub: PeerID(peer), roomID: room.map { RoomID($0) }, role: role, name: name,
                                             scope: [scope], audience: config.jwtAudience, issuedAt: now, expiresAt: expires))
        }
        // A wildcard listen address is not something a browser can open.
        let host = ["0.0.0.0", "::", ""].contains(config.host) ? "127.0.0.1" : config.host
        let base = "\(config.tlsEnabled ? "https" : "http")://\(host.contains(":") ? "[\(host)]" : host):\(port)"
        let rows = [
            ("demo, alice", "/", try token("alice", room: "demo", role: "peer", name: "Alice", scope: "room")),
            ("demo, bob", "/", try token("bob", room: "demo", role: "peer", name: "Bob", scope: "room")),
            ("dashboard, supervisor", "/dashboard", try token("supervisor", room: nil, role: "dashboard", name: "Supervisor", scope: "presence")),
            ("dashboard, agent ann", "/dashboard", try token("ann", room: nil, role: "agent", name: "Ann", scope: "presence")),
            ("dashboard, caller carl", "/dashboard", try token("carl", room: nil, role: "caller", name: "Carl", scope: "presence")),
        ]
        let minutes = config.tokenTTLSeconds / 60
        return "open in a browser (tokens valid \(minutes) min):\n"
            + rows.map { "  \($0.0): \(base)\($0.1)#token=\($0.2)" }.joined(separator: "\n") + "\n"
    }
}
