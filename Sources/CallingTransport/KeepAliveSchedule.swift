/// The WebSocket keep-alive's decisions (docs/protocol.md, "Keep-alive"): when each open socket
/// gets its PING and when one that has not answered is dropped. Pure: times are milliseconds of
/// any monotonic clock, passed in; `WebSocketServer` carries out what `advance` returns.
///
/// A socket is confirmed alive at its upgrade and by each PONG, and nothing else. `pingAfter`
/// after its last confirmation it is due a PING; `hangUpAfter` after it, if no PONG came, it is
/// dropped. The first PING after the upgrade comes between half of `pingAfter` and `pingAfter`
/// (a per-socket jitter): sockets that joined together, as after a reconnect storm, would
/// otherwise come due in the same instant every round.
///
/// Why not lws's own policy (`secs_since_valid_ping`): lws 4.1.6 keeps every timer of a service
/// thread in one sorted list, and each PONG moves its socket's timer to the list's far end, a walk
/// over every other socket. A round of N PINGs cost O(N²) (docs/benchmarks.md, "Keep-alive").
///
/// Here the cost is O(1) per event and per socket per round: a timing wheel of `resolution`-wide
/// buckets spanning `hangUpAfter`, each socket listed in the bucket of the moment it must next be
/// looked at. A PONG only stamps the socket's new deadline (it moves buckets only when the new
/// deadline is earlier than the bucket it is in, which happens once per answered PING); `advance`
/// visits just the buckets whose time has come, and a socket found there early (a PONG pushed its
/// deadline back) is listed again where it now belongs.
public struct KeepAliveSchedule: Sendable {
    /// What to do with a socket now.
    public enum Action: Hashable, Sendable {
        /// Send it a PING.
        case ping(UInt64)
        /// It has not answered in time: drop it (it is no longer scheduled).
        case hangUp(UInt64)
    }

    public let pingAfter: Int64
    public let hangUpAfter: Int64
    /// Width of a bucket: an action comes at most this long after its moment.
    public let resolution: Int64

    private struct Entry {
        /// Its upgrade, then its last PONG.
        var confirmedAt: Int64
        /// When it is due its PING, or, once pinged, when it is dropped.
        var deadline: Int64
        /// The bucket tick it is listed under; a listing under another tick is stale.
        var tick: Int64
        var pinged: Bool
    }

    private var entries: [UInt64: Entry] = [:]
    /// Bucket `t % buckets.count` lists (id, t) for sockets to look at once tick `t` has come.
    private var buckets: [[(id: UInt64, tick: Int64)]]
    private var visiting: [(id: UInt64, tick: Int64)] = []
    /// Every tick up to this one has been visited.
    private var visitedTick: Int64
    private let seed: UInt64

    /// `pingAfter` < `hangUpAfter`, both and `resolution` positive, in milliseconds; `now` starts
    /// the clock. `seed` picks the first PINGs' jitter.
    public init(pingAfter: Int64, hangUpAfter: Int64, resolution: Int64 = 100, now: Int64, seed: UInt64) {
        precondition(pingAfter > 0 && hangUpAfter > pingAfter && resolution > 0, "bad keep-alive intervals")
        self.pingAfter = pingAfter
        self.hangUpAfter = hangUpAfter
        self.resolution = resolution
        self.seed = seed
        // Nothing is ever listed further ahead than `hangUpAfter` (+ one bucket for rounding up),
        // so one lap of the wheel never holds two ticks' worth in one bucket.
        let count = Int((hangUpAfter + resolution - 1) / resolution) + 2
        buckets = Array(repeating: [], count: count)
        visitedTick = Self.floorTick(now, resolution)
    }

    /// Sockets scheduled.
    public var count: Int { entries.count }

    /// A socket was upgraded at `now`: its first PING is due between `pingAfter` / 2 and `pingAfter` later.
    public mutating func opened(_ id: UInt64, at now: Int64) {
        let spread = pingAfter / 2
        let jitter = spread > 0 ? Int64(Self.mix(seed &+ id) % UInt64(spread + 1)) : 0
        let deadline = now + pingAfter - jitter
        let tick = listingTick(for: deadline)
        entries[id] = Entry(confirmedAt: now, deadline: deadline, tick: tick, pinged: false)
        list(id, tick)
    }

    /// A PONG arrived from the socket at `now`: it is confirmed alive, its next PING due `pingAfter` later.
    public mutating func confirmed(_ id: UInt64, at now: Int64) {
        guard var entry = entries[id] else { return }
        entry.confirmedAt = now
        entry.deadline = now + pingAfter
        entry.pinged = false
        let tick = listingTick(for: entry.deadline)
        if tick < entry.tick {
            // Listed for its hang-up, later than its next PING: list it where the PING is due.
            // The old listing goes stale (`advance` skips it).
            entry.tick = tick
            list(id, tick)
        }
        entries[id] = entry
    }

    /// The socket closed: forget it.
    public mutating func closed(_ id: UInt64) {
        entries[id] = nil
    }

    /// Appends what is due by `now` to `actions`, each socket once, in bucket order.
    public mutating func advance(to now: Int64, into actions: inout [Action]) {
        let target = Self.floorTick(now, resolution)
        guard target > visitedTick else { return }
        // A clock that jumped further than a lap visits each bucket once (their listings carry
        // their own ticks).
        let first = max(visitedTick + 1, target - Int64(buckets.count) + 1)
        for tick in first...target {
            let index = slot(tick)
            swap(&buckets[index], &visiting)
            for listing in visiting {
                if listing.tick > target {
                    buckets[index].append(listing)  // a later lap's (only after a clock jump)
                    continue
                }
                guard var entry = entries[listing.id], entry.tick == listing.tick else { continue }
                if entry.deadline > now {
                    entry.tick = listingTick(for: entry.deadline, after: target)
                    entries[listing.id] = entry
                    buckets[slot(entry.tick)].append((listing.id, entry.tick))
                } else if entry.pinged {
                    entries[listing.id] = nil
                    actions.append(.hangUp(listing.id))
                } else {
                    // Dropped `hangUpAfter` after its confirmation, as documented, but never
                    // sooner than the PING's own share of that (`hangUpAfter - pingAfter`) after
                    // the PING: a PING sent late (a stalled thread) still gets its time to be answered.
                    entry.deadline = max(entry.confirmedAt + hangUpAfter, now + hangUpAfter - pingAfter)
                    entry.pinged = true
                    entry.tick = listingTick(for: entry.deadline, after: target)
                    entries[listing.id] = entry
                    buckets[slot(entry.tick)].append((listing.id, entry.tick))
                    actions.append(.ping(listing.id))
                }
            }
            visiting.removeAll(keepingCapacity: true)
        }
        visitedTick = target
    }

    // MARK: ticks

    /// The first tick whose visit may act on `deadline` (its time has come by then), and never one
    /// already visited.
    private func listingTick(for deadline: Int64, after visited: Int64? = nil) -> Int64 {
        let tick = -Self.floorTick(-deadline, resolution)
        return max(tick, (visited ?? visitedTick) + 1)
    }

    private mutating func list(_ id: UInt64, _ tick: Int64) {
        buckets[slot(tick)].append((id, tick))
    }

    private func slot(_ tick: Int64) -> Int {
        let count = Int64(buckets.count)
        return Int(((tick % count) + count) % count)
    }

    private static func floorTick(_ time: Int64, _ resolution: Int64) -> Int64 {
        time >= 0 ? time / resolution : (time - resolution + 1) / resolution
    }

    /// splitmix64's finalizer: ids count up, so their jitter must not.
    private static func mix(_ value: UInt64) -> UInt64 {
        var z = value &+ 0x9E37_79B9_7F4A_7C15
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
