import CallingAuth
import CallingCore
import Foundation
import XCTest

final class TokenIssuerTests: XCTestCase {
    /// Every claim set, with whole-second dates (tokens carry whole seconds).
    private let everyClaim = PeerTokenClaims(
        sub: "alice",
        roomID: "room-42",
        callID: "call-7",
        role: "host",
        name: "Alice Ä. Example",
        scope: ["room", "presence", "chat:write"],
        audience: "calling-server",
        issuedAt: Fixture.now.addingTimeInterval(-10),
        expiresAt: Fixture.now.addingTimeInterval(3600),
        notBefore: Fixture.now.addingTimeInterval(-10),
        tokenID: "tok-1",
        maxPeers: 2
    )

    func testHS256TokenCarriesEveryClaimBackUnchanged() throws {
        let issuer = try TokenIssuer(hs256Secret: Fixture.secret)
        let verifier = try TokenVerifier(hs256Secret: Fixture.secret, audience: "calling-server")
        let token = try issuer.issue(everyClaim)
        XCTAssertEqual(try verifier.verify(token, now: Fixture.now), everyClaim)
        XCTAssertEqual(issuer.algorithm, .hs256)
    }

    func testHS256TokenHasTheStandardHeaderAndWireClaimNames() throws {
        let token = try TokenIssuer(hs256Secret: Fixture.secret).issue(everyClaim)
        let segments = token.split(separator: ".", omittingEmptySubsequences: false)
        XCTAssertEqual(segments.count, 3)
        let header = try XCTUnwrap(HandMadeJWT.header(of: token))
        let headerJSON = try XCTUnwrap(JSONSerialization.jsonObject(with: Data(header.utf8)) as? [String: String])
        XCTAssertEqual(headerJSON, ["alg": "HS256", "typ": "JWT"])
        let payload = try XCTUnwrap(HandMadeJWT.decodeBase64url(segments[1]))
        let claims = try XCTUnwrap(JSONSerialization.jsonObject(with: Data(payload)) as? [String: Any])
        XCTAssertEqual(claims["room_id"] as? String, "room-42")
        XCTAssertEqual(claims["call_id"] as? String, "call-7")
        XCTAssertEqual(claims["scope"] as? String, "room presence chat:write")
        XCTAssertEqual(claims["jti"] as? String, "tok-1")
        XCTAssertEqual(claims["max_peers"] as? Int, 2)
        XCTAssertEqual(claims["aud"] as? String, "calling-server")
        XCTAssertEqual((claims["exp"] as? NSNumber)?.intValue, 1_700_003_600)
    }

    func testMinimalClaimsOmitOptionalMembers() throws {
        let minimal = PeerTokenClaims(sub: "bob", expiresAt: Fixture.now.addingTimeInterval(60))
        let token = try TokenIssuer(hs256Secret: Fixture.secret).issue(minimal)
        let payload = try XCTUnwrap(HandMadeJWT.decodeBase64url(token.split(separator: ".")[1]))
        let claims = try XCTUnwrap(JSONSerialization.jsonObject(with: Data(payload)) as? [String: Any])
        XCTAssertEqual(Set(claims.keys), ["sub", "exp"])
        XCTAssertEqual(try TokenVerifier(hs256Secret: Fixture.secret).verify(token, now: Fixture.now), minimal)
    }

    func testSubSecondDatesAreWrittenAsWholeSecondsRoundedDown() throws {
        let claims = PeerTokenClaims(sub: "bob", expiresAt: Date(timeIntervalSince1970: 1_700_000_100.9))
        let token = try TokenIssuer(hs256Secret: Fixture.secret).issue(claims)
        let verified = try TokenVerifier(hs256Secret: Fixture.secret).verify(token, now: Fixture.now)
        XCTAssertEqual(verified.expiresAt, Date(timeIntervalSince1970: 1_700_000_100))
    }

    func testRS256RoundTripWithKeysFromOpenSSLGenpkey() throws {
        let keys = try XCTUnwrap(Keys.rsa)
        let issuer = try TokenIssuer(privateKeyPEM: keys.privatePEM)
        XCTAssertEqual(issuer.algorithm, .rs256)
        let token = try issuer.issue(everyClaim)
        XCTAssertEqual(HandMadeJWT.header(of: token).map { $0.contains(#""alg":"RS256""#) }, true)
        let verifier = try TokenVerifier(hs256Secret: nil, publicKeyPEM: keys.publicPEM, audience: "calling-server")
        XCTAssertEqual(verifier.acceptedAlgorithms, [.rs256])
        XCTAssertEqual(try verifier.verify(token, now: Fixture.now), everyClaim)
    }

    func testES256RoundTripUsesTheRawSixtyFourByteSignatureOfRFC7518() throws {
        let keys = try XCTUnwrap(Keys.p256)
        let issuer = try TokenIssuer(privateKeyPEM: keys.privatePEM)
        XCTAssertEqual(issuer.algorithm, .es256)
        let token = try issuer.issue(everyClaim)
        let signature = try XCTUnwrap(HandMadeJWT.decodeBase64url(token.split(separator: ".")[2]))
        XCTAssertEqual(signature.count, 64, "R||S, not DER")
        let verifier = try TokenVerifier(hs256Secret: Fixture.secret, publicKeyPEM: keys.publicPEM, audience: "calling-server")
        XCTAssertEqual(verifier.acceptedAlgorithms, [.hs256, .es256])
        XCTAssertEqual(try verifier.verify(token, now: Fixture.now), everyClaim)
    }

    func testTokenFromAnotherRSAKeyDoesNotVerify() throws {
        let signer = try XCTUnwrap(Keys.otherRSA)
        let trusted = try XCTUnwrap(Keys.rsa)
        let token = try TokenIssuer(privateKeyPEM: signer.privatePEM).issue(everyClaim)
        let verifier = try TokenVerifier(hs256Secret: nil, publicKeyPEM: trusted.publicPEM)
        XCTAssertThrowsTokenError(.badSignature) { () throws(TokenError) in try verifier.verify(token, now: Fixture.now) }
    }

    func testShortSecretIsRefusedAtStartup() {
        XCTAssertThrowsError(try TokenIssuer(hs256Secret: Array("short".utf8))) { error in
            XCTAssertEqual(error as? AuthConfigurationError, .secretTooShort(minimumBytes: 32, actualBytes: 5))
        }
    }

    func testUnusablePrivateKeysAreRefusedAtStartup() throws {
        let rsa = try XCTUnwrap(Keys.rsa)
        func refusal(_ pem: String) -> AuthConfigurationError? {
            do {
                _ = try TokenIssuer(privateKeyPEM: pem)
                return nil
            } catch {
                return error
            }
        }
        guard case .invalidPrivateKey? = refusal(rsa.publicPEM) else { return XCTFail("public key accepted as private") }
        guard case .invalidPrivateKey? = refusal("") else { return XCTFail("empty PEM accepted") }
        guard case .invalidPrivateKey? = refusal("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n") else {
            return XCTFail("garbage PEM accepted")
        }
        guard case .unsupportedKeyType? = refusal(try XCTUnwrap(Keys.weakRSA).privatePEM) else {
            return XCTFail("1024-bit RSA accepted")
        }
        guard case .unsupportedKeyType? = refusal(try XCTUnwrap(Keys.p384).privatePEM) else {
            return XCTFail("P-384 accepted for ES256")
        }
        guard case .unsupportedKeyType? = refusal(try XCTUnwrap(Keys.ed25519).privatePEM) else {
            return XCTFail("Ed25519 accepted")
        }
    }

    func testEncryptedPrivateKeyIsRefusedWithoutPromptingForAPassphrase() throws {
        let rsa = try XCTUnwrap(Keys.rsa)
        let encrypted = try OpenSSLCLI.run(["pkey", "-in", rsa.privateKeyPath, "-aes256", "-passout", "pass:hunter2"])
        XCTAssertThrowsError(try TokenIssuer(privateKeyPEM: String(decoding: encrypted, as: UTF8.self))) { error in
            guard case .invalidPrivateKey? = error as? AuthConfigurationError else {
                return XCTFail("unexpected \(error)")
            }
        }
    }

    func testTheLastSecondOfYear9999IsStillIssuedAndVerified() throws {
        let last = Date(timeIntervalSince1970: 253_402_300_799)
        let token = try TokenIssuer(hs256Secret: Fixture.secret).issue(PeerTokenClaims(sub: "a", expiresAt: last))
        XCTAssertEqual(try TokenVerifier(hs256Secret: Fixture.secret).verify(token, now: Fixture.now).expiresAt, last)
    }

    func testClaimsThatWouldNotReadBackAreRefused() throws {
        let issuer = try TokenIssuer(hs256Secret: Fixture.secret)
        let expiry = Fixture.now.addingTimeInterval(60)
        let cases: [(PeerTokenClaims, String)] = [
            (PeerTokenClaims(sub: "", expiresAt: expiry), "sub"),
            (PeerTokenClaims(sub: "a", roomID: "", expiresAt: expiry), "room_id"),
            (PeerTokenClaims(sub: "a", scope: ["room presence"], expiresAt: expiry), "scope"),
            (PeerTokenClaims(sub: "a", scope: [""], expiresAt: expiry), "scope"),
            (PeerTokenClaims(sub: "a", audience: "", expiresAt: expiry), "aud"),
            (PeerTokenClaims(sub: "a\u{0}b", expiresAt: expiry), "sub"),
            (PeerTokenClaims(sub: "a", expiresAt: Date(timeIntervalSince1970: .infinity)), "exp"),
            (PeerTokenClaims(sub: "a", expiresAt: expiry, notBefore: Date(timeIntervalSince1970: .nan)), "nbf"),
            // Past 9999-12-31T23:59:59Z, which the verifier refuses as a NumericDate.
            (PeerTokenClaims(sub: "a", expiresAt: Date(timeIntervalSince1970: 253_402_300_800)), "exp"),
            (PeerTokenClaims(sub: "a", issuedAt: Date(timeIntervalSince1970: -1e15), expiresAt: expiry), "iat"),
        ]
        for (claims, name) in cases {
            XCTAssertThrowsError(try issuer.issue(claims)) { error in
                guard case .invalidClaim(let reported, _)? = error as? TokenIssueError else {
                    return XCTFail("unexpected \(error) for \(name)")
                }
                XCTAssertEqual(reported, name)
            }
        }
    }
}
