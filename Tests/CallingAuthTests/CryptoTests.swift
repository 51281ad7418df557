import Dispatch
import Synchronization
@testable import CallingAuth
import COpenSSL
import XCTest

final class CryptoTests: XCTestCase {
    private func hex(_ bytes: [UInt8]?) -> String? {
        bytes.map { $0.map { String(format: "%02x", $0) }.joined() }
    }

    /// RFC 4231 §4.3 (test case 2) and §4.4 (test case 3), HMAC-SHA-256.
    func testPreparedKeyMatchesTheRFC4231Vectors() throws {
        let jefe = try XCTUnwrap(HMACKey(sha256Key: Array("Jefe".utf8)))
        XCTAssertEqual(hex(jefe.mac(Array("what do ya want for nothing?".utf8)[...])),
                       "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843")
        let aa = try XCTUnwrap(HMACKey(sha256Key: [UInt8](repeating: 0xAA, count: 20)))
        XCTAssertEqual(hex(aa.mac([UInt8](repeating: 0xDD, count: 50)[...])),
                       "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe")
    }

    /// The prepared key is reusable: every MAC starts from the key alone, whatever came before, and
    /// agrees with the one-shot `Crypto.hmac` for slices, empty input and long keys (hashed first).
    func testPreparedKeyAgreesWithTheOneShotHMACAcrossCalls() throws {
        var generator = SplitMix64(seed: 0x4D4143)
        for keyLength in [0, 1, 32, 64, 65, 200] {
            let key = (0..<keyLength).map { _ in UInt8(truncatingIfNeeded: generator.next()) }
            let prepared = try XCTUnwrap(HMACKey(sha256Key: key))
            for length in [0, 1, 55, 56, 64, 300] {
                let message = (0..<(length + 3)).map { _ in UInt8(truncatingIfNeeded: generator.next()) }
                let slice = message[2..<(2 + length)]
                XCTAssertEqual(prepared.mac(slice), Crypto.hmac(EVP_sha256(), key: key, data: Array(slice)), "key \(keyLength), data \(length)")
            }
        }
    }

    /// Every MAC after the first reuses a spare context reset to the key (`EVP_MAC_init` without
    /// one); more callers at once than there are spares copy the template. Either way each thread's
    /// MACs are the one-shot HMAC's, so no reset leaves a previous message's state behind.
    func testPreparedKeyReusedFromManyThreadsAtOnceGivesEachMessagesOwnMAC() throws {
        let key = Array("a 32-byte secret for the spares!".utf8)
        let prepared = try XCTUnwrap(HMACKey(sha256Key: key))
        let threads = HMACKey.maximumSpares * 2
        let mismatches = Mutex(0)
        DispatchQueue.concurrentPerform(iterations: threads) { thread in
            for round in 0..<200 {
                let message = Array("thread \(thread) round \(round)".utf8)
                if prepared.mac(message[...]) != Crypto.hmac(EVP_sha256(), key: key, data: message) {
                    mismatches.withLock { $0 += 1 }
                }
            }
        }
        XCTAssertEqual(mismatches.withLock { $0 }, 0)
    }
}
