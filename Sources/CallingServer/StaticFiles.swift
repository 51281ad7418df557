import CallingAuth
import CallingCore
import CallingTransport
import Foundation

/// The browser SDK and the demo pages, served from one folder (`web_root`, the repository's
/// `sdk/js/` by default):
///
/// | URL | file |
/// | --- | --- |
/// | `/sdk/<path>` | `<web_root>/<path>` (`/sdk/calling-client.js`, `/sdk/calling-client.d.ts`, `/sdk/demo/…`) |
/// | `/` | `<web_root>/demo/index.html` |
/// | `/dashboard` | `<web_root>/demo/dashboard.html` |
///
/// The folder is read into memory once, at start-up, by walking it without following symbolic
/// links. A request is answered by looking its path up in that table, so nothing outside the folder
/// can be served whatever the path spells (`..`, encoded or double-encoded dots, NUL bytes, links):
/// a path that is not a key is a 404. It also keeps disk reads off the service thread. The price is
/// that an edited page is seen after a restart.
struct StaticFiles: Sendable {
    struct Asset: Sendable {
        let body: [UInt8]
        let contentType: String
        /// A strong validator: the first 128 bits of the body's SHA-256, quoted.
        let etag: String
    }

    /// Relative path (`demo/index.html`) → asset.
    let assets: [String: Asset]
    /// The folder the assets came from, resolved; nil when there is none.
    let root: String?
    let pagesEnabled: Bool

    /// Extensions served, with their media types. Anything else in the folder is not served.
    static let contentTypes: [String: String] = [
        "html": "text/html; charset=utf-8", "js": "text/javascript; charset=utf-8", "mjs": "text/javascript; charset=utf-8",
        "css": "text/css; charset=utf-8", "ts": "application/typescript; charset=utf-8", "json": "application/json",
        "svg": "image/svg+xml", "png": "image/png", "ico": "image/x-icon", "webmanifest": "application/manifest+json",
    ]
    /// Bounds on what start-up reads, so a web_root pointed at a big folder by mistake fails loudly.
    static let maxFiles = 512
    static let maxTotalBytes = 16 << 20

    enum LoadError: Error, CustomStringConvertible {
        case notADirectory(String)
        case tooLarge(String)
        case unreadable(String)

        var description: String {
            switch self {
            case .notADirectory(let path): return "web_root \(path) is not a readable folder"
            case .tooLarge(let path): return "web_root \(path) holds more than \(StaticFiles.maxFiles) files or \(StaticFiles.maxTotalBytes) bytes"
            case .unreadable(let path): return "cannot read \(path)"
            }
        }
    }

    /// Serves nothing: no folder was found (the REST and WebSocket routes are unaffected).
    static let empty = StaticFiles(assets: [:], root: nil, pagesEnabled: false)

    private init(assets: [String: Asset], root: String?, pagesEnabled: Bool) {
        self.assets = assets
        self.root = root
        self.pagesEnabled = pagesEnabled
    }

    /// Reads every servable regular file under `root`. Symbolic links (to files or folders) and
    /// names starting with a dot are skipped, not followed.
    init(root: String, pagesEnabled: Bool) throws(LoadError) {
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: root, isDirectory: &isDirectory), isDirectory.boolValue else {
            throw .notADirectory(root)
        }
        let resolved = (root as NSString).resolvingSymlinksInPath
        var assets: [String: Asset] = [:]
        var total = 0
        func walk(_ folder: String, prefix: String) throws(LoadError) {
            let names: [String]
            do { names = try FileManager.default.contentsOfDirectory(atPath: folder).sorted() } catch { throw .unreadable(folder) }
            for name in names where Self.isServableName(name) {
                let path = (folder as NSString).appendingPathComponent(name)
                // attributesOfItem does not follow a final symbolic link: a link reports its own type.
                guard let type = (try? FileManager.default.attributesOfItem(atPath: path))?[.type] as? FileAttributeType else { continue }
                let relative = prefix.isEmpty ? name : prefix + "/" + name
                if type == .typeDirectory {
                    try walk(path, prefix: relative)
                } else if type == .typeRegular, let contentType = Self.contentType(of: name) {
                    guard let data = FileManager.default.contents(atPath: path) else { throw .unreadable(path) }
                    total += data.count
                    guard assets.count < Self.maxFiles, total <= Self.maxTotalBytes else { throw .tooLarge(root) }
                    let body = [UInt8](data)
                    assets[relative] = Asset(body: body, contentType: contentType, etag: Self.etag(body))
                }
            }
        }
        try walk(resolved, prefix: "")
        self.init(assets: assets, root: resolved, pagesEnabled: pagesEnabled)
    }

    /// Where the assets live when `web_root` is not set: an installed copy beside the binary
    /// (`<prefix>/bin/calling-server` → `<prefix>/share/calling-server/sdk`), else the repository's
    /// `sdk/js` found above the binary (`.build/debug/calling-server` in a checkout), else `./sdk/js`.
    static func defaultRoot(executable: String?, workingDirectory: String) -> String? {
        let marker = "calling-client.js"
        var candidates: [String] = []
        if let executable {
            let binDir = ((executable as NSString).resolvingSymlinksInPath as NSString).deletingLastPathComponent
            candidates.append(((binDir as NSString).deletingLastPathComponent as NSString).appendingPathComponent("share/calling-server/sdk"))
            var folder = binDir
            for _ in 0..<5 {
                candidates.append((folder as NSString).appendingPathComponent("sdk/js"))
                folder = (folder as NSString).deletingLastPathComponent
            }
        }
        candidates.append((workingDirectory as NSString).appendingPathComponent("sdk/js"))
        return candidates.first { FileManager.default.fileExists(atPath: ($0 as NSString).appendingPathComponent(marker)) }
    }

    /// The static route for `request`, or nil when its path is not one (the caller goes on routing).
    func response(for request: HTTPRequest) -> HTTPResponse? {
        guard let relative = Self.relativePath(request.path, pagesEnabled: pagesEnabled) else { return nil }
        guard request.method == .get || request.method == .head else {
            return Problem.methodNotAllowed(["GET", "HEAD"])
        }
        guard let asset = assets[relative] else {
            return Problem.noFile(request)
        }
        var headers: [(String, String)] = [
            ("etag", asset.etag),
            // Revalidate on every use: URLs are not versioned, and a 304 costs one small round trip.
            ("cache-control", "no-cache"),
            ("x-content-type-options", "nosniff"),
        ]
        if let typings = Self.typingsName(of: relative), assets[typings] != nil {
            // Where Deno and other URL-importing TypeScript tools find the module's types; relative
            // to the module's own URL, so it holds behind a proxy that moves `/sdk/`.
            headers.append(("x-typescript-types", "./" + (typings.split(separator: "/").last.map(String.init) ?? typings)))
        }
        if asset.contentType.hasPrefix("text/html") {
            // Pages load only this server's scripts and styles; media and sockets go where the app says.
            headers += [
                ("content-security-policy",
                 "default-src 'self'; connect-src 'self' ws: wss: http: https:; media-src 'self' blob: mediastream:; img-src 'self' data:; frame-ancestors 'none'"),
                ("referrer-policy", "no-referrer"),
            ]
        }
        if let tags = request.headers["if-none-match"], Self.matches(tags, asset.etag) {
            return HTTPResponse(status: 304, headers: headers)
        }
        return HTTPResponse(status: 200, headers: [("content-type", asset.contentType)] + headers, body: asset.body)
    }

    /// `/sdk/…`, `/` and `/dashboard` → the table key; nil for other paths. A path under `/sdk/` that
    /// cannot name a file of the table (a segment that is empty, starts with a dot, or holds a
    /// character outside `A-Z a-z 0-9 . _ -`) maps to the empty key, which is never present: a 404.
    static func relativePath(_ path: String, pagesEnabled: Bool) -> String? {
        if path == "/" { return pagesEnabled ? "demo/index.html" : nil }
        if path == "/dashboard" || path == "/dashboard/" { return pagesEnabled ? "demo/dashboard.html" : nil }
        guard path.hasPrefix("/sdk/") else { return nil }
        let rest = path.dropFirst("/sdk/".count)
        let segments = rest.split(separator: "/", omittingEmptySubsequences: false)
        guard !segments.isEmpty, segments.allSatisfy({ isServableName(String($0)) }) else { return "" }
        if !pagesEnabled, segments.first == "demo" { return "" }
        return String(rest)
    }

    /// `calling-client.js` → `calling-client.d.ts`, the name TypeScript gives a `.js` module's typings.
    static func typingsName(of relative: String) -> String? {
        relative.hasSuffix(".js") ? relative.dropLast(3) + ".d.ts" : nil
    }

    static func isServableName(_ name: String) -> Bool {
        guard let first = name.utf8.first, first != UInt8(ascii: "."), name.utf8.count <= 255 else { return false }
        return name.utf8.allSatisfy { byte in
            (byte >= 0x30 && byte <= 0x39) || (byte >= 0x41 && byte <= 0x5A) || (byte >= 0x61 && byte <= 0x7A)
                || byte == UInt8(ascii: ".") || byte == UInt8(ascii: "_") || byte == UInt8(ascii: "-")
        }
    }

    static func contentType(of name: String) -> String? {
        guard let dot = name.lastIndex(of: ".") else { return nil }
        return contentTypes[String(name[name.index(after: dot)...]).lowercased()]
    }

    static func etag(_ body: [UInt8]) -> String {
        guard let digest = Digest.sha256(body) else { return "\"\(body.count)\"" }
        return "\"" + digest.prefix(16).map { String(format: "%02x", $0) }.joined() + "\""
    }

    /// RFC 9110 §13.1.2: `If-None-Match` is `*` or a list of entity tags, compared weakly.
    static func matches(_ header: String, _ etag: String) -> Bool {
        let strong = etag.hasPrefix("W/") ? String(etag.dropFirst(2)) : etag
        for tag in header.split(separator: ",") {
            let trimmed = tag.trimmingCharacters(in: .whitespaces)
            if trimmed == "*" { return true }
            let candidate = trimmed.hasPrefix("W/") ? String(trimmed.dropFirst(2)) : trimmed
            if candidate == strong { return true }
        }
        return false
    }
}
