// STUB used only for the compile check of WebRtcMediaEngine in `make test-android`: the public
// signatures it uses, copied from org.webrtc as published in stream-webrtc-android 1.3.9
// (https://github.com/GetStream/webrtc-android, stream-webrtc-android/src/main/java/org/webrtc).
// No behaviour: never linked into anything that runs, never shipped (docs/android.md).
package org.webrtc;

import java.util.List;

public class MediaConstraints {
  public static class KeyValuePair {
    public KeyValuePair(String key, String value) { throw new UnsupportedOperationException("stub"); }
  }
  public final List<KeyValuePair> mandatory;
  public final List<KeyValuePair> optional;
  public MediaConstraints() { throw new UnsupportedOperationException("stub"); }
}
