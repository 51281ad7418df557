import CallingValues
import Foundation

/// What a verified peer token says about its bearer.
///
/// On the wire: `sub`, `room_id`, `call_id`, `role`, `name`, `scope` (one space-separated string),
/// `aud`, and the NumericDate claims `iat`, `exp`, `nbf`. `exp` and `sub` are required.
public struct PeerTokenClaims: Sendable, Equatable {
    /// The peer, from `sub`.
    public var sub: PeerID
    /// The room the token admits to (`room_id`); nil means the token is not bound to one room.
    public var roomID: RoomID?
    /// The business call (`call_id`).
    public var callID: CallID?
    /// Free-form role, for example "host" (`role`).
    public var role: String?
    /// Display name (`name`).
    public var name: String?
    /// Granted scopes, for example `["room", "presence"]`; on the wire `"room presence"`.
    /// Empty when the claim is absent.
    public var scope: [String]
    /// The audience (`aud`). After verification: the verifier's expected audience if it has one;
    /// otherwise the token's string, or the first entry of an array.
    public var audience: String?
    /// `iat`. Written as whole seconds (rounded down), so sub-second precision does not survive.
    public var issuedAt: Date?
    /// `exp`. Written as whole seconds (rounded down).
    public var expiresAt: Date
    /// `nbf`. Written as whole seconds (rounded down).
    public var notBefore: Date?
    /// `jti`: the token's unique id, when the issuer gave it one (the admin API's kick remembers it).
    public var tokenID: String?
    /// `max_peers`: the seat limit of the token's room for this joiner (0 = unlimited); absent means
    /// the server's `max_peers_per_room`.
    public var maxPeers: Int?
    /// `moderator`: the peer may delete anyone's chat messages in the room. Absent means false.
    public var moderator: Bool

    public init(
        sub: PeerID,
        roomID: RoomID? = nil,
        callID: CallID? = nil,
        role: String? = nil,
        name: String? = nil,
        scope: [String] = [],
        audience: String? = nil,
        issuedAt: Date? = nil,
        expiresAt: Date,
        notBefore: Date? = nil,
        tokenID: String? = nil,
        maxPeers: Int? = nil,
        moderator: Bool = false
    ) {
        self.moderator = moderator
        self.sub = sub
        self.roomID = roomID
        self.callID = callID
        self.role = role
        self.name = name
        self.scope = scope
        self.audience = audience
        self.issuedAt = issuedAt
        self.expiresAt = expiresAt
        self.notBefore = notBefore
        self.tokenID = tokenID
        self.maxPeers = maxPeers
    }
}

/// Claim names on the wire, in one place.
enum ClaimName {
    static let subject = "sub"
    static let roomID = "room_id"
    static let callID = "call_id"
    static let role = "role"
    static let name = "name"
    static let scope = "scope"
    static let audience = "aud"
    static let issuedAt = "iat"
    static let expiresAt = "exp"
    static let notBefore = "nbf"
    static let tokenID = "jti"
    static let maxPeers = "max_peers"
    static let moderator = "moderator"
}

extension PeerTokenClaims {
    /// Reads the claims of a payload whose signature has been verified. Checks presence and types
    /// only; time and audience are the verifier's business.
    init(verified read: ClaimValues) throws(TokenError) {
        guard let subject = try Self.string(ClaimName.subject, read.subject, allowEmpty: false) else {
            throw .missingClaim(ClaimName.subject)
        }
        guard let expiry = try Self.numericDate(ClaimName.expiresAt, read.expiresAt) else {
            throw .missingClaim(ClaimName.expiresAt)
        }
        let roomID = try Self.string(ClaimName.roomID, read.roomID, allowEmpty: false)
        let callID = try Self.string(ClaimName.callID, read.callID, allowEmpty: false)
        let role = try Self.string(ClaimName.role, read.role, allowEmpty: true)
        let name = try Self.string(ClaimName.name, read.name, allowEmpty: true)
        let scopeText = try Self.string(ClaimName.scope, read.scope, allowEmpty: true)
        let issuedAt = try Self.numericDate(ClaimName.issuedAt, read.issuedAt)
        let notBefore = try Self.numericDate(ClaimName.notBefore, read.notBefore)
        let tokenID = try Self.string(ClaimName.tokenID, read.tokenID, allowEmpty: false)
        var maxPeers: Int?
        switch read.maxPeers {
        case nil, .null?: break
        case .int(let value)? where value >= 0 && value <= 1_000_000: maxPeers = Int(value)
        case .double(let value)? where value >= 0 && value <= 1_000_000 && value.rounded() == value: maxPeers = Int(value)
        default: throw .invalidClaim(ClaimName.maxPeers)
        }
        var moderator = false
        switch read.moderator {
        case nil, .null?: break
        case .bool(let flag)?: moderator = flag
        default: throw .invalidClaim(ClaimName.moderator)
        }
        self.init(
            sub: PeerID(subject),
            roomID: roomID.map { RoomID($0) },
            callID: callID.map { CallID($0) },
            role: role,
            name: name,
            scope: scopeText.map { Self.splitScope($0) } ?? [],
            audience: nil,
            issuedAt: issuedAt,
            expiresAt: expiry,
            notBefore: notBefore,
            tokenID: tokenID,
            maxPeers: maxPeers,
            moderator: moderator
        )
    }

    /// `"room  presence"` → `["room", "presence"]`: RFC 8693 scope syntax, runs of spaces ignored.
    static func splitScope(_ text: String) -> [String] {
        text.split(separator: " ", omittingEmptySubsequences: true).map(String.init)
    }

    /// The `aud` claim as a list: a string is a list of one. Nil if absent; invalid if another type.
    static func audiences(_ value: JSONValue?) throws(TokenError) -> [String]? {
        switch value {
        case nil, .null?:
            return nil
        case .string(let single)?:
            return [single]
        case .array(let entries)?:
            var audiences = [String]()
            for entry in entries {
                guard case .string(let value) = entry else { throw .invalidClaim(ClaimName.audience) }
                audiences.append(value)
            }
            return audiences
        default:
            throw .invalidClaim(ClaimName.audience)
        }
    }

    /// A string claim; absent or JSON null reads as nil.
    private static func string(_ name: String, _ value: JSONValue?, allowEmpty: Bool) throws(TokenError) -> String? {
        switch value {
        case nil, .null?:
            return nil
        case .string(let value)?:
            guard allowEmpty || !value.isEmpty else { throw .invalidClaim(name) }
            return value
        default:
            throw .invalidClaim(name)
        }
    }

    /// The largest NumericDate magnitude accepted, 9999-12-31T23:59:59Z in seconds. Beyond it a date
    /// is no one's real expiry, and the server's millisecond clock arithmetic on `exp` (an `Int64`)
    /// would overflow for values near `Int64.max` seconds.
    static let maximumNumericDate: Double = 253_402_300_799

    /// A NumericDate claim: seconds since the epoch, an integer or a fraction, within
    /// ±`maximumNumericDate`. (Integers beyond 64 bits and non-finite numbers never get here: the
    /// whole token is malformed, see `TokenJSON`.)
    private static func numericDate(_ name: String, _ value: JSONValue?) throws(TokenError) -> Date? {
        let seconds: Double
        switch value {
        case nil, .null?:
            return nil
        case .int(let value)?:
            seconds = Double(value)
        case .double(let value)?:
            seconds = value
        default:
            throw .invalidClaim(name)
        }
        guard seconds.isFinite, abs(seconds) <= maximumNumericDate else { throw .invalidClaim(name) }
        return Date(timeIntervalSince1970: seconds)
    }
}

/// The claims this server reads, picked out of a payload in one pass instead of a lookup each.
///
/// A member's name is compared only with the claim names of its length. That loses nothing to
/// Swift's canonical equivalence: no other spelling is canonically equivalent to these lowercase
/// ASCII names, and `TokenObject` has already refused a repeated name.
struct ClaimValues {
    var subject: JSONValue?
    var roomID: JSONValue?
    var callID: JSONValue?
    var role: JSONValue?
    var name: JSONValue?
    var scope: JSONValue?
    var audience: JSONValue?
    var issuedAt: JSONValue?
    var expiresAt: JSONValue?
    var notBefore: JSONValue?
    var tokenID: JSONValue?
    var maxPeers: JSONValue?
    var moderator: JSONValue?

    init(_ payload: TokenObject) {
        for member in payload.members {
            let value = member.value
            switch member.name.utf8.count {
            case 3:
                switch member.name {
                case ClaimName.subject: subject = value
                case ClaimName.expiresAt: expiresAt = value
                case ClaimName.issuedAt: issuedAt = value
                case ClaimName.notBefore: notBefore = value
                case ClaimName.audience: audience = value
                case ClaimName.tokenID: tokenID = value
                default: break
                }
            case 4:
                switch member.name {
                case ClaimName.role: role = value
                case ClaimName.name: name = value
                default: break
                }
            case 5:
                if member.name == ClaimName.scope { scope = value }
            case 7:
                switch member.name {
                case ClaimName.roomID: roomID = value
                case ClaimName.callID: callID = value
                default: break
                }
            case 9:
                switch member.name {
                case ClaimName.maxPeers: maxPeers = value
                case ClaimName.moderator: moderator = value
                default: break
                }
            default:
                break
            }
        }
    }
}
