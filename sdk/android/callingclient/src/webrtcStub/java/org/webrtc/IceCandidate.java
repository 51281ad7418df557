// STUB used only for the compile check of WebRtcMediaEngine in `make test-android`: the public
// signatures it uses, copied from org.webrtc as published in stream-webrtc-android 1.3.9
// (https://github.com/GetStream/webrtc-android, stream-webrtc-android/src/main/java/org/webrtc).
// No behaviour: never linked into anything that runs, never shipped (docs/android.md).
package org.webrtc;

public class IceCandidate {
  public final String sdpMid;
  public final int sdpMLineIndex;
  public final String sdp;
  public IceCandidate(String sdpMid, int sdpMLineIndex, String sdp) { throw new UnsupportedOperationException("stub"); }
}
