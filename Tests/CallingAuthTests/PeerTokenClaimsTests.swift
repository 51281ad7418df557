import CallingAuth
import CallingCore
import Foundation
import XCTest

final class PeerTokenClaimsTests: XCTestCase {
    func testOptionalClaimsDefaultToAbsentAndScopeToEmpty() {
        let claims = PeerTokenClaims(sub: "alice", expiresAt: Fixture.now)
        XCTAssertNil(claims.roomID)
        XCTAssertNil(claims.callID)
        XCTAssertNil(claims.audience)
        XCTAssertEqual(claims.scope, [])
    }

    func testNullOptionalClaimsReadAsAbsent() throws {
        let payload = #"{"sub":"alice","exp":1700003600,"room_id":null,"scope":null,"nbf":null,"aud":null}"#
        let token = try HandMadeJWT.hmac(header: Fixture.hs256Header, payload: payload, key: Fixture.secret)
        let claims = try TokenVerifier(hs256Secret: Fixture.secret).verify(token, now: Fixture.now)
        XCTAssertEqual(claims, PeerTokenClaims(sub: "alice", expiresAt: Date(timeIntervalSince1970: 1_700_003_600)))
    }

    func testUnknownClaimsAreIgnored() throws {
        let payload = Fixture.payload(extra: #""iss":"https://idp.example","jti":"x","custom":{"a":[1,2]}"#)
        let token = try HandMadeJWT.hmac(header: Fixture.hs256Header, payload: payload, key: Fixture.secret)
        XCTAssertEqual(try TokenVerifier(hs256Secret: Fixture.secret).verify(token, now: Fixture.now).sub, "alice")
    }

    func testEmptyScopeStringMeansNoScopes() throws {
        let token = try HandMadeJWT.hmac(header: Fixture.hs256Header, payload: Fixture.payload(extra: #""scope":"  ""#),
                                         key: Fixture.secret)
        XCTAssertEqual(try TokenVerifier(hs256Secret: Fixture.secret).verify(token, now: Fixture.now).scope, [])
    }

    func testMaxPeersMustBeANonNegativeWholeNumber() throws {
        func verify(_ extra: String) throws -> PeerTokenClaims {
            let token = try HandMadeJWT.hmac(header: Fixture.hs256Header, payload: Fixture.payload(extra: extra), key: Fixture.secret)
            return try TokenVerifier(hs256Secret: Fixture.secret).verify(token, now: Fixture.now)
        }
        XCTAssertEqual(try verify(#""max_peers":2,"jti":"t-1""#).maxPeers, 2)
        XCTAssertEqual(try verify(#""max_peers":0"#).maxPeers, 0)
        XCTAssertEqual(try verify(#""max_peers":3.0"#).maxPeers, 3, "a whole number written as a fraction")
        XCTAssertEqual(try verify(#""max_peers":1000000"#).maxPeers, 1_000_000)
        XCTAssertEqual(try verify(#""jti":"t-1""#).tokenID, "t-1")
        for bad in [#""max_peers":-1"#, #""max_peers":1.5"#, #""max_peers":"2""#, #""jti":"""#, #""max_peers":1000001"#,
                    #""max_peers":1e300"#] {
            XCTAssertThrowsError(try verify(bad), bad)
        }
    }

    /// The claims are picked out in one pass by name length and name: order does not matter, and a
    /// name of the same length that is not a claim's (another case, one letter off) is not read as it.
    func testClaimsAreReadInAnyOrderAndLookalikeNamesAreIgnored() throws {
        let payload = #"{"Sub":"mallory","max_peerz":1,"room_ix":"r0","role":"host","exp":1700003600,"rol":"x","sub":"alice","room_id":"r1","SCOPE":"admin","scope":"room"}"#
        let token = try HandMadeJWT.hmac(header: Fixture.hs256Header, payload: payload, key: Fixture.secret)
        let claims = try TokenVerifier(hs256Secret: Fixture.secret).verify(token, now: Fixture.now)
        XCTAssertEqual(claims, PeerTokenClaims(sub: "alice", roomID: "r1", role: "host", scope: ["room"],
                                               expiresAt: Date(timeIntervalSince1970: 1_700_003_600)))
    }
}
