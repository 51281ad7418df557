import Foundation

/// A throwaway PKI made with the `openssl` command-line tool in a fresh temporary folder: a CA,
/// server certificates it signs, and a second, unrelated CA. Only for tests; the keys are P-256.
public final class TestCertificates: Sendable {
    public let directory: String
    /// The CA that signs `issueServer`'s certificates.
    public let caFile: String
    /// A CA nobody signed anything with: trusting only it must refuse every server here.
    public let otherCAFile: String

    public struct Failure: Error, CustomStringConvertible {
        public let description: String
    }

    public init() throws {
        directory = NSTemporaryDirectory() + "calling-tls-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        caFile = directory + "/ca.pem"
        otherCAFile = directory + "/other-ca.pem"
        try Self.makeCA(directory: directory, name: "ca", commonName: "calling-server test CA")
        try Self.makeCA(directory: directory, name: "other-ca", commonName: "unrelated test CA")
    }

    /// A server certificate signed by `caFile` for `names` (DNS names and IP addresses in its
    /// subjectAltName). Returns the certificate and key paths: `<name>.pem`, `<name>.key`.
    @discardableResult
    public func issueServer(_ name: String, names: [String] = ["localhost", "127.0.0.1"], days: Int = 2) throws
        -> (cert: String, key: String)
    {
        let cert = "\(directory)/\(name).pem"
        let key = "\(directory)/\(name).key"
        let csr = "\(directory)/\(name).csr"
        let extensions = "\(directory)/\(name).ext"
        let san = names.map { $0.allSatisfy { $0.isNumber || $0 == "." || $0 == ":" } ? "IP:\($0)" : "DNS:\($0)" }
        try ("subjectAltName=\(san.joined(separator: ","))\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n")
            .write(toFile: extensions, atomically: true, encoding: .utf8)
        try Self.openssl(["req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", key,
                          "-out", csr, "-subj", "/CN=\(names.first ?? name)"])
        try Self.openssl(["x509", "-req", "-in", csr, "-CA", caFile, "-CAkey", "\(directory)/ca.key", "-CAcreateserial",
                          "-out", cert, "-days", "\(days)", "-extfile", extensions])
        return (cert, key)
    }

    /// A server certificate signed by `caFile` for `names` whose validity ended long ago (1-2 Jan
    /// 2020). `openssl x509` cannot back-date, so this goes through `openssl ca` and a minimal
    /// config of its own. Returns `<name>.pem` and `<name>.key`.
    @discardableResult
    public func issueExpiredServer(_ name: String, names: [String] = ["localhost", "127.0.0.1"]) throws
        -> (cert: String, key: String)
    {
        let cert = "\(directory)/\(name).pem"
        let key = "\(directory)/\(name).key"
        let csr = "\(directory)/\(name).csr"
        let extensions = "\(directory)/\(name).ext"
        let caDirectory = "\(directory)/\(name)-ca"
        try FileManager.default.createDirectory(atPath: caDirectory, withIntermediateDirectories: true)
        try "".write(toFile: "\(caDirectory)/index.txt", atomically: true, encoding: .utf8)
        try "01\n".write(toFile: "\(caDirectory)/serial", atomically: true, encoding: .utf8)
        try """
            [ca]
            default_ca = backdated
            [backdated]
            database = \(caDirectory)/index.txt
            new_certs_dir = \(caDirectory)
            serial = \(caDirectory)/serial
            default_md = sha256
            policy = any
            unique_subject = no
            [any]
            commonName = supplied

            """.write(toFile: "\(caDirectory)/ca.cnf", atomically: true, encoding: .utf8)
        let san = names.map { $0.allSatisfy { $0.isNumber || $0 == "." || $0 == ":" } ? "IP:\($0)" : "DNS:\($0)" }
        try ("subjectAltName=\(san.joined(separator: ","))\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n")
            .write(toFile: extensions, atomically: true, encoding: .utf8)
        try Self.openssl(["req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", key,
                          "-out", csr, "-subj", "/CN=\(names.first ?? name)"])
        try Self.openssl(["ca", "-batch", "-config", "\(caDirectory)/ca.cnf", "-cert", caFile, "-keyfile", "\(directory)/ca.key",
                          "-in", csr, "-out", cert, "-startdate", "20200101000000Z", "-enddate", "20200102000000Z",
                          "-extfile", extensions, "-notext"])
        return (cert, key)
    }

    /// A fresh private key that belongs to no certificate.
    public func strayKey(_ name: String) throws -> String {
        let key = "\(directory)/\(name).key"
        try Self.openssl(["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", key])
        return key
    }

    public func remove() {
        try? FileManager.default.removeItem(atPath: directory)
    }

    private static func makeCA(directory: String, name: String, commonName: String) throws {
        try openssl(["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                     "-keyout", "\(directory)/\(name).key", "-out", "\(directory)/\(name).pem", "-days", "3",
                     "-subj", "/CN=\(commonName)"])
    }

    private static func openssl(_ arguments: [String]) throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/openssl")
        process.arguments = arguments
        let errors = Pipe()
        process.standardError = errors
        process.standardOutput = FileHandle.nullDevice
        try process.run()
        let output = errors.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else {
            throw Failure(description: "openssl \(arguments.first ?? "") failed: \(String(decoding: output, as: UTF8.self))")
        }
    }
}
