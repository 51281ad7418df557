/// Array-backed queue with amortised O(1) pops.
package struct FIFO<Element> {
    package init() {}

    private var items: [Element] = []
    private var head = 0

    package var isEmpty: Bool { head == items.count }
    package var count: Int { items.count - head }

    package mutating func append(_ item: Element) { items.append(item) }

    package mutating func popFirst() -> Element? {
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

    package mutating func removeAll() {
        items.removeAll()
        head = 0
    }

    package func peekFirst() -> Element? { head < items.count ? items[head] : nil }
}
