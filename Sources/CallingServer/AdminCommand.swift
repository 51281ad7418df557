import CallingCore
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// `calling-server admin …`: the admin API (`/v1/admin/…`) from a shell. The key comes from the
/// environment (`CALLING_ADMIN_KEY`) or a file (`--key-file`), never from a flag value, which
/// would show in `ps` and shell history, the same rule as the server's own secrets.
enum AdminCommand {
    static let usage = """
        usage: calling-server admin <action> [--url http://127.0.0.1:8080] [--key-file FILE]
          rooms   [--room R]                       live rooms and their peers (JSON)
          kick    --room R --peer P                close the peer (4403); its token cannot rejoin
          end     --room R                         close every peer of the room (4404) and end its calls
          send    --room R [--peer P] --payload JSON
                                                   a data frame from "_server" to the room or one peer
          drain   [--off true]                     refuse new joins (503 draining); --off true accepts them again
          status  [--wait SECONDS]                 drain status; --wait polls until the node is empty (exit 1 on timeout)
        The API key (scope admin) is read from CALLING_ADMIN_KEY, or from --key-file FILE.
        """

    static func run(_ arguments: [String], environment: [String: String]) -> Int32 {
        guard case (let action, var flags)? = CallingCommand.actionAndFlags(arguments, usage: usage) else { return 64 }
        if flags["key"] != nil || flags["api-key"] != nil || flags["api_key"] != nil {
            CallingCommand.printError("admin: the key is never a flag value; set CALLING_ADMIN_KEY or pass --key-file FILE")
            return 64
        }
        let base = flags.removeValue(forKey: "url") ?? environment["CALLING_ADMIN_URL"] ?? "http://127.0.0.1:8080"
        let key: String
        if let file = flags.removeValue(forKey: "key-file") ?? flags.removeValue(forKey: "key_file") {
            guard let data = FileManager.default.contents(atPath: file) else {
                CallingCommand.printError("admin: cannot read key file \(file)")
                return 66
            }
            key = String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        } else if let fromEnvironment = environment["CALLING_ADMIN_KEY"] {
            key = fromEnvironment.trimmingCharacters(in: .whitespacesAndNewlines)
        } else {
            CallingCommand.printError("admin: no API key: set CALLING_ADMIN_KEY or pass --key-file FILE")
            return 64
        }
        func path(_ segment: String) -> String {
            var allowed = CharacterSet.alphanumerics
            allowed.insert(charactersIn: "-._~")
            return segment.addingPercentEncoding(withAllowedCharacters: allowed) ?? segment
        }
        func required(_ name: String) -> String? {
            guard let value = flags[name], !value.isEmpty else {
                CallingCommand.printError("admin \(action): --\(name) is required\n\(usage)")
                return nil
            }
            return value
        }
        let client = Client(base: base, key: key)
        switch action {
        case "rooms":
            if let room = flags["room"] { return client.call("GET", "/v1/admin/rooms/\(path(room))") }
            return client.call("GET", "/v1/admin/rooms")
        case "kick":
            guard let room = required("room"), let peer = required("peer") else { return 64 }
            return client.call("POST", "/v1/admin/rooms/\(path(room))/peers/\(path(peer))/kick")
        case "end":
            guard let room = required("room") else { return 64 }
            return client.call("POST", "/v1/admin/rooms/\(path(room))/end")
        case "send":
            guard let room = required("room"), let text = required("payload") else { return 64 }
            guard let payload = try? JSONParser.parse(Array(text.utf8)) else {
                CallingCommand.printError("admin send: --payload must be JSON")
                return 64
            }
            var body: [String: JSONValue] = ["payload": payload]
            if let peer = flags["peer"] { body["to"] = .string(peer) }
            return client.call("POST", "/v1/admin/rooms/\(path(room))/data", body: .object(body))
        case "drain":
            let off = flags["off"].map { $0 == "true" || $0 == "1" || $0 == "yes" } ?? false
            return client.call("POST", "/v1/admin/drain", body: ["draining": .bool(!off)])
        case "status":
            guard let raw = flags["wait"] else { return client.call("GET", "/v1/admin/drain") }
            guard let seconds = Double(raw), seconds >= 0 else {
                CallingCommand.printError("admin status: --wait must be a number of seconds")
                return 64
            }
            let deadline = Date().addingTimeInterval(seconds)
            while true {
                let (code, body) = client.exchange("GET", "/v1/admin/drain")
                guard code == 0, let body else { return client.call("GET", "/v1/admin/drain") }
                if body["empty"] == .bool(true) || Date() >= deadline {
                    print(JSONWriter.string(body))
                    return body["empty"] == .bool(true) ? 0 : 1
                }
                Thread.sleep(forTimeInterval: 0.5)
            }
        default:
            CallingCommand.printError("admin: unknown action '\(action)'\n\(usage)")
            return 64
        }
    }

    /// A blocking JSON-over-HTTP exchange with the server (URLSession; one request at a time).
    struct Client {
        let base: String
        let key: String

        /// Prints the answer: a 2xx body on stdout (exit 0), a problem on stderr (exit 1), or why
        /// the server could not be reached (exit 69, EX_UNAVAILABLE).
        func call(_ method: String, _ path: String, body: JSONValue? = nil) -> Int32 {
            let (code, answer) = exchange(method, path, body: body, printing: true)
            if code == 0, let answer { print(JSONWriter.string(answer)) }
            return code
        }

        /// The parsed 2xx body with exit code 0, or nil and the exit code (the problem printed when `printing`).
        func exchange(_ method: String, _ path: String, body: JSONValue? = nil, printing: Bool = true) -> (Int32, JSONValue?) {
            guard let url = URL(string: base.trimmingCharacters(in: CharacterSet(charactersIn: "/")) + path),
                  url.scheme == "http" || url.scheme == "https"
            else {
                CallingCommand.printError("admin: --url must be an http:// or https:// URL, not '\(base)'")
                return (64, nil)
            }
            var request = URLRequest(url: url, timeoutInterval: 10)
            request.httpMethod = method
            request.setValue(key, forHTTPHeaderField: "X-API-Key")
            if let body {
                request.setValue("application/json", forHTTPHeaderField: "Content-Type")
                request.httpBody = Data(JSONWriter.bytes(body))
            }
            let outcome = Locked<(Data?, Int, String?)?>(nil)
            let done = DispatchSemaphore(value: 0)
            URLSession.shared.dataTask(with: request) { data, response, error in
                outcome.withLock { $0 = (data, (response as? HTTPURLResponse)?.statusCode ?? 0, error.map { "\($0.localizedDescription)" }) }
                done.signal()
            }.resume()
            done.wait()
            guard let (data, status, failure) = outcome.withLock({ $0 }) else { return (69, nil) }
            if let failure, status == 0 {
                CallingCommand.printError("admin: cannot reach \(base): \(failure)")
                return (69, nil)
            }
            let parsed = data.flatMap { try? JSONParser.parse([UInt8]($0)) }
            guard (200..<300).contains(status) else {
                if printing {
                    let text = data.map { String(decoding: $0, as: UTF8.self) } ?? ""
                    CallingCommand.printError("admin: HTTP \(status) \(parsed?["code"]?.stringValue ?? ""): \(parsed?["detail"]?.stringValue ?? text)")
                }
                return (1, parsed)
            }
            return (0, parsed ?? .null)
        }
    }
}
