#include "build_info.h"

// `make build` (and every Makefile target that builds) writes build_commit.h beside this file
// with `#define CALLING_BUILD_COMMIT "<commit>"`; it is not in git, so a plain `swift build` of a
// fresh clone has none and reports "unknown". C rather than Swift because only the preprocessor
// can ask at compile time whether a file exists (__has_include).
#if __has_include("build_commit.h")
#include "build_commit.h"
#endif
#ifndef CALLING_BUILD_COMMIT
#define CALLING_BUILD_COMMIT "unknown"
#endif

const char *calling_build_commit(void) { return CALLING_BUILD_COMMIT; }
