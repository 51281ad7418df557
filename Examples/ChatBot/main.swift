// A chat bot on the room protocol: joins a room with a peer token and answers every message.
//
//   calling-server serve --port 8080 --data-dir /tmp/chat &
//   CHATBOT_URL=ws://127.0.0.1:8080 \
//   CHATBOT_TOKEN=$(calling-server token --data-dir /tmp/chat --room support --peer bot --name Bot) \
//     swift run ChatBot
//
// (Not CALLING_URL/CALLING_TOKEN: every CALLING_* variable is a server setting, and a server
// started from the same shell would refuse the unknown keys.)
//
// Commands: "/help", "/time", "/who"; anything else is echoed. The bot shows a typing indicator
// while "thinking", marks each message it answered as read, and survives server restarts (the client
// reconnects with backoff and resumes the chat from its last seq, so nothing is answered twice).
// It exits on a terminal state (token refused or expired, replaced by another bot with the same id).
// Built with the package (target ChatBot) so it cannot rot; docs/sdk.md "Example: chat bot".
import CallingClient
import Foundation

/// Unbuffered log line (print is block-buffered when stdout is a pipe).
func say(_ line: String) { FileHandle.standardOutput.write(Data((line + "\n").utf8)) }

let environment = ProcessInfo.processInfo.environment
guard let token = environment["CHATBOT_TOKEN"] else {
    FileHandle.standardError.write(Data("set CHATBOT_TOKEN to a peer token (calling-server token --room R --peer bot)\n".utf8))
    exit(64)
}
let url = URL(string: environment["CHATBOT_URL"] ?? "ws://127.0.0.1:8080")!

var options = SignalingOptions()
options.maxReconnectAttempts = 10
let client = SignalingClient(url: url, token: token, options: options)

func reply(to message: ChatMessage) -> String {
    switch message.text.trimmingCharacters(in: .whitespacesAndNewlines).lowercased() {
    case "/help": return "Commands: /help, /time, /who. Anything else I repeat."
    case "/time": return "It is \(ISO8601DateFormatter().string(from: Date()))."
    case "/who": return "In this room: " + (client.peers.map { $0.name ?? $0.peerID.rawValue }.joined(separator: ", "))
    default: return "You said: \(message.text)"
    }
}

do {
    let welcome = try await client.connect()
    say("joined \(welcome.roomID) as \(welcome.peerID) with \(welcome.peers.count) other peer(s)")
} catch let error as CallingError {
    FileHandle.standardError.write(Data("cannot join: \(error) (retryable: \(error.isRetryable))\n".utf8))
    exit(error.isRetryable ? 75 : 77)
}

for await event in client.events {
    switch event {
    case .chat(let message):
        client.setTyping(true)
        let answer = reply(to: message)
        do {
            // Retried with the same client_id on timeout or reconnect: the room sees it once.
            _ = try await client.sendChat(answer, meta: ["in_reply_to": .int(message.seq)])
            try? client.markRead(message.seq)
        } catch let error as CallingError {
            say("reply to #\(message.seq) failed: \(error)")
        }
        client.setTyping(false)
    case .peerJoined(let peer):
        _ = try? await client.sendChat("Hello \(peer.name ?? peer.peerID.rawValue)! Type /help.")
    case .stateChanged(let state):
        say("state: \(state)")
        if state.isTerminal { exit(state == .ended ? 0 : 1) }
    case .error(let error):
        say("error: \(error)")
    default:
        break
    }
}
