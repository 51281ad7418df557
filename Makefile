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

.PHONY: deps test-deps build release serve install test test-swift test-js test-integration test-tsan bench bench-quick bench-chat bench-media clean

deps:
	@bash deploy/install-deps.sh

test-deps:
	@CALLING_VENV=$(VENV) bash deploy/install-deps.sh --test

build: deps
	$(SWIFT) build

release: deps
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

test: test-deps
	$(SWIFT) build --build-tests
	$(MAKE) --no-print-directory test-swift test-js test-integration

test-swift:
	$(SWIFT) test --skip-build

# The browser SDK's pure logic under Node's built-in test runner (no npm packages).
test-js:
	node --test tests/js/

test-integration:
	$(PYTHON) -m pytest -q -p no:cacheprovider tests/integration

# The Swift suite under ThreadSanitizer, in its own build folder (slower; not part of `make test`).
test-tsan: test-deps
	$(SWIFT) build --build-tests --scratch-path .build-tsan -Xswiftc -sanitize=thread
	$(SWIFT) test --skip-build --scratch-path .build-tsan

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
	rm -rf .build
