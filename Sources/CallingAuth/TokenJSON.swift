import CallingProtocol

/// Reads a JOSE header or a claim set: the project's RFC 8259 parser (`JSONParser`) with the
/// stricter rules a token needs, so that every reader of the same signed bytes reads the same claims.
///
/// - A member name may appear only once at the top level (RFC 7515 §4 and RFC 7519 §4 let a
///   recipient reject duplicates). Parsers disagree on which duplicate wins — Foundation kept the
///   first, jansson the last — and a token whose `alg` or `sub` reads differently in two places is
///   the alg-confusion attack (docs/protocol.md, "Authentication").
/// - Nesting is at most `maximumDepth` levels, the top-level object counting as one.
/// - Integers must fit in 64 bits and strings may not contain U+0000, anywhere in the document. These
///   are jansson's rules (the parser inside libjwt, which reads RS256/ES256 tokens too), kept so
///   that a token does not verify here and fail there, or the other way round.
/// - Non-finite numbers (`1e400`) are already invalid JSON to `JSONParser`.
///
/// Nested objects keep the parser's rule (a later duplicate replaces an earlier one); no claim the
/// verifier reads is inside one.
enum TokenJSON {
    /// Deeper than this is not a token we issue.
    static let maximumDepth = 16

    /// Up to this many members a new name is compared with each one before it (cheaper than
    /// hashing for the dozen or so a token has); beyond it, the names go into a set.
    static let linearNames = 16

    /// The members of the JSON object in `bytes`, or nil for anything else: invalid UTF-8 or JSON, a
    /// non-object, a repeated member name, nesting beyond `maximumDepth`, an integer outside `Int64`,
    /// a string holding U+0000. Never traps.
    static func object(from bytes: [UInt8]) -> TokenObject? {
        var object = TokenObject()
        // Past `linearNames` members the names seen are hashed instead of compared one by one: a
        // token is read before its signature is checked, and an 8 KiB one can hold ~800 members.
        var seen: Set<String>?
        var valid = true
        do {
            let isObject = try JSONParser.parseMembers(bytes, maxDepth: maximumDepth) { name, value in
                guard valid else { return }
                let repeated: Bool
                if var names = seen.take() {
                    repeated = !names.insert(name).inserted
                    seen = names
                } else if object.members.count < linearNames {
                    repeated = object.index(of: name) != nil
                } else {
                    var names = Set(object.members.map(\.name))
                    repeated = !names.insert(name).inserted
                    seen = names
                }
                if repeated || !isAcceptable(name: name, value) {
                    valid = false
                } else {
                    object.members.append(TokenObject.Member(name: name, value: value))
                }
            }
            guard isObject, valid else { return nil }
        } catch {
            return nil
        }
        return object
    }

    private static func isAcceptable(name: String, _ value: JSONValue) -> Bool {
        isAcceptable(name) && isAcceptable(value)
    }

    private static func isAcceptable(_ value: JSONValue) -> Bool {
        switch value {
        case .null, .bool, .int, .double: true
        case .bigInteger: false
        case .string(let text): isAcceptable(text)
        case .array(let elements): elements.allSatisfy(isAcceptable)
        case .object(let members): members.allSatisfy { isAcceptable($0.key) && isAcceptable($0.value) }
        }
    }

    /// No U+0000. Scanned as contiguous bytes: the generic `utf8.contains` went element by element
    /// through the view's index.
    private static func isAcceptable(_ text: String) -> Bool {
        var text = text
        return text.withUTF8 { bytes in
            for byte in bytes where byte == 0 { return false }
            return true
        }
    }
}

/// A JOSE header's or a claim set's top-level members, in document order.
///
/// An array rather than a dictionary: a token has a dozen members or so, with names short enough
/// for Swift to store inline, and comparing two such names costs a few instructions where hashing
/// one costs a few hundred. A join verifies a token, so this is on every join's path.
struct TokenObject: Sendable, Equatable {
    /// One member; its name is unique within the object.
    struct Member: Sendable, Equatable {
        var name: String
        var value: JSONValue
    }

    /// The members in the order the document gave them.
    fileprivate(set) var members: [Member] = []

    /// The position of the member called `name`. Names compare as Swift strings do, by canonical
    /// equivalence, as the dictionary this replaced hashed them: two spellings of "é" are one name.
    func index(of name: String) -> Int? {
        members.firstIndex { $0.name == name }
    }

    /// The value of the member called `name`, if there is one.
    subscript(name: String) -> JSONValue? {
        index(of: name).map { members[$0].value }
    }

    /// The members by name.
    var dictionary: [String: JSONValue] {
        Dictionary(members.map { ($0.name, $0.value) }, uniquingKeysWith: { first, _ in first })
    }
}
