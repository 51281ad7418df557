import CGStreamer
import CallingLogging
import Foundation

/// Why the media engine could not do something.
public enum MediaError: Error, Equatable, CustomStringConvertible {
    /// GStreamer elements that are not installed, with the Debian packages that bring them.
    case missingElements([String], packages: [String])
    case pipeline(String)
    case negotiation(String)
    case noPeerConnection(String)
    case noDataChannel(String)

    /// What failed, for people.
    public var description: String {
        switch self {
        case .missingElements(let names, let packages):
            return "GStreamer elements missing: \(names.joined(separator: ", ")) (apt-get install \(packages.joined(separator: " ")))"
        case .pipeline(let detail): return "media pipeline: \(detail)"
        case .negotiation(let detail): return "negotiation: \(detail)"
        case .noPeerConnection(let peer): return "no peer connection with \(peer)"
        case .noDataChannel(let label): return "no open data channel \(label)"
        }
    }
}

/// Process-wide GStreamer set-up and the bridges from GLib callbacks to Swift.
enum GStreamer {
    /// Every element the engine instantiates, with the Debian package that installs it.
    private static let requiredElements: [(String, String)] = [
        ("webrtcbin", "gstreamer1.0-plugins-bad"), ("dtlsdec", "gstreamer1.0-plugins-bad"),
        ("srtpdec", "gstreamer1.0-plugins-bad"), ("sctpdec", "gstreamer1.0-plugins-bad"),
        ("nicesrc", "gstreamer1.0-nice"), ("opusenc", "gstreamer1.0-plugins-base"),
        ("opusdec", "gstreamer1.0-plugins-base"), ("rtpopuspay", "gstreamer1.0-plugins-good"),
        ("rtpopusdepay", "gstreamer1.0-plugins-good"), ("audiotestsrc", "gstreamer1.0-plugins-base"),
        ("audioconvert", "gstreamer1.0-plugins-base"), ("audioresample", "gstreamer1.0-plugins-base"),
        ("appsrc", "gstreamer1.0-plugins-base"), ("appsink", "gstreamer1.0-plugins-base"),
        ("volume", "gstreamer1.0-plugins-base"),
    ]

    private static let initialization: Result<Void, MediaError> = {
        var error: UnsafeMutablePointer<GError>?
        guard gst_init_check(nil, nil, &error) != 0 else {
            defer { g_error_free(error) }
            return .failure(.pipeline("gst_init failed: \(error.map { String(cString: $0.pointee.message) } ?? "unknown")"))
        }
        let missing = requiredElements.filter { name, _ in
            guard let factory = gst_element_factory_find(name) else { return true }
            gst_object_unref(UnsafeMutableRawPointer(factory))
            return false
        }
        guard missing.isEmpty else {
            return .failure(.missingElements(missing.map(\.0), packages: Array(Set(missing.map(\.1))).sorted()))
        }
        return .success(())
    }()

    /// Initialises GStreamer once per process and checks that every element is installed.
    static func initialize() throws(MediaError) { try initialization.get() }

    // MARK: pointers

    static func cast<T>(_ pointer: UnsafeMutableRawPointer?) -> UnsafeMutablePointer<T> {
        pointer!.assumingMemoryBound(to: T.self)
    }

    static func string(_ pointer: UnsafeMutablePointer<gchar>?) -> String? {
        guard let pointer else { return nil }
        defer { g_free(pointer) }
        return String(cString: pointer)
    }

    static func errorMessage(_ error: UnsafeMutablePointer<GError>?) -> String {
        guard let error else { return "unknown error" }
        defer { g_error_free(error) }
        return String(cString: error.pointee.message)
    }

    /// `gst_parse_bin_from_description` with unlinked pads ghosted.
    static func bin(_ description: String) throws(MediaError) -> UnsafeMutablePointer<GstElement> {
        var error: UnsafeMutablePointer<GError>?
        guard let bin = gst_parse_bin_from_description(description, 1, &error), error == nil else {
            throw .pipeline("\(errorMessage(error)) in '\(description)'")
        }
        return bin
    }

    // MARK: promises

    /// What became of a GstPromise.
    enum PromiseReply {
        /// Answered; the structure (nil for a bare success) belongs to the promise.
        case replied(UnsafePointer<GstStructure>?)
        /// Interrupted, expired, or released unanswered: webrtcbin drops the promises still
        /// queued on its thread when it stops.
        case dropped
    }

    /// Runs `body` exactly once with what became of a GstPromise, on the thread that answers it
    /// (or the one that releases it unanswered). webrtcbin answers on its own thread and
    /// deadlocks if that thread waits for anything webrtcbin does, so replies are handed to Swift
    /// continuations, never waited for.
    static func promise(_ body: @escaping @Sendable (PromiseReply) -> Void) -> UnsafeMutablePointer<GstPromise> {
        let handler = Unmanaged.passRetained(PromiseHandler(body)).toOpaque()
        return gst_promise_new_with_change_func({ promise, data in
            let handler = Unmanaged<PromiseHandler>.fromOpaque(data!).takeUnretainedValue()
            let replied = gst_promise_wait(promise) == GST_PROMISE_RESULT_REPLIED
            handler.answer(replied ? .replied(gst_promise_get_reply(promise)) : .dropped)
        }, handler, { data in Unmanaged<PromiseHandler>.fromOpaque(data!).release() })
    }

    /// Owned by the promise (released by its destroy notify): a promise freed without ever
    /// changing state still resumes whoever waits for it.
    private final class PromiseHandler: Sendable {
        private let body: @Sendable (PromiseReply) -> Void
        private let answered = Locked(false)
        init(_ body: @escaping @Sendable (PromiseReply) -> Void) { self.body = body }

        func answer(_ reply: PromiseReply) {
            guard answered.withLock({ answered -> Bool in
                defer { answered = true }
                return !answered
            }) else { return }
            body(reply)
        }

        deinit { if !answered.withLock({ $0 }) { body(.dropped) } }
    }

    /// Emits an action that answers a promise with a session description under `field` and
    /// returns a copy of it (owned by the caller, freed with `gst_webrtc_session_description_free`).
    static func description(
        field: String, _ emit: (UnsafeMutablePointer<GstPromise>) -> Void
    ) async throws -> DescriptionHandle {
        try await withCheckedThrowingContinuation { (done: CheckedContinuation<DescriptionHandle, any Error>) in
            let promise = promise { outcome in
                guard case .replied(let reply) = outcome else {
                    return done.resume(throwing: MediaError.negotiation("no \(field): the peer connection closed"))
                }
                if let description = cs_reply_description(reply, field) {
                    done.resume(returning: DescriptionHandle(gst_webrtc_session_description_copy(description)))
                } else {
                    let why = cs_reply_error(reply).map { String(cString: $0) } ?? "no \(field) in the reply"
                    done.resume(throwing: MediaError.negotiation(why))
                }
            }
            emit(promise)
            gst_promise_unref(promise)
        }
    }

    /// Emits an action whose promise carries no value, and waits for it (an `error` field fails
    /// it, and so does a promise dropped unanswered: the step never happened).
    static func completion(_ what: String, _ emit: (UnsafeMutablePointer<GstPromise>) -> Void) async throws {
        try await withCheckedThrowingContinuation { (done: CheckedContinuation<Void, any Error>) in
            let promise = promise { outcome in
                guard case .replied(let reply) = outcome else {
                    return done.resume(throwing: MediaError.negotiation("\(what): the peer connection closed"))
                }
                if let error = cs_reply_error(reply) {
                    done.resume(throwing: MediaError.negotiation("\(what): \(String(cString: error))"))
                } else {
                    done.resume()
                }
            }
            emit(promise)
            gst_promise_unref(promise)
        }
    }

    // MARK: signals

    /// Connects a C callback to a GObject signal with `target` as user data, held weakly: a
    /// callback that fires while its peer connection is being torn down finds nil and returns.
    @discardableResult
    static func connect(_ instance: UnsafeMutableRawPointer, _ signal: String, _ target: AnyObject,
                        _ callback: GCallback) -> gulong
    {
        let box = Unmanaged.passRetained(WeakTarget(target)).toOpaque()
        return g_signal_connect_data(instance, signal, callback, box, { data, _ in
            Unmanaged<WeakTarget>.fromOpaque(data!).release()
        }, GConnectFlags(rawValue: 0))
    }

    static func target<T: AnyObject>(_ data: gpointer?, as: T.Type) -> T? {
        guard let data else { return nil }
        return Unmanaged<WeakTarget>.fromOpaque(data).takeUnretainedValue().object as? T
    }

    final class WeakTarget: @unchecked Sendable {
        // @unchecked: a weak reference is read atomically by the runtime; it is never reassigned.
        weak var object: AnyObject?
        init(_ object: AnyObject) { self.object = object }
    }
}

/// An owned `GstWebRTCSessionDescription` copy, freed when released.
/// An owned `GstStructure` (create-offer options) handed to a promise-taking call.
final class StructureHandle: @unchecked Sendable {
    // @unchecked: immutable after init; webrtcbin only reads the structure.
    let pointer: UnsafeMutablePointer<GstStructure>
    init(_ pointer: UnsafeMutablePointer<GstStructure>) { self.pointer = pointer }
    deinit { gst_structure_free(pointer) }
}

final class DescriptionHandle: @unchecked Sendable {
    // @unchecked: immutable after init; the pointee is only read.
    let pointer: UnsafeMutablePointer<GstWebRTCSessionDescription>
    init(_ pointer: UnsafeMutablePointer<GstWebRTCSessionDescription>) { self.pointer = pointer }
    deinit { gst_webrtc_session_description_free(pointer) }

    var text: String { GStreamer.string(gst_sdp_message_as_text(pointer.pointee.sdp)) ?? "" }
}
