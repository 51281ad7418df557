import CallingCore
import Foundation
import XCTest

@testable import CallingServer

final class ServerConfigTests: XCTestCase {
    func test_later_layers_win_file_then_env_then_flags() throws {
        let config = try ServerConfig.load(
            file: ["port": 9000, "host": "0.0.0.0", "typing_ttl_ms": 7000],
            environment: ["CALLING_PORT": "9100", "CALLING_TYPING_TTL_MS": "8000", "HOME": "/root"],
            flags: ["port": "9200"]
        ).get()
        XCTAssertEqual(config.port, 9200)
        XCTAssertEqual(config.host, "0.0.0.0")
        XCTAssertEqual(config.typingTTLMs, 8000)
    }

    func test_flags_accept_dashes_for_underscores() throws {
        let config = try ServerConfig.load(file: nil, environment: [:], flags: ["data-dir": "/tmp/x", "max_frame_bytes": "4096"]).get()
        XCTAssertEqual(config.dataDir, "/tmp/x")
        XCTAssertEqual(config.maxFrameBytes, 4096)
    }

    func test_database_url_takes_a_postgres_url_and_shows_it_without_its_password() throws {
        let config = try ServerConfig.load(file: nil, environment: [:],
                                           flags: ["database-url": "postgres://chat:s3cret@db.internal:5432/calling?sslmode=require"]).get()
        XCTAssertEqual(config.databaseURL, "postgres://chat:s3cret@db.internal:5432/calling?sslmode=require")
        let shown = try XCTUnwrap(config.summary.first { $0.0 == "database_url" }?.1)
        XCTAssertEqual(shown, "postgres://chat:***@db.internal:5432/calling?sslmode=require")
        XCTAssertEqual(ServerConfig.redactingPassword("postgres://chat@db/calling"), "postgres://chat@db/calling")
        XCTAssertEqual(try ServerConfig.load(file: nil, environment: [:], flags: [:]).get().databaseURL, "", "SQLite by default")
        guard case .failure(let problems) = ServerConfig.load(file: ["database_url": "mysql://x"], environment: [:], flags: [:]) else {
            return XCTFail("a non-postgres URL must be refused")
        }
        XCTAssertTrue(problems.description.contains("database_url: must start with postgres://"), problems.description)
    }

    func test_every_problem_is_reported_at_once() {
        let result = ServerConfig.load(
            file: ["port": "eighty", "nonsense": 1],
            environment: ["CALLING_EVENT_LOOP": "select"],
            flags: ["max_frame_bytes": "12", "jwt_secret": "x"])
        guard case .failure(let problems) = result else { return XCTFail("expected problems") }
        XCTAssertEqual(problems.problems.count, 5, problems.description)
        XCTAssertTrue(problems.description.contains("port"))
        XCTAssertTrue(problems.description.contains("nonsense"))
        XCTAssertTrue(problems.description.contains("event_loop"))
        XCTAssertTrue(problems.description.contains("max_frame_bytes"))
        XCTAssertTrue(problems.description.contains("secrets are never passed as flags"))
    }

    func test_wal_checkpoint_limits_reach_the_store_and_bad_values_are_refused() throws {
        let config = try ServerConfig.load(file: ["sqlite_checkpoint_pages": 100], environment: ["CALLING_SQLITE_WRITER_CATCH_UP_PAGES": "4000"],
                                           flags: [:]).get()
        XCTAssertEqual(config.chatStoreOptions.checkpointEveryPages, 100)
        XCTAssertEqual(config.chatStoreOptions.writerCatchUpPages, 4_000)
        XCTAssertEqual(config.chatStoreOptions.busyTimeoutMs, 5_000)
        let defaults = ServerConfig().chatStoreOptions
        XCTAssertEqual(defaults.checkpointEveryPages, 250)
        XCTAssertEqual(defaults.writerCatchUpPages, 16_000)

        for (flags, expected) in [(["sqlite_checkpoint_pages": "0"], "sqlite_checkpoint_pages: 0 is outside 1…1000000"),
                                  (["sqlite_checkpoint_pages": "many"], "sqlite_checkpoint_pages: 'many' is not an integer"),
                                  (["sqlite_writer_catch_up_pages": "-5"], "sqlite_writer_catch_up_pages: -5 is outside 1…100000000"),
                                  (["sqlite_checkpoint_pages": "500", "sqlite_writer_catch_up_pages": "400"],
                                   "sqlite_writer_catch_up_pages must not be below sqlite_checkpoint_pages")]
        {
            guard case .failure(let problems) = ServerConfig.load(file: nil, environment: [:], flags: flags) else {
                XCTFail("\(flags) was accepted")
                continue
            }
            XCTAssertEqual(problems.problems.count, 1, problems.description)
            XCTAssertTrue(problems.description.contains(expected), problems.description)
        }
    }

    func test_secret_comes_only_from_the_environment() throws {
        let config = try ServerConfig.load(file: nil, environment: ["CALLING_JWT_SECRET": "s3cret"], flags: [:]).get()
        XCTAssertEqual(config.jwtSecret, "s3cret")
        XCTAssertFalse(config.summary.contains { $0.1.contains("s3cret") })
        guard case .failure = ServerConfig.load(file: ["jwt_secret": "in-file"], environment: [:], flags: [:]) else {
            return XCTFail("a secret in the config file must be refused")
        }
    }

    func test_the_webhook_secret_comes_only_from_the_environment_or_its_file() throws {
        let config = try ServerConfig.load(file: nil, environment: ["CALLING_WEBHOOK_SECRET": "w-s3cret"], flags: [:]).get()
        XCTAssertEqual(config.webhookSecret, "w-s3cret")
        XCTAssertTrue(config.summary.contains { $0 == ("webhook_secret", "(set, hidden)") })
        XCTAssertFalse(config.summary.contains { $0.1.contains("w-s3cret") })
        guard case .failure(let file) = ServerConfig.load(file: ["webhook_secret": "x"], environment: [:], flags: [:]),
            case .failure(let flag) = ServerConfig.load(file: nil, environment: [:], flags: ["webhook-secret": "x"])
        else { return XCTFail("a webhook secret in the file or a flag must be refused") }
        XCTAssertTrue(file.problems.contains { $0.contains("'webhook_secret' may not be stored in the config file") })
        XCTAssertTrue(flag.problems.contains { $0.contains("secrets are never passed as flags") })
    }

    func test_webhook_settings_are_checked_together() {
        let loaded = ServerConfig.load(file: nil, environment: [:], flags: [
            "webhook_urls": "http://ok.example/h, ftp://bad.example/h,https://",
            "webhook_events": "call_started,chat_message,nope", "webhook_retry_base_ms": "5000", "webhook_retry_max_ms": "1000",
            "webhook_chat_messages": "maybe",
        ])
        guard case .failure(let problems) = loaded else { return XCTFail("must be refused") }
        XCTAssertEqual(problems.problems.sorted(), [
            "flag --webhook_chat_messages: webhook_chat_messages: 'maybe' is not true or false",
            "webhook_events: chat_message is switched on with webhook_chat_messages = true, not listed here",
            "webhook_events: unknown event 'nope' (known: all, call_ended, call_started, peer_joined, peer_left, presence_agent_status, presence_request_ended, presence_request_ringing, session_ended, session_started)",
            "webhook_retry_base_ms must not exceed webhook_retry_max_ms",
            "webhook_urls: 'ftp://bad.example/h' is not an http:// or https:// URL with a host",
            "webhook_urls: 'https://' is not an http:// or https:// URL with a host",
        ])
    }

    func test_a_shared_outbox_lease_must_outlast_two_attempt_timeouts() throws {
        let shared = ["database_url": "postgres://127.0.0.1/calling", "webhook_timeout_ms": "5000"]
        guard case .failure(let problems) = ServerConfig.load(file: nil, environment: [:], flags: shared.merging(["webhook_lease_ms": "9999"]) { $1 })
        else { return XCTFail("a lease shorter than two timeouts must be refused with database_url") }
        XCTAssertEqual(problems.problems, ["webhook_lease_ms must be at least twice webhook_timeout_ms"])
        let fine = try ServerConfig.load(file: nil, environment: [:], flags: shared.merging(["webhook_lease_ms": "10000", "webhook_poll_ms": "50"]) { $1 }).get()
        XCTAssertEqual(fine.webhookLeaseMs, 10_000)
        XCTAssertEqual(fine.webhookPollMs, 50)
        XCTAssertEqual(fine.webhookCallEndSettleMs, 1_000, "the default")
        XCTAssertEqual(try ServerConfig.load(file: nil, environment: ["CALLING_WEBHOOK_CALL_END_SETTLE_MS": "0"], flags: [:]).get()
                        .webhookCallEndSettleMs, 0)
        guard case .failure = ServerConfig.load(file: nil, environment: [:], flags: ["webhook_call_end_settle_ms": "600001"]) else {
            return XCTFail("webhook_call_end_settle_ms above 600000 must be refused")
        }
        XCTAssertEqual(try ServerConfig.load(file: nil, environment: [:], flags: ["webhook_lease_ms": "1000", "webhook_timeout_ms": "5000"]).get()
                        .webhookLeaseMs, 1_000, "without database_url there are no claims to check")
        guard case .failure = ServerConfig.load(file: nil, environment: [:], flags: ["webhook_poll_ms": "5"]) else {
            return XCTFail("webhook_poll_ms below 10 must be refused")
        }
    }

    func test_webhook_events_select_what_is_sent() throws {
        var config = ServerConfig()
        XCTAssertEqual(config.webhookEventMask & WebhookEventType.chatMessage.bit, 0, "chat_message is off by default")
        XCTAssertNotEqual(config.webhookEventMask & WebhookEventType.presenceRequestEnded.bit, 0)
        config.webhookEvents = "call_started, call_ended"
        config.webhookChatMessages = true
        XCTAssertEqual(config.webhookEventMask,
                       WebhookEventType.callStarted.bit | WebhookEventType.callEnded.bit | WebhookEventType.chatMessage.bit)
    }

    func test_max_sockets_is_zero_or_above_the_health_headroom_and_reaches_the_transport() throws {
        XCTAssertEqual(try ServerConfig.load(file: nil, environment: [:], flags: [:]).get().transport.maxSockets, 65_536)
        XCTAssertEqual(try ServerConfig.load(file: nil, environment: ["CALLING_MAX_SOCKETS": "0"], flags: [:]).get().transport.maxSockets, 0)
        XCTAssertEqual(try ServerConfig.load(file: nil, environment: [:], flags: ["max_sockets": "9"]).get().transport.maxSockets, 9)
        XCTAssertEqual(try ServerConfig.load(file: ["max_sockets": .int(70_000)], environment: [:], flags: [:]).get().maxSockets, 70_000)
        XCTAssertEqual(try ServerConfig.load(file: nil, environment: [:], flags: ["max_sockets": "0", "health_reserved_sockets": "1000"])
            .get().maxSockets, 0, "0 is no ceiling, whatever the headroom")
        for outside in ["-1", "16777217"] {
            guard case .failure = ServerConfig.load(file: nil, environment: [:], flags: ["max_sockets": outside]) else {
                return XCTFail("max_sockets \(outside) is outside its range")
            }
        }
        for (sockets, headroom) in [("8", "8"), ("5", "8"), ("1", "1")] {
            guard case .failure(let problems) = ServerConfig.load(file: nil, environment: [:],
                                                                  flags: ["max_sockets": sockets, "health_reserved_sockets": headroom])
            else { return XCTFail("max_sockets \(sockets) with health_reserved_sockets \(headroom) must be refused") }
            XCTAssertTrue(problems.description.contains("max_sockets must be 0 or greater than health_reserved_sockets"), problems.description)
        }
    }

    func test_the_admin_clis_variables_are_not_server_keys_but_a_misspelt_one_is_refused() throws {
        let environment = ["CALLING_ADMIN_KEY": "csk_x", "CALLING_ADMIN_URL": "http://127.0.0.1:9", "CALLING_PORT": "9000"]
        XCTAssertEqual(try ServerConfig.load(file: nil, environment: environment, flags: [:]).get().port, 9000)
        guard case .failure(let problems) = ServerConfig.load(file: nil, environment: ["CALLING_ADMIN_KYE": "x"], flags: [:]) else {
            return XCTFail("an unknown CALLING_ variable must still be refused")
        }
        XCTAssertTrue(problems.description.contains("unknown key 'admin_kye'"), problems.description)
    }

    func test_an_unknown_log_level_names_the_valid_ones() {
        guard case .failure(let problems) = ServerConfig.load(file: nil, environment: [:], flags: ["log_level": "verbose"]) else {
            return XCTFail("an unknown level must be refused")
        }
        XCTAssertTrue(problems.description.contains("use one of trace, debug, info, notice, warning, error, critical"),
                      problems.description)
    }

    func test_log_format_is_text_or_json() throws {
        XCTAssertEqual(try ServerConfig.load(file: ["log_format": .string("json")], environment: [:], flags: [:]).get().logFormat, .json)
        guard case .failure = ServerConfig.load(file: nil, environment: [:], flags: ["log_format": "xml"]) else {
            return XCTFail("an unknown log format must be refused")
        }
    }

    func test_docs_configuration_lists_every_key_exactly() throws {
        let docs = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("docs/configuration.md")
        let text = try String(contentsOf: docs, encoding: .utf8)
        let begin = try XCTUnwrap(text.range(of: "<!-- config-table:begin -->\n"))
        let end = try XCTUnwrap(text.range(of: "\n<!-- config-table:end -->"))
        XCTAssertEqual(String(text[begin.upperBound..<end.lowerBound]), ServerConfig.markdownTable,
                       "docs/configuration.md is out of date: paste ServerConfig.markdownTable between the markers")
    }

    /// deploy/calling-server.example.json is what operators copy: it must name every key, and the
    /// values it gives this build's keys must load.
    func test_the_example_config_file_names_every_key_with_a_valid_value() throws {
        let file = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("deploy/calling-server.example.json")
        let example = try XCTUnwrap(try JSONParser.parse(Array(try Data(contentsOf: file))).objectValue)
        let keys = ServerConfig().summary.map(\.0).filter { !ServerConfig.secretNames.contains($0) }
        let missing = keys.filter { example[$0] == nil }
        XCTAssertEqual(missing, [], "deploy/calling-server.example.json lacks these keys")
        XCTAssertNil(example["jwt_secret"], "secrets never go in the file")
        XCTAssertNil(example["turn_secret"])
        XCTAssertNil(example["webhook_secret"])
        // A key this build does not know is a key of a newer build: only this build's keys are loaded.
        let known = example.filter { keys.contains($0.key) }
        switch ServerConfig.load(file: known, environment: [:], flags: [:]) {
        case .success(let config):
            XCTAssertEqual(config.dataDir, "/var/lib/calling-server", "the data folder of deploy/calling-server.service")
            XCTAssertEqual(config.jwtSecretFile, "/etc/calling-server/jwt-secret")
            XCTAssertGreaterThan(config.idleHangupSeconds, config.idlePingSeconds)
        case .failure(let problems):
            XCTFail("the example config does not load: \(problems)")
        }
    }

    func test_cluster_keys_are_checked_together_and_the_url_password_is_never_shown() throws {
        let good = try ServerConfig.load(file: nil, environment: ["CALLING_CLUSTER_REDIS_URL": "redis://:hunter2@cache:6380/2"],
                                         flags: ["node_id": "node-a", "cluster_heartbeat_ms": "500"]).get()
        XCTAssertEqual(good.clusterRedisURL, "redis://:hunter2@cache:6380/2")
        XCTAssertEqual(good.nodeID, "node-a")
        XCTAssertEqual(good.clusterHeartbeatMs, 500)
        let shown = good.summary.first { $0.0 == "cluster_redis_url" }?.1 ?? ""
        XCTAssertFalse(shown.contains("hunter2"), shown)
        guard case .failure(let problems) = ServerConfig.load(
            file: nil, environment: [:],
            flags: ["cluster_redis_url": "http://cache", "node_id": "has space", "cluster_heartbeat_ms": "3000",
                    "cluster_node_ttl_ms": "3000"])
        else { return XCTFail("bad cluster keys must be refused") }
        XCTAssertEqual(problems.problems.count, 3, "\(problems)")
        XCTAssertTrue(problems.description.contains("cluster_redis_url"))
        XCTAssertTrue(problems.description.contains("cluster_node_ttl_ms must be greater than cluster_heartbeat_ms"))
        XCTAssertTrue(problems.description.contains("node_id"))
    }
}

final class SigningSecretTests: XCTestCase {
    func test_dev_secret_is_generated_once_with_private_permissions_and_reused() throws {
        let dir = NSTemporaryDirectory() + "secret-\(UUID().uuidString)"
        defer { try? FileManager.default.removeItem(atPath: dir) }
        var config = ServerConfig()
        config.dataDir = dir
        let first = try SigningSecret.load(config: config)
        let second = try SigningSecret.load(config: config)
        XCTAssertEqual(first, second)
        XCTAssertGreaterThanOrEqual(first.count, 32)
        let attributes = try FileManager.default.attributesOfItem(atPath: config.resolvedSecretFile)
        XCTAssertEqual((attributes[.posixPermissions] as? NSNumber)?.intValue, 0o600)
    }

    func test_short_environment_secret_is_refused() {
        var config = ServerConfig()
        config.jwtSecret = "short"
        XCTAssertThrowsError(try SigningSecret.load(config: config))
    }
}
