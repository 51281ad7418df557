import XCTest

@testable import CallingWebSocket

final class FIFOTests: XCTestCase {
    func test_keeps_order_across_compaction() {
        var queue = FIFO<Int>()
        var popped: [Int] = []
        for value in 0..<500 {
            queue.append(value)
            if value % 3 == 0, let first = queue.popFirst() { popped.append(first) }
        }
        while let value = queue.popFirst() { popped.append(value) }
        XCTAssertEqual(popped, Array(0..<500))
        XCTAssertTrue(queue.isEmpty)
        XCTAssertNil(queue.peekFirst())
    }

    func test_a_drained_queue_holds_no_element() {
        final class Tracked {}
        weak var delivered: Tracked?
        var queue = FIFO<Tracked>()
        do {
            let item = Tracked()
            delivered = item
            queue.append(item)
        }
        XCTAssertNotNil(queue.popFirst())
        XCTAssertNil(delivered, "a popped element of a drained queue is released at once")
        queue.append(Tracked())
        XCTAssertEqual(queue.count, 1)
    }

    func test_order_holds_when_the_inline_slot_and_the_array_interleave() {
        var queue = FIFO<Int>()
        var popped: [Int] = []
        var next = 0
        // Bursts of 1, 2, 3… with a pop between appends, so the inline slot empties while the
        // array still holds elements, and fills again only once the array has drained.
        for burst in 1...40 {
            for _ in 0..<burst {
                queue.append(next)
                next += 1
            }
            XCTAssertEqual(queue.count, next - popped.count)
            if burst % 2 == 0, let first = queue.popFirst() { popped.append(first) }
            if burst % 5 == 0 { while let value = queue.popFirst() { popped.append(value) } }
            XCTAssertEqual(queue.peekFirst(), queue.isEmpty ? nil : popped.count)
        }
        while let value = queue.popFirst() { popped.append(value) }
        XCTAssertEqual(popped, Array(0..<next))
    }

    func test_a_drained_queue_gives_its_storage_back() {
        var queue = FIFO<Int>()
        for value in 0..<10 { queue.append(value) }
        while queue.popFirst() != nil {}
        XCTAssertEqual(queue.items.capacity, 0, "an idle connection's queue keeps no array")
        queue.append(1)
        XCTAssertEqual(queue.items.capacity, 0, "a lone element waits in the inline slot")
        queue.removeAll()
        XCTAssertTrue(queue.isEmpty)
    }

    func test_pop_if_takes_only_what_is_accepted_in_order() {
        var queue = FIFO<Int>()
        XCTAssertNil(queue.popFirst(if: { _ in true }))
        for value in [1, 2, 30, 4] { queue.append(value) }
        XCTAssertEqual(queue.popFirst(if: { $0 < 10 }), 1, "from the inline slot")
        XCTAssertEqual(queue.popFirst(if: { $0 < 10 }), 2, "from the array")
        XCTAssertNil(queue.popFirst(if: { $0 < 10 }), "30 is refused and stays first")
        XCTAssertEqual(queue.count, 2)
        XCTAssertEqual(queue.popFirst(), 30)
        XCTAssertEqual(queue.popFirst(if: { _ in true }), 4)
        XCTAssertTrue(queue.isEmpty)
    }
}
