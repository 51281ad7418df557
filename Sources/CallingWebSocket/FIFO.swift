/// Array-backed queue with amortised O(1) pops. Public and inlinable although only this package
/// uses it: the server part (another module) appends and pops per frame, and only a public
/// inlinable generic is specialised there (with `package` access it stayed an unspecialised call
/// per append).
///
/// The oldest element sits in an inline slot when the array part is empty, so a queue that never
/// holds more than one element at a time (a relayed frame, a ping's pong) allocates nothing, and a
/// drained queue gives its array back: an idle connection's queue costs no heap at all.
public struct FIFO<Element> {
    /// An empty queue.
    @inlinable public init() {}

    /// The oldest element, when it is not in `items`; set only while `items[head...]` is empty,
    /// so it always comes before everything in the array.
    @usableFromInline var front: Element?
    /// Taken elements are moved out (`take()`), leaving nil: popping costs no reference-count
    /// traffic, and releasing drained storage has nothing left to release.
    @usableFromInline var items: [Element?] = []
    @usableFromInline var head = 0

    /// Nothing queued.
    @inlinable public var isEmpty: Bool { front == nil && head == items.count }
    /// Elements queued.
    @inlinable public var count: Int { (front == nil ? 0 : 1) + items.count - head }

    /// Queues `item` last.
    @inlinable public mutating func append(_ item: Element) {
        if front == nil && head == items.count {
            front = item
        } else {
            // A burst after the inline slot: room for several at once, since a drained queue
            // starts from no storage and growing 1, 2, 4, 8… reallocated
            // several times per fan-out.
            if items.capacity == 0 { items.reserveCapacity(Self.burstCapacity) }
            items.append(item)
        }
    }

    /// What the array part starts with when a second element arrives.
    @inlinable static var burstCapacity: Int { 16 }

    /// Takes the oldest element, or nil when empty.
    @inlinable public mutating func popFirst() -> Element? {
        if let item = front {
            front = nil
            return item
        }
        guard head < items.count else { return nil }
        let item = items[head].take()
        head += 1
        if head == items.count {
            // Drained: let go of the delivered elements and the storage. An idle peer after its
            // welcome burst kept both alive before (the storage until it next had frames queued).
            items = []
            head = 0
        } else if head >= 64 && head * 2 >= items.count {
            items.removeFirst(head)
            head = 0
        }
        return item
    }

    /// Drops everything queued and the storage with it.
    @inlinable public mutating func removeAll() {
        front = nil
        items = []
        head = 0
    }

    /// The oldest element without taking it.
    @inlinable public func peekFirst() -> Element? {
        if let front { return front }
        return head < items.count ? items[head] : nil
    }

    /// Takes the oldest element if `accept` says so when shown it (borrowed: no copy is made to
    /// decide), else nil and the queue is unchanged.
    @inlinable public mutating func popFirst(if accept: (borrowing Element) -> Bool) -> Element? {
        if let front {
            guard accept(front) else { return nil }
        } else {
            guard head < items.count, let next = items[head], accept(next) else { return nil }
        }
        return popFirst()
    }
}
