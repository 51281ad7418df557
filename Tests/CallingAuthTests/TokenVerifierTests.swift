import CallingAuth
import CallingCore
import Foundation
import XCTest

final class TokenVerifierTests: XCTestCase {
    /// HS256 with `Fixture.secret`, no audience, 30 s leeway.
    private var plain: TokenVerifier!

    override func setUpWithError() throws {
        plain = try TokenVerifier(hs256Secret: Fixture.secret)
    }

    private func hsVerifier(audience: String? = nil, leeway: TimeInterval = 30) throws -> TokenVerifier {
        try TokenVerifier(hs256Secret: Fixture.secret, audience: audience, leeway: leeway)
    }

    private func hsToken(_ payload: String, header: String = Fixture.hs256Header, key: [UInt8] = Fixture.secret) throws -> String {
        try HandMadeJWT.hmac(header: header, payload: payload, key: key)
    }

    // MARK: - Independently built tokens

    func testTokenSignedByTheOpenSSLCommandLineIsAccepted() throws {
        let token = try hsToken(Fixture.payload(extra: #""room_id":"r1","scope":"room  presence""#))
        let claims = try hsVerifier().verify(token, now: Fixture.now)
        XCTAssertEqual(claims.sub, PeerID("alice"))
        XCTAssertEqual(claims.roomID, RoomID("r1"))
        XCTAssertEqual(claims.scope, ["room", "presence"], "runs of spaces separate scopes")
        XCTAssertEqual(claims.expiresAt, Date(timeIntervalSince1970: 1_700_003_600))
    }

    func testRS256TokenSignedByTheOpenSSLCommandLineIsAccepted() throws {
        let keys = try XCTUnwrap(Keys.rsa)
        let token = try HandMadeJWT.rs256(payload: Fixture.payload(), keyPath: keys.privateKeyPath)
        let verifier = try TokenVerifier(hs256Secret: nil, publicKeyPEM: keys.publicPEM)
        XCTAssertEqual(try verifier.verify(token, now: Fixture.now).sub, "alice")
    }

    func testInjectedClockIsUsedWhenNoTimeIsPassed() throws {
        let token = try hsToken(Fixture.payload())
        let early = try TokenVerifier(hs256Secret: Fixture.secret, clock: { Fixture.now })
        XCTAssertEqual(try early.verify(token).sub, "alice")
        let late = try TokenVerifier(hs256Secret: Fixture.secret, clock: { Fixture.now.addingTimeInterval(7200) })
        XCTAssertThrowsTokenError(.expired) { () throws(TokenError) in try late.verify(token) }
    }

    // MARK: - Tampering

    func testTamperedPayloadIsRefused() throws {
        let token = try hsToken(Fixture.payload())
        var parts = token.split(separator: ".").map(String.init)
        parts[1] = HandMadeJWT.base64url(Fixture.payload(sub: "mallory"))
        let forged = parts.joined(separator: ".")
        XCTAssertThrowsTokenError(.badSignature) { () throws(TokenError) in try self.plain.verify(forged, now: Fixture.now) }
    }

    func testTamperedSignatureIsRefused() throws {
        let token = try hsToken(Fixture.payload())
        var signature = Array(token.split(separator: ".")[2])
        signature[5] = signature[5] == "A" ? "B" : "A"
        let forged = token.split(separator: ".")[0...1].joined(separator: ".") + "." + String(signature)
        XCTAssertThrowsTokenError(.badSignature) { () throws(TokenError) in try self.plain.verify(forged, now: Fixture.now) }
    }

    func testTokenMACdWithAnotherSecretIsRefused() throws {
        let token = try hsToken(Fixture.payload(), key: Fixture.otherSecret)
        XCTAssertThrowsTokenError(.badSignature) { () throws(TokenError) in try self.plain.verify(token, now: Fixture.now) }
    }

    func testTamperedRS256SignatureIsRefused() throws {
        let keys = try XCTUnwrap(Keys.rsa)
        let token = try HandMadeJWT.rs256(payload: Fixture.payload(), keyPath: keys.privateKeyPath)
        var parts = token.split(separator: ".").map(String.init)
        parts[1] = HandMadeJWT.base64url(Fixture.payload(sub: "mallory"))
        let verifier = try TokenVerifier(hs256Secret: nil, publicKeyPEM: keys.publicPEM)
        XCTAssertThrowsTokenError(.badSignature) { () throws(TokenError) in try verifier.verify(parts.joined(separator: "."), now: Fixture.now) }
    }

    // MARK: - Algorithms

    func testAlgNoneTokenIsRefused() throws {
        let token = HandMadeJWT.signingInput(header: #"{"alg":"none","typ":"JWT"}"#, payload: Fixture.payload()) + "."
        // An unsecured JWS has an empty signature: refused for its algorithm (docs/protocol.md).
        XCTAssertThrowsTokenError(.unsupportedAlgorithm("none")) { () throws(TokenError) in
            try self.plain.verify(token, now: Fixture.now)
        }
        // An empty signature on an algorithm we do accept is still malformed.
        let unsigned = HandMadeJWT.signingInput(header: #"{"alg":"HS256","typ":"JWT"}"#, payload: Fixture.payload()) + "."
        XCTAssertThrowsTokenError(.malformed) { () throws(TokenError) in try self.plain.verify(unsigned, now: Fixture.now) }
        // Even with something in the signature slot, `none` is not an algorithm we accept.
        XCTAssertThrowsTokenError(.unsupportedAlgorithm("none")) { () throws(TokenError) in
            try self.plain.verify(token + "AAAA", now: Fixture.now)
        }
        for spelling in ["None", "NONE"] {
            let variant = HandMadeJWT.signingInput(header: #"{"alg":"\#(spelling)"}"#, payload: Fixture.payload()) + ".AAAA"
            XCTAssertThrowsTokenError(.unsupportedAlgorithm(spelling)) { () throws(TokenError) in
                try self.plain.verify(variant, now: Fixture.now)
            }
        }
    }

    func testStandardBase64SegmentsAreRefused() throws {
        // RFC 7515 §2: base64url only. The same bytes in standard base64 ('+', '/', '=') must not
        // verify, even with a correct MAC over the re-encoded input.
        let token = try HandMadeJWT.hmac(header: #"{"alg":"HS256","typ":"JWT"}"#, payload: Fixture.payload(),
                                         key: Fixture.secret)
        XCTAssertNoThrow(try plain.verify(token, now: Fixture.now))
        let standard = token.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        for variant in [standard, token + "=", token.replacingOccurrences(of: ".", with: "=.")] where variant != token {
            XCTAssertThrowsTokenError(.malformed, variant) { () throws(TokenError) in try self.plain.verify(variant, now: Fixture.now) }
        }
        var parts = token.split(separator: ".").map(String.init)
        parts[2] = "ab+/" + parts[2].dropFirst(4)
        XCTAssertThrowsTokenError(.malformed) { () throws(TokenError) in
            try self.plain.verify(parts.joined(separator: "."), now: Fixture.now)
        }
    }

    func testHS512TokenIsRefusedEvenWithTheRightSecret() throws {
        let token = try HandMadeJWT.hmac(header: #"{"alg":"HS512","typ":"JWT"}"#, payload: Fixture.payload(),
                                         key: Fixture.secret, digest: "sha512")
        XCTAssertThrowsTokenError(.unsupportedAlgorithm("HS512")) { () throws(TokenError) in
            try self.plain.verify(token, now: Fixture.now)
        }
    }

    func testAlgorithmNamesAreCaseSensitiveUnlikeLibjwt() throws {
        let token = try hsToken(Fixture.payload(), header: #"{"alg":"hs256","typ":"JWT"}"#)
        XCTAssertThrowsTokenError(.unsupportedAlgorithm("hs256")) { () throws(TokenError) in
            try self.plain.verify(token, now: Fixture.now)
        }
    }

    func testMissingOrNonStringAlgIsMalformed() throws {
        for header in [#"{"typ":"JWT"}"#, #"{"alg":256}"#, #"{"alg":null}"#, #"{"alg":["HS256"]}"#] {
            let token = try hsToken(Fixture.payload(), header: header)
            XCTAssertThrowsTokenError(.malformed, header) { () throws(TokenError) in try self.plain.verify(token, now: Fixture.now) }
        }
    }

    func testCriticalHeaderExtensionsAndForeignTypesAreRefused() throws {
        for header in [#"{"alg":"HS256","crit":["exp"],"exp":1}"#, #"{"alg":"HS256","typ":"at+jwt"}"#] {
            let token = try hsToken(Fixture.payload(), header: header)
            XCTAssertThrowsTokenError(.malformed, header) { () throws(TokenError) in try self.plain.verify(token, now: Fixture.now) }
        }
        let lowercaseType = try hsToken(Fixture.payload(), header: #"{"alg":"HS256","typ":"jwt"}"#)
        XCTAssertEqual(try hsVerifier().verify(lowercaseType, now: Fixture.now).sub, "alice")
        // ASCII case only, as libjwt's strcasecmp: no Unicode folding, nothing around the name.
        let mixedCase = try hsToken(Fixture.payload(), header: #"{"alg":"HS256","typ":"jWt"}"#)
        XCTAssertEqual(try hsVerifier().verify(mixedCase, now: Fixture.now).sub, "alice")
        for type in ["JWT ", "ＪＷＴ", "JW", "JWTs", "*WT"] {
            let token = try hsToken(Fixture.payload(), header: #"{"alg":"HS256","typ":"\#(type)"}"#)
            XCTAssertThrowsTokenError(.malformed, type) { () throws(TokenError) in try self.plain.verify(token, now: Fixture.now) }
        }
    }

    func testAsymmetricTokensAreRefusedWhenNoMatchingPublicKeyIsConfigured() throws {
        let rsa = try XCTUnwrap(Keys.rsa)
        let p256 = try XCTUnwrap(Keys.p256)
        let claims = PeerTokenClaims(sub: "alice", expiresAt: Fixture.now.addingTimeInterval(60))
        let rsToken = try TokenIssuer(privateKeyPEM: rsa.privatePEM).issue(claims)
        let esToken = try TokenIssuer(privateKeyPEM: p256.privatePEM).issue(claims)

        XCTAssertThrowsTokenError(.unsupportedAlgorithm("RS256"), "HS-only verifier") { () throws(TokenError) in
            try self.plain.verify(rsToken, now: Fixture.now)
        }
        let rsaVerifier = try TokenVerifier(hs256Secret: Fixture.secret, publicKeyPEM: rsa.publicPEM)
        XCTAssertThrowsTokenError(.unsupportedAlgorithm("ES256"), "RSA key configured") { () throws(TokenError) in
            try rsaVerifier.verify(esToken, now: Fixture.now)
        }
        let ecVerifier = try TokenVerifier(hs256Secret: nil, publicKeyPEM: p256.publicPEM)
        XCTAssertThrowsTokenError(.unsupportedAlgorithm("RS256"), "EC key configured") { () throws(TokenError) in
            try ecVerifier.verify(rsToken, now: Fixture.now)
        }
    }

    /// The classic alg-confusion attack: the RSA public key is public, so an attacker MACs an HS256
    /// token with the PEM text as the HMAC secret. A verifier that hands libjwt "the key" whatever
    /// the header says accepts it, because libjwt 1.10 takes the algorithm from the token.
    func testAlgConfusionHS256TokenMACdWithThePublicKeyPEMIsRefused() throws {
        let rsa = try XCTUnwrap(Keys.rsa)
        let pemBytes = Array(rsa.publicPEM.utf8)
        let attack = try hsToken(Fixture.payload(sub: "mallory"), key: pemBytes)

        // Control: the MAC is genuine for a key equal to the PEM text, so the refusals below are
        // due to key selection, not to a broken forgery.
        let naive = try TokenVerifier(hs256Secret: pemBytes)
        XCTAssertEqual(try naive.verify(attack, now: Fixture.now).sub, "mallory")

        let rsaOnly = try TokenVerifier(hs256Secret: nil, publicKeyPEM: rsa.publicPEM)
        XCTAssertThrowsTokenError(.unsupportedAlgorithm("HS256"), "RS256-only verifier") { () throws(TokenError) in
            try rsaOnly.verify(attack, now: Fixture.now)
        }
        let both = try TokenVerifier(hs256Secret: Fixture.secret, publicKeyPEM: rsa.publicPEM)
        XCTAssertThrowsTokenError(.badSignature, "HS256 is checked with the secret only") { () throws(TokenError) in
            try both.verify(attack, now: Fixture.now)
        }
    }

    /// Parsers disagree on which of two equal member names wins (Foundation's decoder kept the
    /// first, jansson inside libjwt the last). Were the first header below read as RS256 here and as
    /// HS256 by libjwt, the RSA public key would be used as an HMAC secret — the alg-confusion attack
    /// again. Repeated names are refused outright, before any key is chosen.
    func testHeaderRepeatingAlgCannotSmuggleAnotherAlgorithmPastKeySelection() throws {
        let rsa = try XCTUnwrap(Keys.rsa)
        let pemBytes = Array(rsa.publicPEM.utf8)
        let verifier = try TokenVerifier(hs256Secret: nil, publicKeyPEM: rsa.publicPEM)
        for header in [#"{"alg":"RS256","alg":"HS256"}"#, #"{"alg":"HS256","alg":"RS256"}"#] {
            let token = try hsToken(Fixture.payload(sub: "mallory"), header: header, key: pemBytes)
            do {
                let claims = try verifier.verify(token, now: Fixture.now)
                XCTFail("accepted \(claims.sub) with header \(header)")
            } catch {
                XCTAssertEqual(error, .malformed, header)
            }
        }
    }

    /// RFC 7515 §4 and RFC 7519 §4 let a recipient refuse repeated Header Parameter and Claim
    /// Names; we do, for every algorithm, even when the signature is genuine.
    func testRepeatedMemberNamesInHeaderOrClaimsAreMalformed() throws {
        let headers = [#"{"alg":"HS256","alg":"HS256"}"#, #"{"alg":"HS256","typ":"JWT","typ":"JWT"}"#,
                       #"{"typ":"JWT","alg":"HS256","kid":"a","kid":"b"}"#]
        for header in headers {
            let token = try hsToken(Fixture.payload(), header: header)
            XCTAssertThrowsTokenError(.malformed, header) { () throws(TokenError) in try self.plain.verify(token, now: Fixture.now) }
        }
        let payloads = [#"{"sub":"alice","sub":"mallory","exp":1700003600}"#, #"{"sub":"alice","exp":1700003600,"exp":1900000000}"#,
                        Fixture.payload(extra: #""room_id":"r1","room_id":"r2""#), Fixture.payload(extra: #""aud":"a","aud":"b""#)]
        for payload in payloads {
            let token = try hsToken(payload)
            XCTAssertThrowsTokenError(.malformed, payload) { () throws(TokenError) in try self.plain.verify(token, now: Fixture.now) }
        }
        // The same signed by RS256, where libjwt verifies the signature.
        let keys = try XCTUnwrap(Keys.rsa)
        let verifier = try TokenVerifier(hs256Secret: nil, publicKeyPEM: keys.publicPEM)
        let rsHeader = try HandMadeJWT.rs256(header: #"{"alg":"RS256","typ":"JWT","typ":"JWT"}"#, payload: Fixture.payload(),
                                             keyPath: keys.privateKeyPath)
        let rsPayload = try HandMadeJWT.rs256(payload: payloads[0], keyPath: keys.privateKeyPath)
        for token in [rsHeader, rsPayload] {
            XCTAssertThrowsTokenError(.malformed) { () throws(TokenError) in try verifier.verify(token, now: Fixture.now) }
        }
        // A member repeated inside a nested object is not a repeated claim; no claim we read is nested.
        let nested = try hsToken(Fixture.payload(extra: #""custom":{"a":1,"a":2}"#))
        XCTAssertEqual(try plain.verify(nested, now: Fixture.now).sub, "alice")
    }

    /// jansson (libjwt's parser, which still reads RS256/ES256 tokens) refuses U+0000 in strings; so
    /// do we, for every algorithm, so that `sub` can never carry one.
    func testNULInAnyStringIsMalformed() throws {
        for payload in [#"{"sub":"al\u0000ice","exp":1700003600}"#, Fixture.payload(extra: #""x\u0000":1"#),
                        Fixture.payload(extra: #""custom":["\u0000"]"#)] {
            let token = try hsToken(payload)
            XCTAssertThrowsTokenError(.malformed, payload) { () throws(TokenError) in try self.plain.verify(token, now: Fixture.now) }
        }
        let token = try hsToken(Fixture.payload(), header: #"{"alg":"HS256","kid":"k\u0000"}"#)
        XCTAssertThrowsTokenError(.malformed) { () throws(TokenError) in try self.plain.verify(token, now: Fixture.now) }
    }

    /// Sixteen levels of nesting, the top-level object included, are accepted; seventeen are not.
    func testNestingIsLimitedToSixteenLevels() throws {
        func nested(_ levels: Int) -> String {
            Fixture.payload(extra: #""deep":"# + String(repeating: "[", count: levels - 1) + String(repeating: "]", count: levels - 1))
        }
        XCTAssertEqual(try plain.verify(try hsToken(nested(16)), now: Fixture.now).sub, "alice")
        let tooDeep = try hsToken(nested(17))
        XCTAssertThrowsTokenError(.malformed) { () throws(TokenError) in try self.plain.verify(tooDeep, now: Fixture.now) }
        let deepHeader = try hsToken(Fixture.payload(), header: #"{"alg":"HS256","x":"# + String(repeating: "[", count: 16)
                                         + String(repeating: "]", count: 16) + "}")
        XCTAssertThrowsTokenError(.malformed) { () throws(TokenError) in try self.plain.verify(deepHeader, now: Fixture.now) }
    }

    // MARK: - Time

    func testExpiredTokenIsRefusedOnlyBeyondTheLeeway() throws {
        let token = try hsToken(Fixture.payload(exp: "1700000000"))
        let verifier = try hsVerifier(leeway: 30)
        XCTAssertEqual(try verifier.verify(token, now: Fixture.now.addingTimeInterval(29)).sub, "alice")
        XCTAssertThrowsTokenError(.expired) { () throws(TokenError) in
            try verifier.verify(token, now: Fixture.now.addingTimeInterval(30))
        }
        XCTAssertThrowsTokenError(.expired) { () throws(TokenError) in
            try verifier.verify(token, now: Fixture.now.addingTimeInterval(3600))
        }
        let strict = try hsVerifier(leeway: 0)
        XCTAssertThrowsTokenError(.expired, "exp is exclusive") { () throws(TokenError) in
            try strict.verify(token, now: Fixture.now)
        }
    }

    func testTokenBeforeItsNotBeforeTimeIsRefusedBeyondTheLeeway() throws {
        let token = try hsToken(Fixture.payload(extra: #""nbf":1700000100"#))
        let verifier = try hsVerifier(leeway: 30)
        XCTAssertThrowsTokenError(.notYetValid) { () throws(TokenError) in
            try verifier.verify(token, now: Fixture.now)
        }
        XCTAssertEqual(try verifier.verify(token, now: Fixture.now.addingTimeInterval(70)).notBefore,
                       Date(timeIntervalSince1970: 1_700_000_100))
    }

    func testFractionalNumericDatesAreAccepted() throws {
        let token = try hsToken(Fixture.payload(exp: "1700003600.5"))
        XCTAssertEqual(try hsVerifier().verify(token, now: Fixture.now).expiresAt,
                       Date(timeIntervalSince1970: 1_700_003_600.5))
    }

    /// NumericDates are integers or fractions within ±253,402,300,799 s (year 9999); a number JSON
    /// or 64 bits cannot hold makes the whole token malformed, as jansson does.
    func testNumericDatesAreIntegersOrFractionsWithinYear9999() throws {
        let accepted: [(String, Double)] = [("1700003600", 1_700_003_600), ("1700003600.0", 1_700_003_600),
                                            ("1.7000036e9", 1_700_003_600), ("253402300799", 253_402_300_799)]
        for (exp, seconds) in accepted {
            let token = try hsToken(Fixture.payload(exp: exp))
            XCTAssertEqual(try plain.verify(token, now: Fixture.now).expiresAt, Date(timeIntervalSince1970: seconds), exp)
        }
        let issued = try hsToken(Fixture.payload(extra: #""iat":1699999999.25,"nbf":-1"#))
        let claims = try plain.verify(issued, now: Fixture.now)
        XCTAssertEqual(claims.issuedAt, Date(timeIntervalSince1970: 1_699_999_999.25))
        XCTAssertEqual(claims.notBefore, Date(timeIntervalSince1970: -1))

        for (extra, name) in [(#""exp":253402300800"#, "exp"), (#""exp":1e300"#, "exp"), (#""exp":9223372036854775807"#, "exp"),
                              (#""exp":-1e20"#, "exp"), (#""nbf":1e19"#, "nbf"), (#""iat":-253402300800"#, "iat")] {
            let token = try hsToken(name == "exp" ? #"{"sub":"alice",\#(extra)}"# : Fixture.payload(extra: extra))
            XCTAssertThrowsTokenError(.invalidClaim(name), extra) { () throws(TokenError) in
                try self.plain.verify(token, now: Fixture.now)
            }
        }
        for exp in ["1e400", "-1e400", "123456789012345678901234567890", "9223372036854775808"] {
            let token = try hsToken(Fixture.payload(exp: exp))
            XCTAssertThrowsTokenError(.malformed, exp) { () throws(TokenError) in try self.plain.verify(token, now: Fixture.now) }
        }
    }

    // MARK: - Required and typed claims

    func testMissingExpIsRefused() throws {
        let token = try hsToken(Fixture.payload(exp: nil))
        XCTAssertThrowsTokenError(.missingClaim("exp")) { () throws(TokenError) in try self.plain.verify(token, now: Fixture.now) }
    }

    func testMissingSubIsRefused() throws {
        let token = try hsToken(Fixture.payload(sub: nil))
        XCTAssertThrowsTokenError(.missingClaim("sub")) { () throws(TokenError) in try self.plain.verify(token, now: Fixture.now) }
    }

    func testClaimsOfTheWrongTypeAreNamed() throws {
        let cases: [(String, String)] = [
            (#"{"sub":"alice","exp":"1700003600"}"#, "exp"),
            (#"{"sub":"alice","exp":true}"#, "exp"),
            (#"{"sub":42,"exp":1700003600}"#, "sub"),
            (#"{"sub":"","exp":1700003600}"#, "sub"),
            (Fixture.payload(extra: #""room_id":7"#), "room_id"),
            (Fixture.payload(extra: #""room_id":"""#), "room_id"),
            (Fixture.payload(extra: #""scope":["room"]"#), "scope"),
            (Fixture.payload(extra: #""nbf":"soon""#), "nbf"),
            (Fixture.payload(extra: #""iat":{}"#), "iat"),
            (Fixture.payload(extra: #""aud":5"#), "aud"),
            (Fixture.payload(extra: #""aud":["a",5]"#), "aud"),
        ]
        for (payload, name) in cases {
            let token = try hsToken(payload)
            XCTAssertThrowsTokenError(.invalidClaim(name), payload) { () throws(TokenError) in
                try self.plain.verify(token, now: Fixture.now)
            }
        }
    }

    /// With several claims wrong at once, the one reported is the first in the fixed order the
    /// verifier checks them (sub, exp, room_id, call_id, role, name, scope, iat, nbf, jti,
    /// max_peers, then aud), whatever their order in the payload.
    func testTheFirstWrongClaimInCheckingOrderIsTheOneNamed() throws {
        let cases: [(String, String)] = [
            (#"{"aud":5,"max_peers":-1,"jti":5,"room_id":7,"sub":"alice","exp":1700003600}"#, "room_id"),
            (#"{"aud":5,"max_peers":-1,"nbf":"x","call_id":1,"sub":"alice","exp":1700003600}"#, "call_id"),
            (#"{"aud":5,"max_peers":-1,"sub":"alice","exp":1700003600}"#, "max_peers"),
            (#"{"aud":5,"exp":"soon","sub":7}"#, "sub"),
        ]
        for (payload, name) in cases {
            let token = try hsToken(payload)
            XCTAssertThrowsTokenError(.invalidClaim(name), payload) { () throws(TokenError) in
                try self.plain.verify(token, now: Fixture.now)
            }
        }
    }

    // MARK: - Audience

    func testWrongOrMissingAudienceIsForbidden() throws {
        let verifier = try hsVerifier(audience: "calling-server")
        for extra in [#""aud":"billing""#, #""aud":["billing","admin"]"#, #""aud":[]"#, ""] {
            let token = try hsToken(Fixture.payload(extra: extra))
            XCTAssertThrowsTokenError(.wrongAudience, extra) { () throws(TokenError) in
                try verifier.verify(token, now: Fixture.now)
            }
        }
        XCTAssertEqual(TokenError.wrongAudience.httpStatus, 403)
    }

    func testAudienceMayBeAnArrayContainingTheExpectedValue() throws {
        let token = try hsToken(Fixture.payload(extra: #""aud":["billing","calling-server"]"#))
        XCTAssertEqual(try hsVerifier(audience: "calling-server").verify(token, now: Fixture.now).audience,
                       "calling-server")
        XCTAssertEqual(try hsVerifier().verify(token, now: Fixture.now).audience, "billing",
                       "without an expected audience, the first entry is reported")
    }

    // MARK: - Hostile input

    func testGarbageNeverCrashesAndIsMalformed() throws {
        let valid = try hsToken(Fixture.payload())
        let parts = valid.split(separator: ".").map(String.init)
        let notJSON = HandMadeJWT.base64url("not json")
        let invalidUTF8 = HandMadeJWT.base64url([0xFF, 0xFE, 0x7B, 0x22, 0xC3, 0x28, 0x7D])
        let deep = HandMadeJWT.base64url(String(repeating: "[", count: 2000) + String(repeating: "]", count: 2000))
        let table: [(String, String)] = [
            ("empty", ""),
            ("one dot", "."),
            ("two dots", ".."),
            ("three dots", "..."),
            ("four segments", valid + ".AAAA"),
            ("two segments", parts[0] + "." + parts[1]),
            ("empty signature", parts[0] + "." + parts[1] + "."),
            ("spaces", " " + valid),
            ("bearer prefix", "Bearer " + valid),
            ("padding", parts[0] + "=." + parts[1] + "." + parts[2]),
            ("standard base64 alphabet", parts[0] + "." + parts[1] + "." + parts[2] + "+/"),
            ("NUL byte", parts[0] + "\u{0}." + parts[1] + "." + parts[2]),
            ("non-ASCII", parts[0] + "é." + parts[1] + "." + parts[2]),
            ("emoji", "🔑.🔑.🔑"),
            ("impossible base64 length", "A." + parts[1] + "." + parts[2]),
            ("header not JSON", notJSON + "." + parts[1] + "." + parts[2]),
            ("header invalid UTF-8", invalidUTF8 + "." + parts[1] + "." + parts[2]),
            ("header is an array", HandMadeJWT.base64url(#"["HS256"]"#) + "." + parts[1] + "." + parts[2]),
            ("header is a string", HandMadeJWT.base64url(#""HS256""#) + "." + parts[1] + "." + parts[2]),
            ("payload not JSON", parts[0] + "." + notJSON + "." + parts[2]),
            ("payload invalid UTF-8", parts[0] + "." + invalidUTF8 + "." + parts[2]),
            ("payload deeply nested", parts[0] + "." + deep + "." + parts[2]),
            ("huge", String(repeating: "A", count: 100_000) + "." + parts[1] + "." + parts[2]),
            ("huge all dots", String(repeating: ".", count: 1_000_000)),
            ("just over the limit", String(repeating: "A", count: TokenVerifier.maximumTokenLength - 1) + ".A.A"),
        ]
        let verifier = try hsVerifier()
        for (name, token) in table {
            XCTAssertThrowsTokenError(.malformed, name) { () throws(TokenError) in try verifier.verify(token, now: Fixture.now) }
        }
    }

    func testPayloadLibjwtCannotParseIsMalformedNotAccepted() throws {
        // Valid MAC over a payload jansson refuses (an integer beyond 64 bits).
        let token = try hsToken(#"{"sub":"alice","exp":1700003600,"big":123456789012345678901234567890}"#)
        XCTAssertThrowsTokenError(.malformed) { () throws(TokenError) in try self.plain.verify(token, now: Fixture.now) }
    }

    func testRandomBytesNeverCrashTheVerifier() throws {
        let verifier = try hsVerifier()
        let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.")
        var generator = SplitMix64(seed: 0x5EED)
        for _ in 0..<2000 {
            let length = Int(generator.next() % 200)
            let token = String((0..<length).map { _ in alphabet[Int(generator.next() % UInt64(alphabet.count))] })
            do {
                _ = try verifier.verify(token, now: Fixture.now)
                XCTFail("random token accepted: \(token)")
            } catch {
                XCTAssertEqual(error.httpStatus, 401)
            }
        }
    }

    // MARK: - Threads

    /// One verifier is shared by every connection thread; libjwt, jansson and OpenSSL must cope.
    func testOneVerifierIsUsableFromManyThreadsAtOnce() throws {
        let p256 = try XCTUnwrap(Keys.p256)
        let claims = PeerTokenClaims(sub: "alice", expiresAt: Fixture.now.addingTimeInterval(60))
        let hsToken = try TokenIssuer(hs256Secret: Fixture.secret).issue(claims)
        let esToken = try TokenIssuer(privateKeyPEM: p256.privatePEM).issue(claims)
        let forged = hsToken.dropLast(2) + "AA"
        let verifier = try TokenVerifier(hs256Secret: Fixture.secret, publicKeyPEM: p256.publicPEM)
        let wrong = WrongAnswers()
        DispatchQueue.concurrentPerform(iterations: 8) { thread in
            for round in 0..<150 {
                do throws(TokenError) {
                    let token = [hsToken, esToken, String(forged)][(thread + round) % 3]
                    let verified = try verifier.verify(token, now: Fixture.now)
                    if token == String(forged) || verified != claims { wrong.increment() }
                } catch {
                    if error != .badSignature { wrong.increment() }
                }
            }
        }
        XCTAssertEqual(wrong.count, 0)
    }

    // MARK: - Configuration

    func testVerifierConfigurationIsCheckedAtStartup() throws {
        func refusal(_ make: () throws(AuthConfigurationError) -> TokenVerifier) -> AuthConfigurationError? {
            do {
                _ = try make()
                return nil
            } catch {
                return error
            }
        }
        XCTAssertEqual(refusal { () throws(AuthConfigurationError) in try TokenVerifier(hs256Secret: nil) }, .noVerificationKey)
        XCTAssertEqual(refusal { () throws(AuthConfigurationError) in try TokenVerifier(hs256Secret: [1, 2, 3]) },
                       .secretTooShort(minimumBytes: 32, actualBytes: 3))
        XCTAssertEqual(refusal { () throws(AuthConfigurationError) in try TokenVerifier(hs256Secret: Fixture.secret, leeway: -1) },
                       .invalidLeeway(-1))
        XCTAssertEqual(refusal { () throws(AuthConfigurationError) in try TokenVerifier(hs256Secret: Fixture.secret, audience: "") },
                       .emptyAudience)
        let rsa = try XCTUnwrap(Keys.rsa)
        guard case .invalidPublicKey? = refusal({ () throws(AuthConfigurationError) in
            try TokenVerifier(hs256Secret: nil, publicKeyPEM: "not a key")
        }) else { return XCTFail("garbage public key accepted") }
        // A private key file holds no PUBLIC KEY block; refusing it keeps private keys out of verifiers.
        guard case .invalidPublicKey? = refusal({ () throws(AuthConfigurationError) in
            try TokenVerifier(hs256Secret: nil, publicKeyPEM: rsa.privatePEM)
        }) else { return XCTFail("private key accepted as public") }
        let weak = try XCTUnwrap(Keys.weakRSA)
        guard case .unsupportedKeyType? = refusal({ () throws(AuthConfigurationError) in
            try TokenVerifier(hs256Secret: nil, publicKeyPEM: weak.publicPEM)
        }) else { return XCTFail("1024-bit key accepted") }
    }
}

/// A tiny deterministic generator, so a failing random input can be reproduced.
struct SplitMix64 {
    private var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

/// A counter shared by `concurrentPerform` workers.
/// `@unchecked Sendable`: `value` is only touched with `lock` held.
final class WrongAnswers: @unchecked Sendable {
    private let lock = NSLock()
    private var value = 0
    func increment() { lock.withLock { value += 1 } }
    var count: Int { lock.withLock { value } }
}
