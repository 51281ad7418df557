import CBuildInfo

/// What `calling-server --version` prints.
public enum BuildInfo {
    /// The release version of this source tree.
    public static let version = "0.1.0"
    /// The git commit of the build (`make` records it, suffixed `-dirty` when the work tree had
    /// uncommitted changes); "unknown" for a plain `swift build`.
    public static var commit: String { String(cString: calling_build_commit()) }
}
