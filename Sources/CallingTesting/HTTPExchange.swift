import CallingCore
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// An HTTP exchange as a test sees it: status, headers (lower-cased names), body.
public struct HTTPExchangeResult: Sendable {
    public var status: Int
    public var headers: [String: String]
    public var body: Data

    public func header(_ name: String) -> String? { headers[name.lowercased()] }
    public var json: [String: JSONValue] { (try? JSONParser.parse([UInt8](body)))?.objectValue ?? [:] }
    public var text: String { String(decoding: body, as: UTF8.self) }
    /// The `code` of a problem+json body.
    public var code: String? { json["code"]?.stringValue }
}

/// Plain HTTP to a server under test on 127.0.0.1; Sendable, so a test can run a request while it
/// plays another peer.
public struct HTTPClient: Sendable {
    public let port: Int

    public init(port: Int) { self.port = port }

    /// Any request with an explicit Content-Type (none when nil) and raw body.
    public func exchange(_ method: String, _ path: String, bearer: String? = nil, contentType: String? = nil,
                         body: String? = nil, headers: [String: String] = [:]) async throws -> HTTPExchangeResult
    {
        var request = URLRequest(url: URL(string: "http://127.0.0.1:\(port)\(path)")!)
        request.httpMethod = method
        request.httpBody = body.map { Data($0.utf8) }
        if let bearer { request.setValue("Bearer \(bearer)", forHTTPHeaderField: "Authorization") }
        if let contentType { request.setValue(contentType, forHTTPHeaderField: "Content-Type") }
        for (name, value) in headers { request.setValue(value, forHTTPHeaderField: name) }
        let (data, response) = try await URLSession.shared.data(for: request)
        let http = response as! HTTPURLResponse
        var fields: [String: String] = [:]
        for (name, value) in http.allHeaderFields {
            if let name = name as? String, let value = value as? String { fields[name.lowercased()] = value }
        }
        return HTTPExchangeResult(status: http.statusCode, headers: fields, body: data)
    }
}
