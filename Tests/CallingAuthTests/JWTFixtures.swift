import CallingAuth
import Foundation
import XCTest

// Test-only helpers: keys made by the openssl command line, and JWTs assembled by hand so the
// verifier is tested against tokens its own issuer (libjwt) would never produce. Nothing here
// calls CallingAuth to build a token, so a bug in the issuer cannot hide one in the verifier.

/// Runs `/usr/bin/openssl`.
enum OpenSSLCLI {
    struct Failure: Error, CustomStringConvertible {
        let arguments: [String]
        let status: Int32
        let stderr: String
        var description: String { "openssl \(arguments.joined(separator: " ")) exited \(status): \(stderr)" }
    }

    static func run(_ arguments: [String], input: [UInt8] = []) throws -> [UInt8] {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/openssl")
        process.arguments = arguments
        let stdin = Pipe(), stdout = Pipe(), stderr = Pipe()
        process.standardInput = stdin
        process.standardOutput = stdout
        process.standardError = stderr
        try process.run()
        // Inputs and outputs here are a few KiB at most, below the pipe buffer, so writing all of
        // stdin before reading stdout cannot deadlock.
        stdin.fileHandleForWriting.write(Data(input))
        try stdin.fileHandleForWriting.close()
        let output = stdout.fileHandleForReading.readDataToEndOfFile()
        let errors = stderr.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else {
            throw Failure(arguments: arguments, status: process.terminationStatus,
                          stderr: String(decoding: errors, as: UTF8.self))
        }
        return Array(output)
    }
}

/// A PEM key pair written by `openssl genpkey`, kept both as text and as files (for `openssl dgst -sign`).
struct KeyPair: Sendable {
    let privatePEM: String
    let publicPEM: String
    let privateKeyPath: String
}

/// Keys generated once per test process: RSA key generation takes a noticeable fraction of a second.
enum Keys {
    static let directory: String = {
        let path = NSTemporaryDirectory() + "calling-auth-tests-\(ProcessInfo.processInfo.processIdentifier)"
        try? FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        return path
    }()

    static let rsa = generate("rsa2048", ["-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048"])
    static let otherRSA = generate("rsa2048-other", ["-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048"])
    static let weakRSA = generate("rsa1024", ["-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:1024"])
    static let p256 = generate("p256", ["-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256"])
    static let p384 = generate("p384", ["-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-384"])
    static let ed25519 = generate("ed25519", ["-algorithm", "ED25519"])

    /// Nil if openssl failed; tests then fail on `XCTUnwrap` with the reason printed here.
    private static func generate(_ name: String, _ options: [String]) -> KeyPair? {
        let privatePath = "\(directory)/\(name).pem"
        do {
            _ = try OpenSSLCLI.run(["genpkey"] + options + ["-out", privatePath])
            let publicPEM = try OpenSSLCLI.run(["pkey", "-in", privatePath, "-pubout"])
            let privatePEM = try String(contentsOfFile: privatePath, encoding: .utf8)
            return KeyPair(privatePEM: privatePEM, publicPEM: String(decoding: publicPEM, as: UTF8.self),
                           privateKeyPath: privatePath)
        } catch {
            print("key generation failed for \(name): \(error)")
            return nil
        }
    }
}

/// Compact JWS assembled by hand.
enum HandMadeJWT {
    static func base64url(_ bytes: [UInt8]) -> String {
        Data(bytes).base64EncodedString()
            .replacingOccurrences(of: "+", with: "-")
            .replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    static func base64url(_ text: String) -> String { base64url(Array(text.utf8)) }

    static func decodeBase64url(_ text: Substring) -> [UInt8]? {
        var standard = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while standard.count % 4 != 0 { standard += "=" }
        return Data(base64Encoded: standard).map(Array.init)
    }

    /// `base64url(header).base64url(payload).` — the signing input plus a dot, signature to follow.
    static func signingInput(header: String, payload: String) -> String {
        base64url(header) + "." + base64url(payload)
    }

    /// An HMAC-signed token; `digest` is "sha256" for HS256, "sha512" for HS512.
    static func hmac(header: String, payload: String, key: [UInt8], digest: String = "sha256") throws -> String {
        let input = signingInput(header: header, payload: payload)
        let hexKey = key.map { String(format: "%02x", $0) }.joined()
        let mac = try OpenSSLCLI.run(["dgst", "-\(digest)", "-mac", "HMAC", "-macopt", "hexkey:\(hexKey)", "-binary"],
                                     input: Array(input.utf8))
        return input + "." + base64url(mac)
    }

    /// An RS256 token signed by `openssl dgst -sign` (PKCS#1 v1.5 with SHA-256).
    static func rs256(header: String = #"{"alg":"RS256","typ":"JWT"}"#, payload: String, keyPath: String) throws -> String {
        let input = signingInput(header: header, payload: payload)
        let signature = try OpenSSLCLI.run(["dgst", "-sha256", "-sign", keyPath, "-binary"], input: Array(input.utf8))
        return input + "." + base64url(signature)
    }

    static func header(of token: String) -> String? {
        guard let first = token.split(separator: ".", omittingEmptySubsequences: false).first,
              let bytes = decodeBase64url(first) else { return nil }
        return String(decoding: bytes, as: UTF8.self)
    }
}

/// Fixed inputs shared by the token tests.
enum Fixture {
    /// 2023-11-14T22:13:20Z.
    static let now = Date(timeIntervalSince1970: 1_700_000_000)
    static let secret = Array("an-hs256-secret-that-is-32-bytes+".utf8)
    static let otherSecret = Array("another-hs256-secret-of-32-bytes!".utf8)

    /// A payload accepted at `now`, as JSON text.
    static func payload(
        sub: String? = "alice",
        exp: String? = "1700003600",
        extra: String = ""
    ) -> String {
        var members: [String] = []
        if let sub { members.append(#""sub":"\#(sub)""#) }
        if let exp { members.append(#""exp":\#(exp)"#) }
        if !extra.isEmpty { members.append(extra) }
        return "{" + members.joined(separator: ",") + "}"
    }

    static let hs256Header = #"{"alg":"HS256","typ":"JWT"}"#
}

/// Asserts that `body` throws exactly `expected`.
func XCTAssertThrowsTokenError(
    _ expected: TokenError,
    _ message: String = "",
    file: StaticString = #filePath,
    line: UInt = #line,
    _ body: () throws(TokenError) -> PeerTokenClaims
) {
    do {
        let claims = try body()
        XCTFail("expected \(expected), got claims for \(claims.sub) \(message)", file: file, line: line)
    } catch {
        XCTAssertEqual(error, expected, message, file: file, line: line)
    }
}
