import CallingAuth
import XCTest

final class WebhookSignerTests: XCTestCase {
    /// The example of the Standard Webhooks specification and its reference libraries
    /// (secret, id, timestamp and payload below → this signature), recomputed with
    /// `python3 -c "import hmac,hashlib,base64; print(base64.b64encode(hmac.new(base64.b64decode(
    /// 'MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw'), b'msg_p5jXN8AQM9LWM0D4loKWxJek.1614265330.{\"test\": 2432232314}',
    /// hashlib.sha256).digest()).decode())"`.
    func test_matches_the_standard_webhooks_example() throws {
        let signer = try WebhookSigner(secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
        let body = Array("{\"test\": 2432232314}".utf8)
        XCTAssertEqual(signer.signature(id: "msg_p5jXN8AQM9LWM0D4loKWxJek", timestamp: 1_614_265_330, body: body),
                       "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=")
    }

    func test_a_plain_secret_is_used_as_its_utf8_bytes() throws {
        let signer = try WebhookSigner(secret: "a-webhook-secret-of-32-bytes-len")
        XCTAssertEqual(signer.signature(id: "msg_1", timestamp: 1_700_000_000, body: Array("{}".utf8)),
                       "v1,gelNnbXM5eOPSqTkjL02e1gtj0wKzB21xgGNKA31yxM=")
    }

    func test_the_signed_bytes_are_id_dot_timestamp_dot_body() {
        XCTAssertEqual(WebhookSigner.signedContent(id: "msg_1", timestamp: 42, body: Array("{\"a\":1}".utf8)),
                       Array("msg_1.42.{\"a\":1}".utf8))
    }

    func test_headers_carry_id_timestamp_and_signature() throws {
        let signer = try WebhookSigner(secret: "a-webhook-secret-of-32-bytes-len")
        let headers = signer.headers(id: "msg_1", timestamp: 1_700_000_000, body: Array("{}".utf8))
        XCTAssertEqual(headers.map(\.0), ["webhook-id", "webhook-timestamp", "webhook-signature"])
        XCTAssertEqual(headers[1].1, "1700000000")
    }

    func test_verification_refuses_a_changed_body_a_stale_timestamp_and_another_key() throws {
        let signer = try WebhookSigner(secret: "a-webhook-secret-of-32-bytes-len")
        let body = Array("{\"type\":\"call_started\"}".utf8)
        let signature = signer.signature(id: "msg_1", timestamp: 1_000, body: body)
        XCTAssertTrue(signer.verify(id: "msg_1", timestamp: 1_000, body: body, signatureHeader: signature, now: 1_100))
        XCTAssertTrue(signer.verify(id: "msg_1", timestamp: 1_000, body: body, signatureHeader: "v1,bogus " + signature, now: 1_000),
                      "one of several space-separated signatures is enough (key rotation)")
        XCTAssertFalse(signer.verify(id: "msg_1", timestamp: 1_000, body: body + [0x20], signatureHeader: signature, now: 1_000))
        XCTAssertFalse(signer.verify(id: "msg_2", timestamp: 1_000, body: body, signatureHeader: signature, now: 1_000))
        XCTAssertFalse(signer.verify(id: "msg_1", timestamp: 1_000, body: body, signatureHeader: signature, now: 1_301),
                       "older than the five-minute tolerance: a replay")
        let other = try WebhookSigner(secret: "another-secret-of-at-least-24-b")
        XCTAssertFalse(other.verify(id: "msg_1", timestamp: 1_000, body: body, signatureHeader: signature, now: 1_000))
    }

    func test_short_or_malformed_secrets_are_refused() {
        XCTAssertThrowsError(try WebhookSigner(secret: "short")) { XCTAssertEqual($0 as? WebhookSigner.KeyError, .tooShort(5)) }
        XCTAssertThrowsError(try WebhookSigner(secret: "whsec_!!!")) { XCTAssertEqual($0 as? WebhookSigner.KeyError, .badBase64) }
        XCTAssertThrowsError(try WebhookSigner(secret: "whsec_" + "AAAA")) {
            XCTAssertEqual($0 as? WebhookSigner.KeyError, .tooShort(3))
        }
    }
}
