import XCTest

@testable import CallingWebSocket

final class IDTableTests: XCTestCase {
    /// Random inserts, replacements and removals against a Dictionary: every lookup agrees, through
    /// growth and the backward shifts of removals in long probe runs.
    func test_agrees_with_a_dictionary_through_growth_and_removals() {
        var table = IDTable<Int>()
        var reference: [UInt64: Int] = [:]
        var generator = SystemRandomNumberGenerator()
        for step in 0..<20_000 {
            // Sequential-ish ids, as the server assigns them, plus some spread ones.
            let key = step % 7 == 0 ? UInt64.random(in: 1...UInt64.max, using: &generator) : UInt64.random(in: 1...3_000, using: &generator)
            if Bool.random(using: &generator) || reference.count < 50 {
                table.insert(step, for: key)
                reference[key] = step
            } else {
                XCTAssertEqual(table.removeValue(for: key), reference.removeValue(forKey: key))
            }
            if step % 997 == 0 {
                for (key, value) in reference { XCTAssertEqual(table[key], value) }
            }
        }
        XCTAssertEqual(table.count, reference.count)
        XCTAssertEqual(Set(table.storedKeys), Set(reference.keys))
        for key in UInt64(1)...3_000 { XCTAssertEqual(table[key], reference[key], "key \(key)") }
        for key in Array(reference.keys) { XCTAssertEqual(table.removeValue(for: key), reference.removeValue(forKey: key)) }
        XCTAssertTrue(table.isEmpty)
        XCTAssertNil(table[1])
    }

    func test_zero_is_never_a_key_and_removing_a_missing_key_changes_nothing() {
        var table = IDTable<String>()
        XCTAssertNil(table[0])
        XCTAssertNil(table.removeValue(for: 0))
        table.insert("a", for: 1)
        XCTAssertNil(table.removeValue(for: 2))
        XCTAssertEqual(table[1], "a")
        XCTAssertEqual(table.count, 1)
    }
}
