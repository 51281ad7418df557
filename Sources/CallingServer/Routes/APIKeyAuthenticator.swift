import CallingAuth
import CallingCore
import CallingStore
import CallingTransport
import Foundation

/// Checks the API key of a server-to-server route (`/v1/calls…`, `/v1/tokens`: scope `calls`;
/// `/v1/admin/…`: scope `admin`) against the store (`context.access`: PostgreSQL with
/// `database_url`, so a key works on every node). One for the whole server, used by the route
/// table's `.apiKey` rows. Service thread; the lookup runs on the store queue and the answer
/// comes back through `context.post`.
// @unchecked Sendable: holds only constants; store completions capture it solely to hop back.
final class APIKeyAuthenticator: @unchecked Sendable {
    let context: ServiceContext
    let logger: Logger

    init(context: ServiceContext, logger: Logger) {
        self.context = context
        self.logger = logger
    }

    /// The key from `X-API-Key` or `Authorization: Bearer csk_…`, checked for `scope`; `then` runs
    /// on the service thread with the key's record or the 401/403/503 to send.
    func authenticate(_ request: HTTPRequest, scope: String, then: @escaping @Sendable (Result<APIKeyRecord, HTTPResponse>) -> Void) {
        let presented = request.headers["x-api-key"].map { $0.trimmingCharacters(in: .whitespaces) } ?? request.bearerToken
        guard let key = presented, !key.isEmpty else { return then(.failure(Problem.apiKeyMissing)) }
        // A peer JWT or anything else that cannot be a key is refused without touching the store.
        guard key.hasPrefix(APIKey.prefix) else { return then(.failure(Problem.apiKeyInvalid)) }
        context.access.activeAPIKey(hash: APIKey.hash(key)) { [context, logger] result in
            context.post {
                switch result {
                case .success(let record?) where record.allows(scope): then(.success(record))
                case .success(let record?): then(.failure(Problem.apiKeyWrongScope(scope, has: record.scopes)))
                case .success(nil): then(.failure(Problem.apiKeyInvalid))
                case .failure(let error):
                    context.metrics.storeFailures += 1
                    logger.error("API key lookup failed", ["error": "\(error)"])
                    then(.failure(Problem.storeUnavailable()))
                }
            }
        }
    }
}
