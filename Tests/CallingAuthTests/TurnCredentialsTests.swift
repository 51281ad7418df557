import CallingAuth
import CallingCore
import Foundation
import XCTest

final class TurnCredentialsTests: XCTestCase {
    /// Known vector, computed independently with:
    ///
    ///     python3 -c "import hmac,hashlib,base64; print(base64.b64encode(hmac.new(
    ///         b'north-wind-static-secret', b'1700003600:alice', hashlib.sha1).digest()).decode())"
    ///
    /// and cross-checked with
    /// `printf '1700003600:alice' | openssl dgst -sha1 -hmac north-wind-static-secret -binary | base64`.
    func testMatchesTheCoturnRESTAPIVector() {
        let credentials = TurnCredentials.make(secret: "north-wind-static-secret", peer: "alice", ttl: 3600, now: Fixture.now)
        XCTAssertEqual(credentials.username, "1700003600:alice")
        XCTAssertEqual(credentials.credential, "dwS2TxngVnY2VWSo8C+sy0bliks=")
        XCTAssertEqual(credentials.expiresAt, Date(timeIntervalSince1970: 1_700_003_600))
    }

    func testMatchesTheOpenSSLCommandLineForArbitrarySecrets() throws {
        let secret = SecureRandom.token(bytes: 24)
        let now = Date(timeIntervalSince1970: 1_712_345_678.75)
        let credentials = TurnCredentials.make(secret: secret, peer: "peer:with:colons", ttl: 86_400, now: now)
        XCTAssertEqual(credentials.username, "1712432078:peer:with:colons", "expiry rounded down")
        let mac = try OpenSSLCLI.run(["dgst", "-sha1", "-hmac", secret, "-binary"], input: Array(credentials.username.utf8))
        XCTAssertEqual(credentials.credential, Data(mac).base64EncodedString())
    }

    func testNonsensicalTTLsDoNotTrap() {
        XCTAssertEqual(TurnCredentials.make(secret: "s", peer: "p", ttl: -50, now: Fixture.now).username, "1700000000:p")
        XCTAssertEqual(TurnCredentials.make(secret: "s", peer: "p", ttl: .nan, now: Fixture.now).username, "1700000000:p")
        XCTAssertFalse(TurnCredentials.make(secret: "s", peer: "p", ttl: .infinity, now: Fixture.now).username.isEmpty)
        XCTAssertFalse(TurnCredentials.make(secret: "", peer: "p", ttl: 60, now: Fixture.now).credential.isEmpty)
    }
}
