// STUB used only for the compile check of WebRtcMediaEngine in `make test-android`: the public
// signatures it uses, copied from org.webrtc as published in stream-webrtc-android 1.3.9
// (https://github.com/GetStream/webrtc-android, stream-webrtc-android/src/main/java/org/webrtc).
// No behaviour: never linked into anything that runs, never shipped (docs/android.md).
package org.webrtc;

import java.util.Map;

public class RTCStatsReport {
  public double getTimestampUs() { throw new UnsupportedOperationException("stub"); }
  public Map<String, RTCStats> getStatsMap() { throw new UnsupportedOperationException("stub"); }
}
