import CallingRedis
import CallingTesting
import Glibc
import XCTest

/// The hiredis adapter against a real redis-server on a free loopback port.
final class RedisConnectionTests: XCTestCase {
    var redis: RedisServer!

    override func setUpWithError() throws {
        guard RedisServer.binary != nil else { throw XCTSkip("redis-server is not installed (deploy/install-deps.sh --test)") }
        redis = try RedisServer()
    }

    override func tearDown() {
        redis = nil
    }

    func endpoint() throws -> RedisEndpoint { try RedisEndpoint(url: redis.url) }

    func test_urls_parse_with_defaults_credentials_and_database_and_bad_ones_are_refused() throws {
        XCTAssertEqual(try RedisEndpoint(url: "redis://cache"), RedisEndpoint(host: "cache"))
        XCTAssertEqual(try RedisEndpoint(url: "redis://:pw@10.0.0.2:6380/3"),
                       RedisEndpoint(host: "10.0.0.2", port: 6380, password: "pw", database: 3))
        XCTAssertEqual(try RedisEndpoint(url: "redis://app:pw@h").username, "app")
        XCTAssertEqual(try RedisEndpoint(url: "redis://:pw@h").description, "redis://***@h:6379/0", "no password in logs")
        for bad in ["http://h", "redis://", "redis://h:0", "redis://h:x", "redis://h/db"] {
            XCTAssertThrowsError(try RedisEndpoint(url: bad), bad)
        }
    }

    func test_commands_pipelines_binary_values_and_error_replies() throws {
        let connection = try RedisConnection.connect(try endpoint(), timeoutMs: 1_000)
        XCTAssertEqual(try connection.command(["SET", "k", "v"]), .status("OK"))
        XCTAssertEqual(try connection.command(["GET", "k"]).text, "v")
        XCTAssertEqual(try connection.command(["GET", "missing"]), .null)
        let binary: [UInt8] = [0, 1, 0x0a, 0xff, 0]
        try connection.command(bytes: [Array("SET".utf8), Array("b".utf8), binary])
        XCTAssertEqual(try connection.command(["GET", "b"]), .string(binary))
        let replies = try connection.pipeline([[Array("INCR".utf8), Array("n".utf8)], [Array("INCR".utf8), Array("n".utf8)],
                                               [Array("HSET".utf8), Array("h".utf8), Array("f".utf8), Array("1".utf8)],
                                               [Array("HGETALL".utf8), Array("h".utf8)]])
        XCTAssertEqual(replies.prefix(3).map(\.integer), [1, 2, 1])
        XCTAssertEqual(replies[3].array?.compactMap(\.text), ["f", "1"])
        guard case .error(let message) = try connection.command(["INCR", "k"]) else { return XCTFail("INCR of a string must fail") }
        XCTAssertTrue(message.contains("not an integer"), message)
        XCTAssertEqual(try connection.command(["PING"]), .status("PONG"), "an error reply leaves the connection usable")
    }

    func test_a_subscriber_gets_published_messages_and_times_out_quietly() throws {
        let subscriber = try RedisConnection.connect(try endpoint(), timeoutMs: 1_000)
        let publisher = try RedisConnection.connect(try endpoint(), timeoutMs: 1_000)
        try subscriber.append([Array("SUBSCRIBE".utf8), Array("c".utf8)])
        try subscriber.flush()
        let confirmation = try XCTUnwrap(try subscriber.nextReply(timeoutMs: 1_000))
        XCTAssertEqual(confirmation.array?.first?.text, "subscribe")
        XCTAssertNil(try subscriber.nextReply(timeoutMs: 50), "nothing published yet")
        XCTAssertEqual(try publisher.command(["PUBLISH", "c", "one"]), .integer(1))
        XCTAssertEqual(try publisher.command(["PUBLISH", "c", "two"]), .integer(1))
        var texts: [String] = []
        let deadline = Date().addingTimeInterval(2)
        while texts.count < 2, Date() < deadline {
            if let reply = try subscriber.nextReply(timeoutMs: 100), let items = reply.array, items.count == 3 {
                texts.append(items[2].text ?? "")
            }
        }
        XCTAssertEqual(texts, ["one", "two"])
    }

    func test_a_dead_server_is_an_error_not_a_hang() throws {
        let connection = try RedisConnection.connect(try endpoint(), timeoutMs: 500)
        redis.stop()
        XCTAssertThrowsError(try connection.command(["PING"]))
        XCTAssertThrowsError(try RedisConnection.connect(try endpoint(), timeoutMs: 500))
        try redis.start()
        XCTAssertEqual(try RedisConnection.connect(try endpoint(), timeoutMs: 500).command(["PING"]), .status("PONG"))
    }
}
