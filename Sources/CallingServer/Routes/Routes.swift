import CallingAuth
import CallingStore
import CallingTransport

extension RouteTable {
    /// Every route of the server: one row each (methods, path, auth, browser, rate limit, handler).
    /// A new route is one row here plus its handler. The order matters only for `Allow` (methods
    /// are listed in row order). docs/protocol.md ("Routes") and docs/openapi.yaml list the same
    /// rows; RouteTableTests holds them together.
    static func server(service: ServiceAPI, calls: CallsAPI, admin: AdminAPI, sessions: HTTPSessions,
                       room: any WebSocketEndpoint, presence: any WebSocketEndpoint) -> RouteTable
    {
        let anyPeer = RouteAuth.peerToken(scope: nil, binding: nil)
        let callsKey = RouteAuth.apiKey(scope: APIKeyRecord.callsScope)
        let adminKey = RouteAuth.apiKey(scope: APIKeyRecord.adminScope)
        let roomScope = TokenScope.ifListed("room")
        let proxy = RouteAuth.peerToken(scope: roomScope, binding: .call(parameter: "call_id"))
        let whip = RouteAuth.peerToken(scope: roomScope, binding: .room(parameter: "room_id"))
        return RouteTable([
            Route([.get, .head], "/healthz", auth: .none, .http(service.health)),
            Route([.get], "/metrics", auth: .none, .http(service.metrics)),
            Route([.get], "/v1/ws", auth: .peerToken(scope: roomScope, binding: nil), browser: true, .webSocket(room)),
            Route([.get], "/v1/presence", auth: .peerToken(scope: .required("presence"), binding: nil), browser: true,
                  .webSocket(presence)),
            Route([.get], "/v1/ice", auth: anyPeer, browser: true, .peer(service.iceServers)),
            Route([.get], "/v1/rooms/{room_id}/messages", auth: .peerToken(scope: nil, binding: .room(parameter: "room_id")),
                  browser: true, .peer(service.messages)),
            Route([.get], "/v1/me/rooms", auth: .peerToken(scope: .required("user"), binding: nil), browser: true, .peer(service.inbox)),

            Route([.post], "/v1/calls", auth: callsKey, .http(calls.createCall)),
            Route([.get], "/v1/calls/{call_id}", auth: callsKey, .http(calls.getCall)),
            Route([.get], "/v1/calls/{call_id}/stats", auth: callsKey, .http(calls.getStats)),
            Route([.post], "/v1/tokens", auth: callsKey, .http(calls.createToken)),

            Route([.get], "/v1/admin/rooms", auth: adminKey, .http(admin.listRooms)),
            Route([.get], "/v1/admin/rooms/{room_id}", auth: adminKey, .http(admin.showRoom)),
            Route([.post], "/v1/admin/rooms/{room_id}/peers/{peer_id}/kick", auth: adminKey, .http(admin.kickPeer)),
            Route([.post], "/v1/admin/rooms/{room_id}/end", auth: adminKey, .http(admin.closeRoom)),
            Route([.post], "/v1/admin/rooms/{room_id}/data", auth: adminKey, .http(admin.postData)),
            Route([.get], "/v1/admin/drain", auth: adminKey, .http(admin.getDrain)),
            Route([.post], "/v1/admin/drain", auth: adminKey, .http(admin.postDrain)),

            Route([.post], "/webrtc-proxy/{call_id}/v1/webrtc/sessions", auth: proxy, browser: true, rateLimited: true,
                  .peer(sessions.createProxySession)),
            Route([.patch], "/webrtc-proxy/{call_id}/v1/webrtc/sessions/{session_id}", auth: proxy, browser: true, rateLimited: true,
                  .peer(sessions.patchProxySession)),
            Route([.delete], "/webrtc-proxy/{call_id}/v1/webrtc/sessions/{session_id}", auth: proxy, browser: true, rateLimited: true,
                  .peer(sessions.deleteProxySession)),
            Route([.post], "/whip/{room_id}", auth: whip, browser: true, rateLimited: true, .peer(sessions.createWHIPResource)),
            Route([.options], "/whip/{room_id}", auth: .none, browser: true, rateLimited: true, .http(sessions.whipEndpointOptions)),
            Route([.patch], "/whip/{room_id}/{resource_id}", auth: whip, browser: true, rateLimited: true,
                  .peer(sessions.patchWHIPResource)),
            Route([.delete], "/whip/{room_id}/{resource_id}", auth: whip, browser: true, rateLimited: true,
                  .peer(sessions.deleteWHIPResource)),
            Route([.options], "/whip/{room_id}/{resource_id}", auth: .none, browser: true, rateLimited: true,
                  .http(sessions.whipResourceOptions)),
        ])
    }
}

extension Route.Handler {
    /// A handler of a `.peerToken` row, handed the verified claims the row's auth produced.
    static func peer(_ run: @escaping @Sendable (RouteRequest, PeerTokenClaims, @escaping RouteResponder) -> Void) -> Route.Handler {
        .http { request, respond in
            // The front door runs a handler only after the row's auth passed, which sets claims on
            // every `.peerToken` row; a `.peer` handler on another row is a table mistake.
            guard let claims = request.claims else { preconditionFailure("a .peer handler on a row without peer-token auth") }
            run(request, claims, respond)
        }
    }
}
