import CallingProtocol
import Foundation

/// A small logger in swift-log's shape: constant messages, data in metadata (`room.id`, `peer.id`).
/// Tokens and SDP are never logged above trace.
public struct Logger: Sendable {
    public enum Level: Int, Sendable, Comparable, CaseIterable {
        case trace, debug, info, notice, warning, error, critical

        public static func < (lhs: Level, rhs: Level) -> Bool { lhs.rawValue < rhs.rawValue }

        public init?(name: String) {
            guard let level = Level.allCases.first(where: { "\($0)" == name.lowercased() }) else { return nil }
            self = level
        }
    }

    public typealias Metadata = [String: String]

    public let label: String
    public var level: Level
    public let handler: any LogHandler

    public init(label: String, level: Level = .info, handler: any LogHandler = StderrLogHandler()) {
        self.label = label
        self.level = level
        self.handler = handler
    }

    public func log(_ level: Level, _ message: @autoclosure () -> String, _ metadata: @autoclosure () -> Metadata = [:]) {
        guard level >= self.level else { return }
        handler.log(LogRecord(label: label, level: level, message: message(), metadata: metadata(), date: Date()))
    }

    public func trace(_ message: @autoclosure () -> String, _ metadata: @autoclosure () -> Metadata = [:]) { log(.trace, message(), metadata()) }
    public func debug(_ message: @autoclosure () -> String, _ metadata: @autoclosure () -> Metadata = [:]) { log(.debug, message(), metadata()) }
    public func info(_ message: @autoclosure () -> String, _ metadata: @autoclosure () -> Metadata = [:]) { log(.info, message(), metadata()) }
    public func warning(_ message: @autoclosure () -> String, _ metadata: @autoclosure () -> Metadata = [:]) { log(.warning, message(), metadata()) }
    public func error(_ message: @autoclosure () -> String, _ metadata: @autoclosure () -> Metadata = [:]) { log(.error, message(), metadata()) }
    public func critical(_ message: @autoclosure () -> String, _ metadata: @autoclosure () -> Metadata = [:]) { log(.critical, message(), metadata()) }

    /// The same sink under another label.
    public func labeled(_ label: String) -> Logger { Logger(label: label, level: level, handler: handler) }
}

public struct LogRecord: Sendable {
    public var label: String
    public var level: Logger.Level
    public var message: String
    public var metadata: Logger.Metadata
    public var date: Date

    public init(label: String, level: Logger.Level, message: String, metadata: Logger.Metadata, date: Date) {
        self.label = label
        self.level = level
        self.message = message
        self.metadata = metadata
        self.date = date
    }
}

public protocol LogHandler: Sendable {
    func log(_ record: LogRecord)
}

/// How `StderrLogHandler` writes a record (`log_format`).
public enum LogFormat: String, Sendable, CaseIterable {
    /// logfmt: `ts=… level=info label=server msg="listening" port=8080`.
    case text
    /// One JSON object per line: `{"ts":…,"level":"info","label":"server","msg":"listening","port":"8080"}`.
    case json
}

/// One record per line on stderr, as logfmt (`text`) or JSON (`json`).
public struct StderrLogHandler: LogHandler {
    public let format: LogFormat

    public init(format: LogFormat = .text) {
        self.format = format
    }

    public func log(_ record: LogRecord) {
        FileHandle.standardError.write(Data(Self.line(record, format: format).utf8))
    }

    /// The line written for `record`, newline included.
    public static func line(_ record: LogRecord, format: LogFormat) -> String {
        switch format {
        case .text:
            var line = "ts=\(record.date.timeIntervalSince1970) level=\(record.level) label=\(record.label) msg=\"\(record.message)\""
            for key in record.metadata.keys.sorted() {
                let value = record.metadata[key] ?? ""
                line += value.contains(" ") || value.isEmpty ? " \(key)=\"\(value)\"" : " \(key)=\(value)"
            }
            return line + "\n"
        case .json:
            // ts, level, label and msg first (in that order, for people reading the raw stream), then the
            // metadata keys sorted. A metadata key equal to one of the four is written as `meta.<key>`
            // so it cannot shadow them.
            var out: [UInt8] = []
            out.reserveCapacity(128)
            out += Array("{\"ts\":\(record.date.timeIntervalSince1970),\"level\":\"\(record.level)\",\"label\":".utf8)
            JSONWriter.writeString(record.label, into: &out)
            out += Array(",\"msg\":".utf8)
            JSONWriter.writeString(record.message, into: &out)
            for key in record.metadata.keys.sorted() {
                out.append(UInt8(ascii: ","))
                JSONWriter.writeString(Self.reserved.contains(key) ? "meta." + key : key, into: &out)
                out.append(UInt8(ascii: ":"))
                JSONWriter.writeString(record.metadata[key] ?? "", into: &out)
            }
            out += Array("}\n".utf8)
            return String(decoding: out, as: UTF8.self)
        }
    }

    private static let reserved: Set<String> = ["ts", "level", "label", "msg"]
}

/// Keeps records in memory so tests can assert on what was logged.
/// `Locked` (NSLock), not `Mutex`: ThreadSanitizer does not see the futex `Mutex` uses on Linux,
/// and reported the concurrent loggers of LoggerTests as a race (`make test-tsan`).
public final class MemoryLogHandler: LogHandler, Sendable {
    private let records = Locked<[LogRecord]>([])

    public init() {}

    public func log(_ record: LogRecord) { records.withLock { $0.append(record) } }

    public var all: [LogRecord] { records.withLock { $0 } }
}
