import CallingAuth
import CallingCore
import CallingServer
import CallingStore
import CallingTesting
import Foundation
import XCTest

/// `calling-server backup --to FILE` against a live server whose peers keep chatting: the command
/// runs on its own connection (as it would from a shell beside the service) and the server never stops.
final class BackupCommandTests: ServerTestCase {

    func test_backup_of_a_live_server_while_chats_are_written_is_whole_and_gap_free_per_room() async throws {
        try restart { $0.maxFramesPerSecond = 100_000; $0.frameBurst = 100_000 }  // the writers are not flooding
        let rooms = ["room-a", "room-b"]
        var senders: [TestPeer] = []
        for room in rooms { senders.append(try await server.join("writer", room: room)) }
        // Each writer keeps a window of 8 unacknowledged chats in flight until told to stop.
        let writers = senders.enumerated().map { index, peer in
            Task {
                var sent = 0
                var acked = 0
                while !Task.isCancelled {
                    while sent - acked < 8 {
                        sent += 1
                        peer.send(["type": "chat", "payload": ["client_id": .string("c\(index)-\(sent)"), "text": .string("message \(sent)")]])
                    }
                    guard (try? await peer.next(type: "chat-ack")) != nil else { break }
                    acked += 1
                }
                return acked
            }
        }
        try await waitForStoredChats(atLeast: 200)

        let target = server.dataDir + "/backup.sqlite"
        let (code, output) = try capturingStandardOutput {
            CallingCommand.run(["calling-server", "backup", "--to", target, "--data-dir", server.config.dataDir], environment: [:])
        }
        XCTAssertEqual(code, 0, output)
        XCTAssertTrue(output.contains("integrity ok"), output)
        try await waitForStoredChats(atLeast: storedChats() + 100)  // the server kept writing after the copy
        for writer in writers { writer.cancel() }
        var acked = 0
        for writer in writers { acked += await writer.value }

        let copy = try SQLiteConnection(path: target, options: .init(readOnly: true))
        defer { copy.close() }
        XCTAssertEqual(try copy.query("PRAGMA integrity_check") { $0.text(0) }, ["ok"])
        var copied = 0
        for room in rooms {
            let seqs = try copy.query("SELECT seq FROM chat_messages WHERE room_id = ?1 ORDER BY seq", [.text(room)]) { $0.int64(0) }
            XCTAssertFalse(seqs.isEmpty, room)
            XCTAssertEqual(seqs, (1...Int64(seqs.count)).map { $0 }, "\(room): a gap-free prefix 1...n")
            let lastSeq = try copy.queryFirst("SELECT last_seq FROM rooms WHERE room_id = ?1", [.text(room)]) { $0.int64(0) }
            XCTAssertEqual(lastSeq, Int64(seqs.count), "\(room): the room row and its messages are from the same commit")
            copied += seqs.count
        }
        XCTAssertLessThan(copied, acked, "the copy is a snapshot taken while chats were still being written")

        let missing = try capturingStandardOutput {
            CallingCommand.run(["calling-server", "backup", "--data-dir", server.config.dataDir], environment: [:])
        }
        XCTAssertEqual(missing.0, 64, "--to is required")
        let noDatabase = try capturingStandardOutput {
            CallingCommand.run(["calling-server", "backup", "--to", target, "--data-dir", server.dataDir + "/nothing-here"], environment: [:])
        }
        XCTAssertEqual(noDatabase.0, 66)
    }

    private func storedChats() async throws -> Int {
        let metrics = try await server.exchange("GET", "/metrics")
        let line = metrics.text.split(separator: "\n").first { $0.hasPrefix("calling_chat_stored_total ") }
        return Int(line?.split(separator: " ").last ?? "0") ?? 0
    }

    private func waitForStoredChats(atLeast count: Int) async throws {
        let deadline = Date().addingTimeInterval(20)
        while try await storedChats() < count {
            guard Date() < deadline else { throw TestPeerError.timedOut(waitingFor: "\(count) stored chats") }
            try await Task.sleep(nanoseconds: 20_000_000)
        }
    }
}

/// `calling-server token`: the claims the kick and the room limit rely on.
final class TokenCommandTests: XCTestCase {
    func test_token_carries_a_jti_and_the_requested_max_peers() throws {
        let dataDir = NSTemporaryDirectory() + "calling-token-\(UUID().uuidString)"
        defer { try? FileManager.default.removeItem(atPath: dataDir) }
        let environment = ["CALLING_JWT_SECRET": "token-command-secret-0123456789abcdef"]
        func mint(_ extra: [String]) throws -> (Int32, String) {
            try capturingStandardOutput {
                CallingCommand.run(["calling-server", "token", "--room", "r", "--peer", "p", "--data-dir", dataDir] + extra,
                                   environment: environment)
            }
        }
        let verifier = try TokenVerifier(hs256Secret: Array(environment["CALLING_JWT_SECRET"]!.utf8), audience: "calling-server")
        let (code, token) = try mint(["--max-peers", "2"])
        XCTAssertEqual(code, 0)
        let claims = try verifier.verify(token.trimmingCharacters(in: .whitespacesAndNewlines))
        XCTAssertEqual(claims.maxPeers, 2)
        let first = try XCTUnwrap(claims.tokenID)
        let (_, again) = try mint(["--jti", "chosen"])
        let second = try verifier.verify(again.trimmingCharacters(in: .whitespacesAndNewlines))
        XCTAssertEqual(second.tokenID, "chosen")
        XCTAssertNil(second.maxPeers)
        let (_, third) = try mint([])
        XCTAssertNotEqual(try verifier.verify(third.trimmingCharacters(in: .whitespacesAndNewlines)).tokenID, first,
                          "every minted token is a distinct credential")
        XCTAssertEqual(try mint(["--max-peers", "-1"]).0, 64)
    }

    func test_token_without_the_servers_secret_refuses_instead_of_writing_one() throws {
        let dataDir = NSTemporaryDirectory() + "calling-token-\(UUID().uuidString)"
        defer { try? FileManager.default.removeItem(atPath: dataDir) }
        let (code, output) = try capturingStandardOutput {
            CallingCommand.run(["calling-server", "token", "--room", "r", "--peer", "p", "--data-dir", dataDir], environment: [:])
        }
        XCTAssertEqual(code, 1)
        XCTAssertEqual(output, "", "no token printed")
        XCTAssertFalse(FileManager.default.fileExists(atPath: dataDir + "/jwt-secret"), "no secret written")
    }

    func test_help_flags_print_the_commands_own_usage() throws {
        for arguments in [["token", "--help"], ["serve", "-h"], ["admin", "--help"], ["apikey", "revoke", "--help"]] {
            // A configuration that cannot load and no admin key: help reads neither.
            let (code, output) = try capturingStandardOutput {
                CallingCommand.run(["calling-server"] + arguments, environment: ["CALLING_PORT": "x"])
            }
            XCTAssertEqual(code, 0, "\(arguments)")
            XCTAssertTrue(output.hasPrefix("usage: calling-server \(arguments[0])"), output)
        }
        let (code, output) = try capturingStandardOutput { CallingCommand.run(["calling-server", "--version"], environment: [:]) }
        XCTAssertEqual(code, 0)
        XCTAssertEqual(output, CallingCommand.versionLine + "\n")
    }
}
