// The Android library module as an app would build it. Never run here (no Gradle, Android SDK or
// Maven access); the sources are compiled and tested by `make test-android` with Debian's kotlinc
// 1.3 against OkHttp 3.13 (docs/android.md). For OkHttp 4.x, see OkHttpCompat.kt.
plugins {
    id("com.android.library")
    kotlin("android")
}

android {
    namespace = "com.callingserver.sdk"
    compileSdk = 34
    defaultConfig { minSdk = 24 }
    // src/webrtc: WebRtcMediaEngine over the real org.webrtc below (src/webrtcStub is only for
    // make test-android's compile check and is never part of this module).
    sourceSets["main"].java.srcDirs("src/main/kotlin", "src/webrtc/kotlin")
    sourceSets["test"].java.srcDirs("src/test/kotlin")
}

dependencies {
    implementation("com.squareup.okhttp3:okhttp:3.14.9")
    implementation("org.jetbrains.kotlinx:kotlinx-coroutines-android:1.7.3")
    implementation("io.getstream:stream-webrtc-android:1.3.9")
    // org.json is part of Android itself.
    testImplementation("junit:junit:4.13.2")
    testImplementation("org.json:json:20231013")
}
