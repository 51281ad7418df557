// Not built on this project's CI: no Gradle, Android SDK or Maven repository is available there.
// `make test-android` compiles the same sources with Debian's kotlinc instead (docs/android.md).
rootProject.name = "calling-android"
include(":callingclient")
