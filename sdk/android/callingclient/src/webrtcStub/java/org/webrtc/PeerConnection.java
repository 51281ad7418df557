// STUB used only for the compile check of WebRtcMediaEngine in `make test-android`: the public
// signatures it uses, copied from org.webrtc as published in stream-webrtc-android 1.3.9
// (https://github.com/GetStream/webrtc-android, stream-webrtc-android/src/main/java/org/webrtc).
// No behaviour: never linked into anything that runs, never shipped (docs/android.md).
package org.webrtc;

import java.util.List;

public class PeerConnection {
  public enum IceGatheringState { NEW, GATHERING, COMPLETE }
  public enum IceConnectionState { NEW, CHECKING, CONNECTED, COMPLETED, FAILED, DISCONNECTED, CLOSED }
  public enum PeerConnectionState { NEW, CONNECTING, CONNECTED, DISCONNECTED, FAILED, CLOSED }
  public enum SignalingState { STABLE, HAVE_LOCAL_OFFER, HAVE_LOCAL_PRANSWER, HAVE_REMOTE_OFFER, HAVE_REMOTE_PRANSWER, CLOSED }
  public enum SdpSemantics { @Deprecated PLAN_B, UNIFIED_PLAN }

  public static interface Observer {
    void onSignalingChange(SignalingState newState);
    void onIceConnectionChange(IceConnectionState newState);
    default void onConnectionChange(PeerConnectionState newState) {}
    void onIceConnectionReceivingChange(boolean receiving);
    void onIceGatheringChange(IceGatheringState newState);
    void onIceCandidate(IceCandidate candidate);
    void onIceCandidatesRemoved(IceCandidate[] candidates);
    void onAddStream(MediaStream stream);
    void onRemoveStream(MediaStream stream);
    void onDataChannel(DataChannel dataChannel);
    void onRenegotiationNeeded();
    default void onAddTrack(RtpReceiver receiver, MediaStream[] mediaStreams) {}
    default void onTrack(RtpTransceiver transceiver) {}
  }

  public static class IceServer {
    public static Builder builder(String uri) { throw new UnsupportedOperationException("stub"); }
    public static Builder builder(List<String> urls) { throw new UnsupportedOperationException("stub"); }

    public static class Builder {
      public Builder setUsername(String username) { throw new UnsupportedOperationException("stub"); }
      public Builder setPassword(String password) { throw new UnsupportedOperationException("stub"); }
      public IceServer createIceServer() { throw new UnsupportedOperationException("stub"); }
    }
  }

  public static class RTCConfiguration {
    public List<IceServer> iceServers;
    public SdpSemantics sdpSemantics;
    public RTCConfiguration(List<IceServer> iceServers) { throw new UnsupportedOperationException("stub"); }
  }

  public void createOffer(SdpObserver observer, MediaConstraints constraints) { throw new UnsupportedOperationException("stub"); }
  public void createAnswer(SdpObserver observer, MediaConstraints constraints) { throw new UnsupportedOperationException("stub"); }
  public void setLocalDescription(SdpObserver observer, SessionDescription sdp) { throw new UnsupportedOperationException("stub"); }
  public void setRemoteDescription(SdpObserver observer, SessionDescription sdp) { throw new UnsupportedOperationException("stub"); }
  public void restartIce() { throw new UnsupportedOperationException("stub"); }
  public boolean setConfiguration(RTCConfiguration config) { throw new UnsupportedOperationException("stub"); }
  public boolean addIceCandidate(IceCandidate candidate) { throw new UnsupportedOperationException("stub"); }
  public RtpSender addTrack(MediaStreamTrack track, List<String> streamIds) { throw new UnsupportedOperationException("stub"); }
  public void getStats(RTCStatsCollectorCallback callback) { throw new UnsupportedOperationException("stub"); }
  public void close() { throw new UnsupportedOperationException("stub"); }
  public void dispose() { throw new UnsupportedOperationException("stub"); }
}
