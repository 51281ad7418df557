/// A hash table from nonzero `UInt64` ids to values: open addressing with linear probing, a
/// multiplicative (Fibonacci) hash and backward-shift deletion. Made for ids a process assigns
/// itself (the server's connection ids count up from 1), which no client chooses, so a hash that
/// is cheap rather than keyed against collision attacks is enough. A `Dictionary` lookup hashes
/// with a seeded SipHash, several times this one's cost per fan-out delivery.
///
/// Public and inlinable for the reason `FIFO` is: the server part, another module, looks ids up
/// once per delivered frame.
public struct IDTable<Value> {
    /// 0 marks an empty slot; every stored key is nonzero.
    @usableFromInline var keys: [UInt64]
    @usableFromInline var values: [Value?]
    /// 64 − log2(capacity): the hash keeps the product's top bits.
    @usableFromInline var shift: UInt64
    @usableFromInline var stored = 0

    /// Stored entries.
    @inlinable public var count: Int { stored }

    /// An empty table.
    @inlinable public init() {
        keys = [UInt64](repeating: 0, count: 16)
        values = [Value?](repeating: nil, count: 16)
        shift = 60
    }

    /// No entry stored.
    @inlinable public var isEmpty: Bool { stored == 0 }

    @inlinable var mask: Int { keys.count - 1 }

    @inlinable func home(_ key: UInt64) -> Int {
        Int(truncatingIfNeeded: (key &* 0x9E37_79B9_7F4A_7C15) >> shift)
    }

    /// The slot holding `key`, or nil.
    @inlinable func slot(of key: UInt64) -> Int? {
        var index = home(key)
        while true {
            let stored = keys[index]
            if stored == key { return index }
            if stored == 0 { return nil }
            index = (index + 1) & mask
        }
    }

    /// The value stored for `key` (nonzero), or nil.
    @inlinable public subscript(key: UInt64) -> Value? {
        guard key != 0, let index = slot(of: key) else { return nil }
        return values[index]
    }

    /// Stores `value` for `key` (nonzero), replacing what was there.
    @inlinable public mutating func insert(_ value: Value, for key: UInt64) {
        precondition(key != 0, "IDTable keys are nonzero")
        if let index = slot(of: key) {
            values[index] = value
            return
        }
        if (stored + 1) * 4 > keys.count * 3 { grow() }
        var index = home(key)
        while keys[index] != 0 { index = (index + 1) & mask }
        keys[index] = key
        values[index] = value
        stored += 1
    }

    /// Removes and returns the value stored for `key`, or nil.
    @inlinable @discardableResult public mutating func removeValue(for key: UInt64) -> Value? {
        guard key != 0, var hole = slot(of: key) else { return nil }
        let removed = values[hole]
        keys[hole] = 0
        values[hole] = nil
        stored -= 1
        // Backward shift: pull later entries of the probe run into the hole when the hole lies
        // between their home slot and where they sit, so every lookup still finds them.
        var index = (hole + 1) & mask
        while keys[index] != 0 {
            let wanted = home(keys[index])
            let reachesHole = hole <= index ? (wanted <= hole || wanted > index) : (wanted <= hole && wanted > index)
            if reachesHole {
                keys[hole] = keys[index]
                values[hole] = values[index]
                keys[index] = 0
                values[index] = nil
                hole = index
            }
            index = (index + 1) & mask
        }
        return removed
    }

    /// Every stored key, in no particular order.
    @inlinable public var storedKeys: [UInt64] { keys.filter { $0 != 0 } }

    @usableFromInline mutating func grow() {
        let oldKeys = keys
        let oldValues = values
        let capacity = keys.count * 2
        keys = [UInt64](repeating: 0, count: capacity)
        values = [Value?](repeating: nil, count: capacity)
        shift -= 1
        stored = 0
        for (index, key) in oldKeys.enumerated() where key != 0 {
            var slot = home(key)
            while keys[slot] != 0 { slot = (slot + 1) & mask }
            keys[slot] = key
            values[slot] = oldValues[index]
            stored += 1
        }
    }
}

extension IDTable where Value: AnyObject {
    /// The object stored for `key` (nonzero), not retained, or nil: for a caller that uses it
    /// only while the table keeps it, without the atomic retain and release of a copy. Nothing
    /// the caller does with it may remove `key` or replace its object while it holds it.
    @inlinable public func unretained(for key: UInt64) -> Unmanaged<Value>? {
        guard key != 0, let index = slot(of: key) else { return nil }
        return values.withUnsafeBufferPointer { slots in slots[index].map { Unmanaged.passUnretained($0) } }
    }
}
