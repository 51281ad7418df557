import CallingLogging
import Dispatch
import XCTest

final class LoggerTests: XCTestCase {
    func test_records_below_the_level_are_dropped() {
        let handler = MemoryLogHandler()
        let logger = Logger(label: "hub", level: .warning, handler: handler)
        logger.trace("t")
        logger.debug("d")
        logger.info("i")
        logger.log(.notice, "n")
        logger.warning("w")
        logger.error("e")
        logger.critical("c")
        XCTAssertEqual(handler.all.map(\.message), ["w", "e", "c"])
        XCTAssertEqual(handler.all.map(\.level), [.warning, .error, .critical])
    }

    func test_trace_level_lets_everything_through() {
        let handler = MemoryLogHandler()
        let logger = Logger(label: "hub", level: .trace, handler: handler)
        for level in Logger.Level.allCases { logger.log(level, "\(level)") }
        XCTAssertEqual(handler.all.map(\.level), Logger.Level.allCases)
    }

    func test_default_level_is_info() {
        let handler = MemoryLogHandler()
        let logger = Logger(label: "hub", handler: handler)
        logger.debug("hidden")
        logger.info("shown")
        XCTAssertEqual(handler.all.map(\.message), ["shown"])
    }

    func test_filtered_records_are_never_built() {
        let handler = MemoryLogHandler()
        let logger = Logger(label: "hub", level: .info, handler: handler)
        var built = 0
        func expensive() -> String {
            built += 1
            return "sdp"
        }
        func metadata() -> Logger.Metadata {
            built += 1
            return ["sdp": "v=0"]
        }
        logger.trace(expensive(), metadata())
        XCTAssertEqual(built, 0, "an SDP at trace level costs nothing when trace is off")
        logger.info(expensive(), metadata())
        XCTAssertEqual(built, 2)
    }

    func test_memory_handler_keeps_label_level_message_and_metadata() throws {
        let handler = MemoryLogHandler()
        let logger = Logger(label: "signaling", level: .debug, handler: handler)
        logger.info("peer joined", ["room.id": "room-1", "peer.id": "alice"])
        let record = try XCTUnwrap(handler.all.first)
        XCTAssertEqual(handler.all.count, 1)
        XCTAssertEqual(record.label, "signaling")
        XCTAssertEqual(record.level, .info)
        XCTAssertEqual(record.message, "peer joined")
        XCTAssertEqual(record.metadata, ["room.id": "room-1", "peer.id": "alice"])
    }

    func test_records_without_metadata_have_empty_metadata() throws {
        let handler = MemoryLogHandler()
        Logger(label: "x", handler: handler).error("boom")
        XCTAssertEqual(try XCTUnwrap(handler.all.first).metadata, [:])
    }

    func test_labeled_logger_shares_the_sink_and_level() {
        let handler = MemoryLogHandler()
        let root = Logger(label: "server", level: .error, handler: handler)
        let child = root.labeled("store")
        XCTAssertEqual(child.level, .error)
        child.warning("dropped")
        child.error("kept")
        root.error("root")
        XCTAssertEqual(handler.all.map(\.label), ["store", "server"])
        XCTAssertEqual(handler.all.map(\.message), ["kept", "root"])
    }

    func test_level_can_be_changed_after_creation() {
        let handler = MemoryLogHandler()
        var logger = Logger(label: "x", level: .error, handler: handler)
        logger.info("hidden")
        logger.level = .debug
        logger.info("shown")
        XCTAssertEqual(handler.all.map(\.message), ["shown"])
    }

    func test_levels_parse_from_configuration_names() {
        XCTAssertEqual(Logger.Level(name: "warning"), .warning)
        XCTAssertEqual(Logger.Level(name: "DEBUG"), .debug)
        XCTAssertEqual(Logger.Level(name: "Trace"), .trace)
        XCTAssertNil(Logger.Level(name: "verbose"))
        XCTAssertNil(Logger.Level(name: ""))
    }

    func test_levels_are_ordered_by_severity() {
        XCTAssertEqual(Logger.Level.allCases.sorted(), [.trace, .debug, .info, .notice, .warning, .error, .critical])
        XCTAssertLessThan(Logger.Level.notice, .warning)
    }

    func test_memory_handler_keeps_every_record_from_concurrent_loggers() {
        let handler = MemoryLogHandler()
        let logger = Logger(label: "x", level: .info, handler: handler)
        DispatchQueue.concurrentPerform(iterations: 1_000) { index in
            logger.info("record", ["i": "\(index)"])
        }
        XCTAssertEqual(handler.all.count, 1_000)
        XCTAssertEqual(Set(handler.all.compactMap { $0.metadata["i"] }).count, 1_000)
    }
}

final class LogFormatTests: XCTestCase {
    private let record = LogRecord(label: "server", level: .warning, message: "closing \"slow\" consumer",
                                   metadata: ["conn": "7", "level": "spoof", "note": "a\nb"], date: Date(timeIntervalSince1970: 12.5))

    func test_json_is_one_object_per_line_with_the_fixed_fields_first() throws {
        let line = StderrLogHandler.line(record, format: .json)
        XCTAssertTrue(line.hasSuffix("}\n"))
        XCTAssertEqual(line.dropLast().firstIndex(of: "\n"), nil, "a newline in a value is escaped")
        XCTAssertTrue(line.hasPrefix("{\"ts\":12.5,\"level\":\"warning\",\"label\":\"server\",\"msg\":"))
        let object = try XCTUnwrap(JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
        XCTAssertEqual(object["msg"] as? String, "closing \"slow\" consumer")
        XCTAssertEqual(object["level"] as? String, "warning", "metadata cannot shadow a fixed field")
        XCTAssertEqual(object["meta.level"] as? String, "spoof")
        XCTAssertEqual(object["note"] as? String, "a\nb")
        XCTAssertEqual(object["conn"] as? String, "7")
    }

    func test_text_stays_logfmt() {
        XCTAssertEqual(StderrLogHandler.line(LogRecord(label: "x", level: .info, message: "m", metadata: ["k": "v w"],
                                                       date: Date(timeIntervalSince1970: 1)), format: .text),
                       "ts=1.0 level=info label=x msg=\"m\" k=\"v w\"\n")
    }
}
