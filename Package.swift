// swift-tools-version:6.0
import Foundation
import PackageDescription

// The iOS media engine (CallingWebRTC) links WebRTC: on Apple platforms the binary of
// stasel/WebRTC; on Linux a stub module of the signatures the engine uses (Sources/WebRTCStub),
// for the compile check only. CALLING_PACKAGE_APPLE_GRAPH=1 evaluates the Apple branch anywhere,
// so tests/integration/test_apple_graph.py can read it with `swift package dump-package`.
#if os(Linux)
let appleGraph = ProcessInfo.processInfo.environment["CALLING_PACKAGE_APPLE_GRAPH"] == "1"
#else
let appleGraph = true
#endif
let webRTC: Target.Dependency = appleGraph ? .product(name: "WebRTC", package: "WebRTC") : .target(name: "WebRTC")
let webRTCStub: [Target] = appleGraph ? [] : [.target(name: "WebRTC", path: "Sources/WebRTCStub")]
let webRTCPackage: [Package.Dependency] = appleGraph ? [.package(url: "https://github.com/stasel/WebRTC.git", exact: "117.0.0")] : []

// Dependencies point inward: C adapters at the edge, CallingCore and CallingProtocol in the middle
// with no C imports. See docs/architecture.md.
let package = Package(
    name: "CallingServer",
    platforms: [.macOS(.v14), .iOS(.v15)],
    products: [
        .executable(name: "calling-server", targets: ["calling-server"]),
        .executable(name: "calling-bench", targets: ["calling-bench"]),
        .library(name: "CallingProtocol", targets: ["CallingProtocol"]),
        .library(name: "CallingClient", targets: ["CallingClient"]),
        .library(name: "CallingMedia", targets: ["CallingMedia"]),
        .library(name: "CallingWebRTC", targets: ["CallingWebRTC"]),
    ],
    dependencies: webRTCPackage,
    targets: [
        // C libraries: one system-library target each, imported by exactly one adapter module.
        .systemLibrary(name: "CLibWebSockets", pkgConfig: "libwebsockets", providers: [.apt(["libwebsockets-dev"])]),
        .systemLibrary(name: "CJWT", pkgConfig: "libjwt", providers: [.apt(["libjwt-dev"])]),
        .systemLibrary(name: "CSQLite", pkgConfig: "sqlite3", providers: [.apt(["libsqlite3-dev"])]),
        .systemLibrary(name: "CPostgres", pkgConfig: "libpq", providers: [.apt(["libpq-dev"])]),
        .systemLibrary(name: "COpenSSL", pkgConfig: "openssl", providers: [.apt(["libssl-dev"])]),
        // No pkgConfig: hiredis.pc adds -D_FILE_OFFSET_BITS=64, which SwiftPM refuses with a warning;
        // the header is at <hiredis/hiredis.h> on the default include path and the modulemap links it.
        .systemLibrary(name: "CHiredis", providers: [.apt(["libhiredis-dev"])]),
        // epoll and sched_setaffinity (libc, but not in Glibc's Swift module); only CallingBench imports it.
        .systemLibrary(name: "CEpoll"),
        .systemLibrary(
            name: "CGStreamer", pkgConfig: "calling-gstreamer",
            providers: [.apt(["libgstreamer1.0-dev", "libgstreamer-plugins-base1.0-dev", "libgstreamer-plugins-bad1.0-dev"])]
        ),

        // The value types apps see through the SDK (JSONValue, PeerID/RoomID/CallID, StatsSample).
        .target(name: "CallingValues"),
        .target(name: "CallingProtocol", dependencies: ["CallingValues"]),
        // The Logger every layer writes through (server, transport, SDK); JSON lines via CallingProtocol's writer.
        .target(name: "CallingLogging", dependencies: ["CallingProtocol"]),
        // Server logic (Hub, presence, lifecycle, limits); neither the SDK nor CallingMedia links it.
        .target(name: "CallingCore", dependencies: ["CallingProtocol", "CallingLogging"]),
        .target(name: "CallingStore", dependencies: ["CSQLite", "CallingCore"], resources: [.copy("schema")]),
        // Shared chat history in PostgreSQL (`database_url`), behind CallingStore's ChatPersistence.
        .target(name: "CallingPostgres", dependencies: ["CPostgres", "CallingStore", "CallingCore"]),
        // CallingProtocol for its JSON parser, which reads token headers and claims (no second parser).
        .target(name: "CallingAuth", dependencies: ["CJWT", "COpenSSL", "CallingValues", "CallingProtocol", "CallingLogging"]),
        // What a client connection is given and reports without naming a transport: URL endpoints,
        // TLS options, failure codes, HTTP answers. Pure Swift, so the SDK has them without lws.
        .target(name: "CallingEndpoints"),
        // The libwebsockets adapter: the WebSocket codec and loop pieces both ends share (messages,
        // queues, framing, TLS options and contexts, the log hook) and the client loop the SDK runs.
        .target(name: "CallingWebSocket", dependencies: ["CLibWebSockets", "CallingEndpoints", "CallingProtocol", "CallingLogging"]),
        // The server part: WebSocketServer (HTTP, upgrades, budgets, TLS server contexts) and the HTTP
        // message types. The SDK does not link it.
        .target(name: "CallingTransport", dependencies: ["CallingWebSocket", "CallingProtocol", "CallingLogging"]),
        // Cluster mode's Redis client (hiredis); only CallingServer's cluster driver uses it.
        .target(name: "CallingRedis", dependencies: ["CHiredis"]),
        // The git commit of the build, from a header `make` writes (Makefile, build-info).
        .target(name: "CBuildInfo"),
        .target(
            name: "CallingServer",
            dependencies: ["CallingProtocol", "CallingCore", "CallingStore", "CallingPostgres", "CallingAuth", "CallingTransport",
                           "CallingRedis", "CBuildInfo"]
        ),
        .executableTarget(name: "calling-server", dependencies: ["CallingServer", "CallingClient", "CallingMedia", "CallingProtocol"]),
        // Fuzz targets (`make fuzz`, `make test-fuzz`; docs/operations.md).
        .executableTarget(name: "calling-fuzz", dependencies: ["CallingServer", "CallingProtocol", "CallingCore", "CallingAuth",
                                                                "CallingTransport"]),
        // The SDK. Its sockets and REST go through a transport seam: the libwebsockets client on
        // Linux, URLSession elsewhere, so on Apple platforms its graph holds no C library
        // (tests/integration/test_apple_graph.py holds that).
        .target(
            name: "CallingClient",
            dependencies: ["CallingValues", "CallingEndpoints", "CallingProtocol", "CallingLogging",
                           .target(name: "CallingWebSocket", condition: .when(platforms: [.linux]))]
        ),
        .target(name: "CallingMedia", dependencies: ["CGStreamer", "CallingClient", "CallingProtocol", "CallingAuth"]),
        // The iOS MediaEngine on WebRTC (docs/ios.md). On Linux it compiles against the stub and never runs.
        .target(name: "CallingWebRTC", dependencies: ["CallingClient", webRTC],
                swiftSettings: [.define("WEBRTC_STUB", .when(platforms: [.linux]))]),
        // The SDK example from docs/sdk.md, built with everything else so it cannot rot.
        .executableTarget(name: "ChatBot", dependencies: ["CallingClient"], path: "Examples/ChatBot"),
        // The voice agent of docs/sdk.md ("Example: voice agent"): the SDK with CallingMedia.
        .executableTarget(name: "VoiceAgent", dependencies: ["CallingClient", "CallingMedia"], path: "Examples/VoiceAgent"),
        .target(name: "CallingTesting", dependencies: ["CallingCore", "CallingStore", "CallingTransport"]),
        // Load generators and the benchmark suite (bench/README.md). Neither the server library nor
        // the SDK links it; `calling-server bench` hands over to the calling-bench executable.
        .target(
            name: "CallingBench",
            dependencies: ["CEpoll", "CallingServer", "CallingAuth", "CallingCore", "CallingStore", "CallingPostgres",
                           "CallingTransport", "CallingTesting"]
        ),
        .executableTarget(name: "calling-bench", dependencies: ["CallingBench"]),

        .testTarget(name: "CallingProtocolTests", dependencies: ["CallingProtocol"], resources: [.copy("Fixtures")]),
        .testTarget(name: "CallingLoggingTests", dependencies: ["CallingLogging"]),
        .testTarget(name: "CallingCoreTests", dependencies: ["CallingCore", "CallingTesting"]),
        .testTarget(name: "CallingAuthTests", dependencies: ["CallingAuth", "CallingTesting"]),
        .testTarget(
            name: "CallingClientTests",
            dependencies: ["CallingClient", "CallingProtocol", "CallingServer", "CallingTesting", "CallingAuth"]
        ),
        .testTarget(name: "CallingWebSocketTests", dependencies: ["CallingWebSocket", "CallingTransport", "CallingTesting", "CallingCore"]),
        .testTarget(name: "CallingBenchTests", dependencies: ["CallingBench"]),
        .testTarget(name: "CallingMediaTests", dependencies: ["CallingMedia", "CallingAuth"]),
        .testTarget(name: "CallingPostgresTests", dependencies: ["CallingPostgres", "CallingStore", "CallingTesting"]),
        .testTarget(name: "CallingStoreTests", dependencies: ["CallingStore", "CallingPostgres", "CallingTesting"]),
        .testTarget(name: "CallingRedisTests", dependencies: ["CallingRedis", "CallingTesting"]),
        .testTarget(
            name: "CallingServerTests",
            dependencies: ["CallingServer", "CallingTesting", "CallingAuth", "CallingProtocol"]
        ),
        .testTarget(name: "CallingWebRTCTests", dependencies: ["CallingWebRTC"]),
    ] + webRTCStub,
    swiftLanguageModes: [.v6]
)
