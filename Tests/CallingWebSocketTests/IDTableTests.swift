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

    private final class Box {
        let value: Int
        init(_ value: Int) { self.value = value }
    }

    /// The unretained lookup finds the very object the table holds (not a copy of it), nothing for
    /// a missing or zero key, and leaves the table's own reference the only strong one.
    func test_unretained_lookup_is_the_stored_object_and_takes_no_reference() {
        var table = IDTable<Box>()
        for key in UInt64(1)...40 { table.insert(Box(Int(key) * 10), for: key) }
        table.removeValue(for: 7)
        for key in UInt64(1)...40 where key != 7 {
            guard let entry = table.unretained(for: key) else { return XCTFail("no entry for \(key)") }
            XCTAssertTrue(entry.takeUnretainedValue() === table[key])
            XCTAssertEqual(entry._withUnsafeGuaranteedRef { $0.value }, Int(key) * 10)
        }
        XCTAssertNil(table.unretained(for: 7))
        XCTAssertNil(table.unretained(for: 0))
        XCTAssertNil(table.unretained(for: 41))
        weak var held: Box?
        do {
            let lookedUp = table.unretained(for: 3)
            held = lookedUp?.takeUnretainedValue()
            XCTAssertNotNil(held)
        }
        table.removeValue(for: 3)
        XCTAssertNil(held, "the lookup kept the object alive after the table let it go")
    }
}
