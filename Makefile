# Two entry points for a fresh Debian 12 machine (see README.md):
#   make serve   install what is missing, build, run the server on embedded SQLite
#   make test    install what is missing, build, run every test
SWIFT ?= swift
HOST ?= 127.0.0.1
PORT ?= 8080
DATA_DIR ?= ./data
BIN := .build/debug/calling-server
# Python test tools live here (deploy/install-deps.sh --test creates it; PEP 668 forbids system pip).
VENV ?= .venv
PYTHON := $(VENV)/bin/python

.PHONY: deps test-deps build-info build release serve install test test-swift test-js test-android test-integration test-corpus test-fuzz fuzz fuzz-build test-asan test-tsan soak bench bench-quick bench-chat bench-media clean

deps:
	@bash deploy/install-deps.sh

test-deps:
	@CALLING_VENV=$(VENV) bash deploy/install-deps.sh --test

# Records the git commit for `calling-server --version` in Sources/CBuildInfo/build_commit.h (not
# in git; a plain `swift build` reports "unknown"). Rewritten only when the commit changes, and
# build_info.c touched then, because a header that did not exist at the last build is not yet in
# the compiler's dependency list.
BUILD_COMMIT_HEADER := Sources/CBuildInfo/build_commit.h
build-info:
	@commit=$$(git rev-parse --short=12 HEAD 2>/dev/null) || commit=unknown; \
	if [ "$$commit" != unknown ] && ! git diff --quiet HEAD -- 2>/dev/null; then commit="$$commit-dirty"; fi; \
	line="#define CALLING_BUILD_COMMIT \"$$commit\""; \
	if [ "$$(cat $(BUILD_COMMIT_HEADER) 2>/dev/null)" != "$$line" ]; then \
		echo "$$line" > $(BUILD_COMMIT_HEADER); touch Sources/CBuildInfo/build_info.c; fi

build: deps build-info
	$(SWIFT) build

release: deps build-info
	$(SWIFT) build -c release

# Prints links to the demo page and the dashboard with fresh development tokens.
serve: build
	$(BIN) serve --host $(HOST) --port $(PORT) --data-dir $(DATA_DIR) --print-demo-links true

# The release binary and the browser SDK and pages it serves (found beside it as
# $(PREFIX)/share/calling-server/sdk).
PREFIX ?= /usr/local
install: release
	install -D -m 0755 .build/release/calling-server $(DESTDIR)$(PREFIX)/bin/calling-server
	cp -R .build/release/*.resources $(DESTDIR)$(PREFIX)/bin/
	rm -rf $(DESTDIR)$(PREFIX)/share/calling-server/sdk
	mkdir -p $(DESTDIR)$(PREFIX)/share/calling-server
	cp -R sdk/js $(DESTDIR)$(PREFIX)/share/calling-server/sdk

test: test-deps build-info
	$(SWIFT) build --build-tests
	$(MAKE) --no-print-directory test-swift test-js test-android test-integration test-fuzz

test-swift:
	$(SWIFT) test --skip-build

# The browser SDK's pure logic under Node's built-in test runner (no npm packages).
test-js:
	node --test tests/js/

# The Android SDK's Kotlin core (sdk/android, docs/android.md) on the JVM: Debian's kotlinc 1.3
# against OkHttp 3.13, okio, org.json and kotlinx-coroutines (deploy/install-deps.sh --test), main
# and test sources in one kotlinc run (kotlinc is slow; it reruns only when a .kt file changed),
# then JUnit 4. The live tests start $(BIN) themselves. atomicfu is needed only at run time.
JAVA_SHARE := /usr/share/java
ANDROID_DIR := sdk/android/callingclient/src
ANDROID_OUT := .build-android
ANDROID_LIBS := $(JAVA_SHARE)/okhttp.jar:$(JAVA_SHARE)/okio.jar:$(JAVA_SHARE)/kotlinx-coroutines-core.jar:$(JAVA_SHARE)/com.android.json.jar:$(JAVA_SHARE)/junit4.jar
ANDROID_RUN_CP := $(ANDROID_OUT)/classes:$(ANDROID_LIBS):$(JAVA_SHARE)/kotlin-stdlib.jar:$(JAVA_SHARE)/atomicfu.jar:$(JAVA_SHARE)/hamcrest-core.jar
ANDROID_TESTS := com.callingserver.sdk.ConnectionLifecycleTest com.callingserver.sdk.SignalingSessionTest com.callingserver.sdk.ChatOperationsTest com.callingserver.sdk.PresenceSessionTest com.callingserver.sdk.FeatureTableTest com.callingserver.sdk.LiveServerTest com.callingserver.sdk.LiveChatOperationsTest com.callingserver.sdk.LiveRestPresenceTest com.callingserver.sdk.WireVectorsTest com.callingserver.sdk.LivePushTest com.callingserver.sdk.LiveBrowserPeerTest com.callingserver.sdk.CallMachineTest com.callingserver.sdk.LiveCallTest com.callingserver.sdk.StatsReadingTest com.callingserver.sdk.RpcSessionTest

$(ANDROID_OUT)/classes.stamp: $(shell find $(ANDROID_DIR) -name '*.kt' 2>/dev/null)
	@rm -rf $(ANDROID_OUT)/classes && mkdir -p $(ANDROID_OUT)/classes
	@echo "kotlinc: sdk/android (main + test)"
	@kotlinc -jvm-target 1.8 -nowarn -cp $(ANDROID_LIBS) -d $(ANDROID_OUT)/classes $(ANDROID_DIR)/main/kotlin $(ANDROID_DIR)/test/kotlin \
		> $(ANDROID_OUT)/kotlinc.log 2>&1 || { grep -v -e 'Xverify:none' $(ANDROID_OUT)/kotlinc.log; exit 1; }
	@touch $@

# The org.webrtc media engine (sdk/android/.../src/webrtc) is only compiled: against the SDK's
# classes and a stub of the org.webrtc signatures it uses (src/webrtcStub, copied from
# stream-webrtc-android 1.3.x), into a directory nothing runs from. Fails when the engine does not
# compile against those signatures.
ANDROID_WEBRTC_STUB := $(ANDROID_OUT)/webrtc-stub
$(ANDROID_OUT)/webrtc.stamp: $(ANDROID_OUT)/classes.stamp $(shell find $(ANDROID_DIR)/webrtc $(ANDROID_DIR)/webrtcStub -name '*.kt' -o -name '*.java' 2>/dev/null)
	@rm -rf $(ANDROID_WEBRTC_STUB) $(ANDROID_OUT)/webrtc-check && mkdir -p $(ANDROID_WEBRTC_STUB) $(ANDROID_OUT)/webrtc-check
	@echo "kotlinc: sdk/android WebRtcMediaEngine against the org.webrtc stub (compile check only)"
	@javac -nowarn -d $(ANDROID_WEBRTC_STUB) $(ANDROID_DIR)/webrtcStub/java/org/webrtc/*.java
	@kotlinc -jvm-target 1.8 -nowarn -cp $(ANDROID_LIBS):$(ANDROID_OUT)/classes:$(ANDROID_WEBRTC_STUB) -d $(ANDROID_OUT)/webrtc-check $(ANDROID_DIR)/webrtc/kotlin \
		> $(ANDROID_OUT)/kotlinc-webrtc.log 2>&1 || { grep -v -e 'Xverify:none' $(ANDROID_OUT)/kotlinc-webrtc.log; exit 1; }
	@touch $@

test-android: $(ANDROID_OUT)/classes.stamp $(ANDROID_OUT)/webrtc.stamp
	@test -x $(BIN) || { echo "test-android: $(BIN) is missing (swift build)"; exit 1; }
	@java -cp $(ANDROID_RUN_CP) org.junit.runner.JUnitCore $(ANDROID_TESTS) > $(ANDROID_OUT)/junit.log 2>&1; status=$$?; \
	if [ $$status -eq 0 ]; then grep -E '^OK \(' $(ANDROID_OUT)/junit.log; \
	else grep -v -e '^\s*at org\.junit' -e '^\s*at java\.' -e '^\s*at jdk\.' $(ANDROID_OUT)/junit.log | tail -n 80; \
	echo "test-android failed (full log: $(ANDROID_OUT)/junit.log)"; exit 1; fi

# No single integration test runs for minutes; one that does is hung and fails with a stack dump.
PYTEST_TIMEOUT ?= 300
test-integration:
	$(PYTHON) -m pytest -q -p no:cacheprovider --timeout=$(PYTEST_TIMEOUT) tests/integration

# The hostile-request corpus (tests/integration/corpus) against the real server.
test-corpus:
	$(PYTHON) -m pytest -q -p no:cacheprovider tests/integration/test_corpus.py

# Fuzz targets (Sources/calling-fuzz; docs/operations.md "Fuzzing"). `make fuzz` builds them with
# ASan, coverage and clang's libFuzzer (the toolchain's fuzzer_no_main runtime) and runs each for
# FUZZ_SECONDS; new inputs go to .fuzz-work/<target>, crashes to fuzz/crashes/. `make test-fuzz`
# is the short run for `make test`: every seed and past crash replayed through the normal build,
# then FUZZ_TEST_SECONDS of fuzzing per target when libFuzzer is available.
FUZZ_TARGETS ?= frame json sdp jwt http
FUZZ_SECONDS ?= 60
FUZZ_TEST_SECONDS ?= 5
# A fixed seed, so the short run inside `make test` explores the same inputs each time.
FUZZ_SEED ?= 1
FUZZER_NO_MAIN := $(shell d=$$(dirname $$(dirname $$(readlink -f $$(command -v swiftc)))); ls $$d/lib/clang/*/lib/linux/libclang_rt.fuzzer_no_main-x86_64.a 2>/dev/null | head -1)
FUZZ_BIN := .build-fuzz/debug/calling-fuzz

fuzz-build:
	@test -n "$(FUZZER_NO_MAIN)" || { echo "this Swift toolchain has no libclang_rt.fuzzer_no_main"; exit 1; }
	$(SWIFT) build --scratch-path .build-fuzz --product calling-fuzz -Xswiftc -sanitize=address \
		-Xswiftc -sanitize-coverage=edge,inline-8bit-counters,pc-table,trace-cmp \
		-Xlinker --undefined=LLVMFuzzerRunDriver -Xlinker $(FUZZER_NO_MAIN) -Xlinker -E -Xlinker -lstdc++

define run-fuzzer
	mkdir -p .fuzz-work/$(1) fuzz/crashes
	SWIFT_BACKTRACE=enable=no ASAN_OPTIONS=detect_leaks=0 timeout -k 10 $$(( $(2) + 120 )) \
		$(FUZZ_BIN) $(1) .fuzz-work/$(1) fuzz/corpus/$(1) -seed=$(FUZZ_SEED) -max_total_time=$(2) -max_len=8192 \
		-timeout=10 -artifact_prefix=fuzz/crashes/$(1)- > .fuzz-work/$(1).log 2>&1; status=$$?; \
	grep -v -e "header data space" -e "exceeds limit" .fuzz-work/$(1).log | tail -n $$([ $$status -eq 0 ] && echo 3 || echo 40); \
	[ $$status -eq 0 ] || { echo "calling-fuzz $(1) exited with status $$status (124: killed after $$(( $(2) + 120 )) s); log in .fuzz-work/$(1).log, input in fuzz/crashes/"; exit 1; }
	@! ls fuzz/crashes/$(1)-crash-* fuzz/crashes/$(1)-leak-* fuzz/crashes/$(1)-timeout-* 2>/dev/null | grep -q . || { echo "calling-fuzz $(1) found a crash: fuzz/crashes/"; exit 1; }

endef

fuzz: fuzz-build
	$(foreach target,$(FUZZ_TARGETS),$(call run-fuzzer,$(target),$(FUZZ_SECONDS)))

test-fuzz:
	$(SWIFT) build --product calling-fuzz
	for target in $(FUZZ_TARGETS); do .build/debug/calling-fuzz $$target --replay fuzz/corpus/$$target fuzz/regressions/$$target || exit 1; done
	@if [ -n "$(FUZZER_NO_MAIN)" ]; then $(MAKE) --no-print-directory fuzz FUZZ_SECONDS=$(FUZZ_TEST_SECONDS); \
	else echo "no libFuzzer runtime in this toolchain: seeds replayed only"; fi

# The integration tests against an AddressSanitizer / ThreadSanitizer build of the server, each in
# its own build folder (slower; not part of `make test`). LeakSanitizer is off: Foundation and
# libcurl keep process-lifetime allocations it would report at exit. test_memory.py is left out:
# the sanitizers' own shadow memory and quarantine dwarf the RSS it measures. The bench's
# instruction count runs the server under valgrind, which cannot run a sanitizer's build.
# SERVER_BIN_UNDER_TEST, not a CALLING_* name: the server reads every CALLING_* variable as its
# configuration and refuses unknown keys, which failed every test that starts it from the CLI.
UNDER_VALGRIND := tests/integration/test_bench.py::test_instructions_count_each_targets_relayed_frames_under_callgrind

test-asan: test-deps
	$(SWIFT) build --scratch-path .build-asan --product calling-server -Xswiftc -sanitize=address
	ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 SERVER_BIN_UNDER_TEST=$(CURDIR)/.build-asan/debug/calling-server \
		$(PYTHON) -m pytest -q -p no:cacheprovider tests/integration --ignore=tests/integration/media \
		--ignore=tests/integration/test_memory.py --deselect $(UNDER_VALGRIND)

# The Swift suite and the integration tests under ThreadSanitizer.
test-tsan: test-deps
	$(SWIFT) build --build-tests --scratch-path .build-tsan -Xswiftc -sanitize=thread
	$(SWIFT) test --skip-build --scratch-path .build-tsan
	TSAN_OPTIONS=halt_on_error=1 SERVER_BIN_UNDER_TEST=$(CURDIR)/.build-tsan/debug/calling-server \
		$(PYTHON) -m pytest -q -p no:cacheprovider tests/integration --ignore=tests/integration/media \
		--ignore=tests/integration/test_memory.py --deselect $(UNDER_VALGRIND)

# Soak run (bench/soak.py; not part of `make test`): SOAK_PEERS peers for SOAK_MINUTES, chat and
# relay traffic, leaving and rejoining; fails on RSS growth, an unbounded WAL, a logged error or a
# lost acked chat. Results in docs/benchmarks.md.
SOAK_PEERS ?= 2000
SOAK_MINUTES ?= 10
soak: release test-deps
	$(PYTHON) bench/soak.py --peers $(SOAK_PEERS) --minutes $(SOAK_MINUTES) --binary .build/release/calling-server

# Every scenario of the suite against the server and the bare lws baseline (bench/README.md);
# each scenario is bounded in count and time. Results: .build/bench/results-*.{json,md}.
bench: release
	.build/release/calling-bench suite

# The same scenarios at small N and ~1 s phases: a smoke run of the instrument, not a measurement.
bench-quick: release
	.build/release/calling-bench suite --quick

# The in-process chat benchmark of docs/benchmarks.md's older tables.
bench-chat: release
	.build/release/calling-bench chat

# Offer-to-connected time and CPU per audio peer (root: it makes a network namespace).
bench-media: release test-deps
	$(PYTHON) bench/media.py --binary .build/release/calling-server

clean:
	rm -rf .build .build-fuzz .build-asan .build-tsan .fuzz-work
