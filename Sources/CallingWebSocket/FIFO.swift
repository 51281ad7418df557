/// Array-backed queue with amortised O(1) pops. Public and inlinable although only this package
/// uses it: the server part (another module) appends and pops per frame, and only a public
/// inlinable generic is specialised there (with `package` access it stayed an unspecialised call,
/// ~500 instructions per append under callgrind).
public struct FIFO<Element> {
    /// An empty queue.
    @inlinable public init() {}

    @usableFromInline var items: [Element] = []
    @usableFromInline var head = 0

    /// Nothing queued.
    @inlinable public var isEmpty: Bool { head == items.count }
    /// Elements queued.
    @inlinable public var count: Int { items.count - head }

    /// Queues `item` last.
    @inlinable public mutating func append(_ item: Element) { items.append(item) }

    /// Takes the oldest element, or nil when empty.
    @inlinable public mutating func popFirst() -> Element? {
        guard head < items.count else { return nil }
        let item = items[head]
        head += 1
        if head == items.count {
            // Drained: let go of the delivered elements now. A connection that goes quiet (an idle
            // peer after its welcome) kept its last frames alive until 64 more had been popped.
            items.removeAll(keepingCapacity: true)
            head = 0
        } else if head >= 64 && head * 2 >= items.count {
            items.removeFirst(head)
            head = 0
        }
        return item
    }

    /// Drops everything queued and the storage with it.
    @inlinable public mutating func removeAll() {
        items.removeAll()
        head = 0
    }

    /// The oldest element without taking it.
    @inlinable public func peekFirst() -> Element? { head < items.count ? items[head] : nil }
}
