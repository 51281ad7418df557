// STUB OF THE WebRTC MODULE, FOR THE LINUX COMPILE CHECK OF CallingWebRTC ONLY. Nothing here works:
// every method traps. On Apple platforms Package.swift links the real module, the WebRTC.xcframework
// of stasel/WebRTC (built from unmodified webrtc.googlesource.com sources), and this target does
// not exist there.
//
// Each declaration is the Swift import of a declaration in WebRTC's public Objective-C headers
// (sdk/objc/api/peerconnection/RTCPeerConnection.h, RTCPeerConnectionFactory.h, RTCConfiguration.h,
// RTCIceServer.h, RTCIceCandidate.h, RTCSessionDescription.h, RTCMediaConstraints.h,
// RTCStatisticsReport.h, RTCRtpTransceiver.h, RTCRtpSender.h, RTCRtpReceiver.h,
// RTCMediaStreamTrack.h, RTCAudioTrack.h, RTCAudioSource.h, RTCMediaStream.h, RTCSSLAdapter.h and
// sdk/objc/components/audio/RTCAudioSession.h, RTCAudioSessionConfiguration.h), limited to what
// CallingWebRTC uses, with two deliberate differences (docs/ios.md, "What was verified"):
// the optional requirements of RTCPeerConnectionDelegate are plain requirements (Linux has no
// `@objc optional`), and `RTCAudioSessionConfiguration.categoryOptions` is left out (its type is
// AVFoundation's). A signature wrong here compiles here and fails on an Apple build.
import Foundation

/// CoreFoundation's `CFTimeInterval` (a Double), which Foundation on Linux does not export.
public typealias CFTimeInterval = Double

private func stub(_ function: String = #function) -> Never {
    fatalError("WebRTC stub (Sources/WebRTCStub): \(function) is a compile-time stand-in and does nothing")
}

/// RTCSSLAdapter.h: `BOOL RTCInitializeSSL(void)`.
@discardableResult public func RTCInitializeSSL() -> Bool { stub() }

/// RTCSessionDescription.h: `RTCSdpType`.
public enum RTCSdpType: Int, Sendable { case offer, prAnswer, answer, rollback }

/// RTCSessionDescription.h.
open class RTCSessionDescription: NSObject {
    public var type: RTCSdpType { stub() }
    public var sdp: String { stub() }
    public init(type: RTCSdpType, sdp: String) { stub() }
}

/// RTCIceCandidate.h.
open class RTCIceCandidate: NSObject {
    public var sdpMid: String? { stub() }
    public var sdpMLineIndex: Int32 { stub() }
    public var sdp: String { stub() }
    public init(sdp: String, sdpMLineIndex: Int32, sdpMid: String?) { stub() }
}

/// RTCIceServer.h.
open class RTCIceServer: NSObject {
    public init(urlStrings: [String], username: String?, credential: String?) { stub() }
}

/// RTCConfiguration.h: `RTCSdpSemantics`.
public enum RTCSdpSemantics: Int, Sendable { case planB, unifiedPlan }
/// RTCConfiguration.h: `RTCContinualGatheringPolicy`.
public enum RTCContinualGatheringPolicy: Int, Sendable { case gatherOnce, gatherContinually }

/// RTCConfiguration.h.
open class RTCConfiguration: NSObject {
    public var iceServers: [RTCIceServer] = []
    public var sdpSemantics: RTCSdpSemantics = .unifiedPlan
    public var continualGatheringPolicy: RTCContinualGatheringPolicy = .gatherOnce
    public override init() { stub() }
}

/// RTCMediaConstraints.h.
open class RTCMediaConstraints: NSObject {
    public init(mandatoryConstraints: [String: String]?, optionalConstraints: [String: String]?) { stub() }
}

/// RTCMediaStreamTrack.h.
open class RTCMediaStreamTrack: NSObject {
    public var kind: String { stub() }
    public var trackId: String { stub() }
    public var isEnabled: Bool {
        get { stub() }
        set { stub() }
    }
}

/// RTCAudioSource.h.
open class RTCAudioSource: NSObject {}
/// RTCAudioTrack.h.
open class RTCAudioTrack: RTCMediaStreamTrack {}
/// RTCMediaStream.h.
open class RTCMediaStream: NSObject {}

/// RTCRtpSender.h.
open class RTCRtpSender: NSObject {
    public var track: RTCMediaStreamTrack? { stub() }
}

/// RTCRtpReceiver.h.
open class RTCRtpReceiver: NSObject {
    public var track: RTCMediaStreamTrack? { stub() }
}

/// RTCRtpTransceiver.h: `RTCRtpTransceiverDirection`.
public enum RTCRtpTransceiverDirection: Int, Sendable { case sendRecv, sendOnly, recvOnly, inactive, stopped }
/// RTCRtpReceiver.h: `RTCRtpMediaType`.
public enum RTCRtpMediaType: Int, Sendable { case audio, video, data, unsupported }

/// RTCRtpTransceiver.h.
open class RTCRtpTransceiverInit: NSObject {
    public var direction: RTCRtpTransceiverDirection = .sendRecv
    public var streamIds: [String] = []
    public override init() { stub() }
}

/// RTCRtpTransceiver.h.
open class RTCRtpTransceiver: NSObject {}

/// RTCStatisticsReport.h.
open class RTCStatistics: NSObject {
    public var id: String { stub() }
    public var timestamp_us: CFTimeInterval { stub() }
    public var type: String { stub() }
    public var values: [String: NSObject] { stub() }
}

/// RTCStatisticsReport.h.
open class RTCStatisticsReport: NSObject {
    public var timestamp_us: CFTimeInterval { stub() }
    public var statistics: [String: RTCStatistics] { stub() }
}

/// RTCPeerConnection.h: `RTCSignalingState`.
public enum RTCSignalingState: Int, Sendable { case stable, haveLocalOffer, haveLocalPrAnswer, haveRemoteOffer, haveRemotePrAnswer, closed }
/// RTCPeerConnection.h: `RTCIceConnectionState`.
public enum RTCIceConnectionState: Int, Sendable { case new, checking, connected, completed, failed, disconnected, closed, count }
/// RTCPeerConnection.h: `RTCPeerConnectionState`.
public enum RTCPeerConnectionState: Int, Sendable { case new, connecting, connected, disconnected, failed, closed }
/// RTCPeerConnection.h: `RTCIceGatheringState`.
public enum RTCIceGatheringState: Int, Sendable { case new, gathering, complete }

/// RTCDataChannel.h.
open class RTCDataChannel: NSObject {}

/// RTCPeerConnection.h: `RTCPeerConnectionDelegate` (its `@optional` part declared as required).
public protocol RTCPeerConnectionDelegate: NSObjectProtocol {
    func peerConnection(_ peerConnection: RTCPeerConnection, didChange stateChanged: RTCSignalingState)
    func peerConnection(_ peerConnection: RTCPeerConnection, didAdd stream: RTCMediaStream)
    func peerConnection(_ peerConnection: RTCPeerConnection, didRemove stream: RTCMediaStream)
    func peerConnectionShouldNegotiate(_ peerConnection: RTCPeerConnection)
    func peerConnection(_ peerConnection: RTCPeerConnection, didChange newState: RTCIceConnectionState)
    func peerConnection(_ peerConnection: RTCPeerConnection, didChange newState: RTCIceGatheringState)
    func peerConnection(_ peerConnection: RTCPeerConnection, didGenerate candidate: RTCIceCandidate)
    func peerConnection(_ peerConnection: RTCPeerConnection, didRemove candidates: [RTCIceCandidate])
    func peerConnection(_ peerConnection: RTCPeerConnection, didOpen dataChannel: RTCDataChannel)
    // @optional in the header:
    func peerConnection(_ peerConnection: RTCPeerConnection, didChange newState: RTCPeerConnectionState)
    func peerConnection(_ peerConnection: RTCPeerConnection, didAdd rtpReceiver: RTCRtpReceiver, streams mediaStreams: [RTCMediaStream])
}

/// RTCPeerConnection.h.
open class RTCPeerConnection: NSObject {
    public weak var delegate: (any RTCPeerConnectionDelegate)?
    public var remoteDescription: RTCSessionDescription? { stub() }
    public var configuration: RTCConfiguration { stub() }
    public var senders: [RTCRtpSender] { stub() }
    public func setConfiguration(_ configuration: RTCConfiguration) -> Bool { stub() }
    public func close() { stub() }
    public func add(_ candidate: RTCIceCandidate, completionHandler: @escaping (Error?) -> Void) { stub() }
    public func add(_ track: RTCMediaStreamTrack, streamIds: [String]) -> RTCRtpSender? { stub() }
    public func addTransceiver(of mediaType: RTCRtpMediaType, init: RTCRtpTransceiverInit) -> RTCRtpTransceiver? { stub() }
    public func restartIce() { stub() }
    public func offer(for constraints: RTCMediaConstraints,
                      completionHandler: @escaping (RTCSessionDescription?, Error?) -> Void) { stub() }
    public func answer(for constraints: RTCMediaConstraints,
                       completionHandler: @escaping (RTCSessionDescription?, Error?) -> Void) { stub() }
    public func setLocalDescription(_ sdp: RTCSessionDescription, completionHandler: @escaping (Error?) -> Void) { stub() }
    public func setRemoteDescription(_ sdp: RTCSessionDescription, completionHandler: @escaping (Error?) -> Void) { stub() }
    public func statistics(completionHandler: @escaping (RTCStatisticsReport) -> Void) { stub() }
}

/// RTCPeerConnectionFactory.h.
open class RTCPeerConnectionFactory: NSObject {
    public override init() { stub() }
    public func audioSource(with constraints: RTCMediaConstraints?) -> RTCAudioSource { stub() }
    public func audioTrack(with source: RTCAudioSource, trackId: String) -> RTCAudioTrack { stub() }
    public func peerConnection(with configuration: RTCConfiguration, constraints: RTCMediaConstraints,
                               delegate: (any RTCPeerConnectionDelegate)?) -> RTCPeerConnection? { stub() }
}

/// RTCAudioSessionConfiguration.h.
open class RTCAudioSessionConfiguration: NSObject {
    public var category: String = ""
    public var mode: String = ""
    public class func webRTC() -> RTCAudioSessionConfiguration { stub() }
}

/// RTCAudioSession.h.
open class RTCAudioSession: NSObject {
    public class func sharedInstance() -> RTCAudioSession { stub() }
    public func lockForConfiguration() { stub() }
    public func unlockForConfiguration() { stub() }
    public func setConfiguration(_ configuration: RTCAudioSessionConfiguration, active: Bool) throws { stub() }
}
