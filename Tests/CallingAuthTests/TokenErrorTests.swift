import CallingAuth
import XCTest

final class TokenErrorTests: XCTestCase {
    /// Codes and statuses are published in problem+json bodies and the docs; changing one breaks clients.
    func testCodesAndStatusesAreTheDocumentedOnes() {
        let table: [(TokenError, String, Int)] = [
            (.malformed, "token_malformed", 401),
            (.unsupportedAlgorithm("HS512"), "token_unsupported_algorithm", 401),
            (.badSignature, "token_bad_signature", 401),
            (.expired, "token_expired", 401),
            (.notYetValid, "token_not_yet_valid", 401),
            (.wrongAudience, "token_wrong_audience", 403),
            (.missingClaim("exp"), "token_missing_claim", 401),
            (.invalidClaim("aud"), "token_invalid_claim", 401),
            (.internalError(12), "token_verification_failed", 500),
        ]
        for (error, code, status) in table {
            XCTAssertEqual(error.code, code)
            XCTAssertEqual(error.httpStatus, status, code)
            XCTAssertFalse(error.message.isEmpty, code)
        }
        XCTAssertEqual(TokenError.documentedCodes.map(\.code), table.map(\.1))
        XCTAssertEqual(TokenError.documentedCodes.map(\.httpStatus), table.map(\.2))
    }

    func testMessagesNameTheClaimOrAlgorithm() {
        XCTAssertEqual(TokenError.missingClaim("exp").message, #"The token lacks the required claim "exp"."#)
        XCTAssertTrue(TokenError.unsupportedAlgorithm("HS512").message.contains("HS512"))
    }

    func testHostileAlgorithmNamesAreTruncatedAndMadePrintable() throws {
        func token(alg: String) throws -> String {
            let header = try String(decoding: JSONSerialization.data(withJSONObject: ["alg": alg]), as: UTF8.self)
            return try HandMadeJWT.hmac(header: header, payload: Fixture.payload(), key: Fixture.secret)
        }
        let long = try token(alg: String(repeating: "X", count: 100))
        let escapeSequence = try token(alg: "\u{1B}[31m" + String(repeating: "Y", count: 10) + "\u{7}")
        let verifier = try TokenVerifier(hs256Secret: Fixture.secret)
        XCTAssertThrowsTokenError(.unsupportedAlgorithm(String(repeating: "X", count: 32))) { () throws(TokenError) in
            try verifier.verify(long, now: Fixture.now)
        }
        XCTAssertThrowsTokenError(.unsupportedAlgorithm("?[31mYYYYYYYYYY?")) { () throws(TokenError) in
            try verifier.verify(escapeSequence, now: Fixture.now)
        }
    }
}
