import CallingAuth
import CallingCore
import CallingServer
import Foundation
import XCTest

@testable import CallingClient

/// `performRpc` / `registerRpcMethod` between two Swift SDK clients through the real server
/// (docs/protocol.md "RPC"): answers, handler errors, unknown methods, a callee not in the room, a
/// callee that leaves while the call is open.
final class RpcClientTests: ClientTestCase {
    func test_a_call_is_answered_by_the_callees_handler_with_typed_errors_for_each_failure() async throws {
        let agent = try server.client("agent")
        let page = try server.client("page")
        try await agent.connect()
        try await page.connect()
        page.registerRpcMethod("get-location") { data in
            XCTAssertEqual(data.callerID, "agent")
            XCTAssertEqual(data.responseTimeout, 5)
            return "location for \(data.payload)"
        }
        page.registerRpcMethod("fail") { _ in throw RpcError(code: 2001, message: "no map", data: "why") }

        let answer = try await agent.performRpc(to: "page", method: "get-location", payload: "agent", timeout: 5)
        XCTAssertEqual(answer, "location for agent")

        func failure(_ body: () async throws -> String) async -> RpcError? {
            do {
                _ = try await body()
                return nil
            } catch {
                return error as? RpcError
            }
        }
        let thrown = await failure { try await agent.performRpc(to: "page", method: "fail") }
        XCTAssertEqual(thrown, RpcError(code: 2001, message: "no map", data: "why"))
        let unknown = await failure { try await agent.performRpc(to: "page", method: "nothing") }
        XCTAssertEqual(unknown?.code, RpcError.unsupportedMethod)
        let nobody = await failure { try await agent.performRpc(to: "nobody", method: "get-location") }
        XCTAssertEqual(nobody?.code, RpcError.recipientNotFound)

        // The callee leaves while the call is open: the caller hears peer-left and fails the call.
        page.registerRpcMethod("slow") { _ in
            try await Task.sleep(nanoseconds: 5_000_000_000)
            return "too late"
        }
        async let gone = failure { try await agent.performRpc(to: "page", method: "slow", timeout: 8) }
        try await Task.sleep(nanoseconds: 200_000_000)
        await page.disconnect()
        let left = await gone
        XCTAssertEqual(left?.code, RpcError.recipientDisconnected)
        await agent.disconnect()
    }
}
