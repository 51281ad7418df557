import Foundation

/// Why `TokenIssuer.issue(_:)` produced no token.
public enum TokenIssueError: Error, Equatable, Sendable {
    /// A claim cannot be written so that it reads back unchanged (empty `sub`, a scope entry
    /// containing a space, a date that is not a finite number of seconds...).
    case invalidClaim(name: String, reason: String)
    /// libjwt failed to build or sign the token.
    case library(LibJWTError)
}

/// Signs peer tokens with libjwt.
///
/// A value type holding only the key bytes; each `issue` builds and frees its own libjwt handle,
/// so one issuer can be shared by any number of threads.
public struct TokenIssuer: Sendable {
    /// RFC 7518 §3.2: an HS256 key must be at least as long as the SHA-256 output.
    public static let minimumSecretLength = 32

    /// The algorithm every token from this issuer carries in its `alg` header.
    public let algorithm: JWTAlgorithm
    /// The HS256 secret, or the private key as canonical PEM.
    private let key: [UInt8]

    /// An HS256 issuer. The same secret must be given to `TokenVerifier(hs256Secret:)`.
    /// - Throws: `.secretTooShort` for fewer than `minimumSecretLength` bytes.
    public init(hs256Secret secret: [UInt8]) throws(AuthConfigurationError) {
        guard secret.count >= Self.minimumSecretLength else {
            throw .secretTooShort(minimumBytes: Self.minimumSecretLength, actualBytes: secret.count)
        }
        algorithm = .hs256
        key = secret
    }

    /// An RS256 or ES256 issuer, chosen by the key: an RSA key (≥ 2048 bits) signs RS256, an EC
    /// P-256 key signs ES256. The PEM may be PKCS#8 or traditional, but not passphrase-protected.
    public init(privateKeyPEM: String) throws(AuthConfigurationError) {
        let inspected = try PEMKeys.inspectPrivateKey(privateKeyPEM)
        algorithm = inspected.algorithm
        key = inspected.pem
    }

    /// Signs `claims` into a compact JWS (`header.payload.signature`).
    ///
    /// Absent optional claims are omitted; an empty `scope` omits the claim. Dates are written as
    /// whole seconds since the epoch, rounded down.
    public func issue(_ claims: PeerTokenClaims) throws(TokenIssueError) -> String {
        try Self.validate(claims)
        let issuedAt = try claims.issuedAt.map { date throws(TokenIssueError) in try Self.seconds(date, ClaimName.issuedAt) }
        let expiresAt = try Self.seconds(claims.expiresAt, ClaimName.expiresAt)
        let notBefore = try claims.notBefore.map { date throws(TokenIssueError) in try Self.seconds(date, ClaimName.notBefore) }
        do throws(LibJWTError) {
            let jwt = try JWTHandle()
            try jwt.addGrant(ClaimName.subject, claims.sub.rawValue)
            if let room = claims.roomID { try jwt.addGrant(ClaimName.roomID, room.rawValue) }
            if let call = claims.callID { try jwt.addGrant(ClaimName.callID, call.rawValue) }
            if let role = claims.role { try jwt.addGrant(ClaimName.role, role) }
            if let name = claims.name { try jwt.addGrant(ClaimName.name, name) }
            if !claims.scope.isEmpty { try jwt.addGrant(ClaimName.scope, claims.scope.joined(separator: " ")) }
            if let audience = claims.audience { try jwt.addGrant(ClaimName.audience, audience) }
            if let issuedAt { try jwt.addGrant(ClaimName.issuedAt, issuedAt) }
            try jwt.addGrant(ClaimName.expiresAt, expiresAt)
            if let notBefore { try jwt.addGrant(ClaimName.notBefore, notBefore) }
            if let tokenID = claims.tokenID { try jwt.addGrant(ClaimName.tokenID, tokenID) }
            if let maxPeers = claims.maxPeers { try jwt.addGrant(ClaimName.maxPeers, maxPeers) }
            if claims.moderator { try jwt.addGrant(ClaimName.moderator, true) }
            try jwt.setAlgorithm(algorithm.libjwt, key: key)
            return try jwt.encode()
        } catch {
            throw .library(error)
        }
    }

    /// Refuses claims that would not read back as the same `PeerTokenClaims`.
    private static func validate(_ claims: PeerTokenClaims) throws(TokenIssueError) {
        // libjwt takes C strings: an embedded NUL would silently cut the value short.
        let strings: [(String, String?)] = [
            (ClaimName.subject, claims.sub.rawValue), (ClaimName.roomID, claims.roomID?.rawValue),
            (ClaimName.callID, claims.callID?.rawValue), (ClaimName.role, claims.role),
            (ClaimName.name, claims.name), (ClaimName.audience, claims.audience), (ClaimName.tokenID, claims.tokenID),
        ] + claims.scope.map { (ClaimName.scope, $0) }
        for (name, value) in strings where value?.utf8.contains(0) == true {
            throw .invalidClaim(name: name, reason: "contains a NUL character")
        }
        if claims.sub.rawValue.isEmpty { throw .invalidClaim(name: ClaimName.subject, reason: "empty") }
        if claims.roomID?.rawValue.isEmpty == true { throw .invalidClaim(name: ClaimName.roomID, reason: "empty") }
        if claims.callID?.rawValue.isEmpty == true { throw .invalidClaim(name: ClaimName.callID, reason: "empty") }
        if claims.audience?.isEmpty == true { throw .invalidClaim(name: ClaimName.audience, reason: "empty") }
        for entry in claims.scope where entry.isEmpty || entry.contains(" ") {
            throw .invalidClaim(name: ClaimName.scope, reason: "scope entries must be non-empty and contain no spaces")
        }
    }

    /// A NumericDate as whole seconds, or an error for dates that are not a finite number of them or
    /// lie beyond what `TokenVerifier` accepts (year 9999, `PeerTokenClaims.maximumNumericDate`).
    private static func seconds(_ date: Date, _ name: String) throws(TokenIssueError) -> Int {
        guard let seconds = Int(exactly: date.timeIntervalSince1970.rounded(.down)) else {
            throw .invalidClaim(name: name, reason: "not representable as seconds since 1970")
        }
        guard abs(Double(seconds)) <= PeerTokenClaims.maximumNumericDate else {
            throw .invalidClaim(name: name, reason: "beyond 9999-12-31T23:59:59Z")
        }
        return seconds
    }
}
