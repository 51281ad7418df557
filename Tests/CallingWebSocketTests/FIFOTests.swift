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
}
