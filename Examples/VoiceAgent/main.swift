// A voice agent on the SDK and CallingMedia: joins a room, answers every call (room peers and
// webrtc-proxy HTTP sessions alike), plays a greeting, and reports how loud the caller is.
//
//   calling-server serve --port 8080 --data-dir /tmp/voice &
//   VOICE_URL=ws://127.0.0.1:8080 \
//   VOICE_TOKEN=$(calling-server token --data-dir /tmp/voice --room support --peer agent --role agent) \
//   VOICE_GREETING=greeting.wav \
//     swift run VoiceAgent
//
// Without VOICE_GREETING it plays a 440 Hz tone. With VOICE_ASK="<peer> <method> [payload]" it asks
// that peer's front end by RPC once the peer is in the room and prints the answer (docs/sdk.md
// "RPC"); the front end can ask the agent `agent-state` the same way. The calls survive short network drops (the SDK
// gives a lost connection 5 s to come back, docs/sdk.md "Media") and the room connection
// reconnects on its own; Ctrl-C hangs up and leaves. Built with the package (target VoiceAgent).
import CallingClient
import CallingMedia
import Foundation

func say(_ line: String) { FileHandle.standardOutput.write(Data((line + "\n").utf8)) }

let environment = ProcessInfo.processInfo.environment
guard let token = environment["VOICE_TOKEN"] else {
    FileHandle.standardError.write(Data("set VOICE_TOKEN to a room token (calling-server token --room R --peer agent)\n".utf8))
    exit(64)
}
let url = URL(string: environment["VOICE_URL"] ?? "ws://127.0.0.1:8080")!

/// The loudest 20 ms frame per caller since the last report, in dBFS.
final class Loudness: @unchecked Sendable {
    // @unchecked: `peaks` only under `lock`.
    private let lock = NSLock()
    private var peaks: [PeerID: Double] = [:]

    func add(_ peer: PeerID, _ samples: [Int16]) {
        let power = samples.reduce(0.0) { $0 + Double($1) * Double($1) } / Double(max(1, samples.count))
        let dbfs = power > 0 ? 10 * log10(power) - 90.3 : -120
        lock.withLock { peaks[peer] = max(peaks[peer] ?? -120, dbfs) }
    }

    func take() -> [PeerID: Double] { lock.withLock { defer { peaks = [:] }; return peaks } }
}

let loudness = Loudness()
var media = MediaOptions()
media.input = environment["VOICE_GREETING"].map { .wav(URL(fileURLWithPath: $0)) } ?? .tone(440)
media.output = .pcm { peer, samples in loudness.add(peer, samples) }
let engine = try GStreamerMediaEngine(options: media)
await engine.warmUp()

var options = SignalingOptions()
options.mediaEngine = engine           // ICE servers come from GET /v1/ice before each call
options.maxReconnectAttempts = 20
let client = SignalingClient(url: url, token: token, options: options)
let events = client.events

// The front end may ask what the agent is doing; a real agent would report its pipeline's state.
client.registerRpcMethod("agent-state") { _ in #"{"state":"listening"}"# }

/// VOICE_ASK: whom to ask what by RPC, once that peer is in the room.
let ask: (peer: PeerID, method: String, payload: String)? = environment["VOICE_ASK"].flatMap { text in
    let parts = text.split(separator: " ", maxSplits: 2).map(String.init)
    return parts.count >= 2 ? (PeerID(parts[0]), parts[1], parts.count > 2 ? parts[2] : "") : nil
}

func askIfPresent(_ peers: [PeerID]) {
    guard let ask, peers.contains(ask.peer) else { return }
    Task {
        do {
            let answer = try await client.performRpc(to: ask.peer, method: ask.method, payload: ask.payload, timeout: 10)
            say("rpc \(ask.peer) \(ask.method): \(answer)")
        } catch let error as RpcError {
            say("rpc \(ask.peer) \(ask.method) failed: \(error.code) \(error.message)")
        }
    }
}

signal(SIGINT, SIG_IGN)
let interrupt = DispatchSource.makeSignalSource(signal: SIGINT)
interrupt.setEventHandler {
    Task {
        for peer in client.peers.map(\.peerID) { client.hangup(peer) }
        await client.disconnect()
        exit(0)
    }
}
interrupt.resume()

Task {
    while true {
        try? await Task.sleep(nanoseconds: 2_000_000_000)
        for (peer, dbfs) in loudness.take().sorted(by: { $0.key.rawValue < $1.key.rawValue }) {
            say("\(peer): \(dbfs > -45 ? "speaking" : "quiet") (\(Int(dbfs)) dBFS)")
        }
    }
}

do {
    let welcome = try await client.connect()
    say("agent \(welcome.peerID) in \(welcome.roomID), waiting for calls")
    askIfPresent(welcome.peers.map(\.peerID))
} catch let error as CallingError {
    FileHandle.standardError.write(Data("cannot join: \(error.localizedDescription)\n".utf8))
    exit(error.isRetryable ? 75 : 77)
}

for await event in events {
    switch event {
    case .incoming(let call):
        say("call from \(call.from)\(call.offer.sessionID == nil ? "" : " (web session)")")
        do {
            try await client.accept(call.from)
        } catch {
            say("could not answer \(call.from): \(error)")
        }
    case .peerJoined(let info):
        askIfPresent([info.peerID])
    case .connectionState(let peer, let state):
        say("\(peer): media \(state.rawValue)")
    case .callFailed(let peer, let error):
        say("\(peer): call failed, \(error.localizedDescription) (retryable: \(error.isRetryable))")
    case .hangup(let peer, let reason):
        say("\(peer): call ended (\(reason.rawValue))")
    case .stats(let sample):
        say("stats rtt \(sample.rttMs.map { "\(Int($0)) ms" } ?? "-"), loss \(sample.packetLoss.map { "\(Int($0 * 100)) %" } ?? "-")")
    case .stateChanged(let state):
        say("room connection: \(state)")
        if state.isTerminal { exit(state == .ended ? 0 : 1) }
    default:
        break
    }
}
