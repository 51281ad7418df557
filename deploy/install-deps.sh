#!/usr/bin/env bash
# Installs what calling-server needs on Debian 12, and nothing when it is all present.
#   deploy/install-deps.sh          build + serve needs (C libraries, pkg-config)
#   deploy/install-deps.sh --test   also what the test suite needs (redis-server, coturn, iproute2, chromium, nodejs, nginx, valgrind,
#                                   kotlinc with the Java libraries of the Android SDK's tests)
#                                   and a Python virtual environment with the test tools (pytest,
#                                   websockets, pytest-timeout, aiortc, selenium) in $CALLING_VENV (default ./.venv)
# Idempotent and quiet when everything is present; must run as root when something is missing.
set -euo pipefail

want_test=0
[ "${1:-}" = "--test" ] && want_test=1

debs=(
  pkg-config
  libwebsockets-dev libwebsockets-evlib-ev libev4
  libjwt-dev
  libsqlite3-dev
  # CallingPostgres (database_url: chat history in PostgreSQL): libpq to build against and to run.
  libpq-dev libpq5
  libssl-dev
  # Cluster mode (cluster_redis_url): the hiredis C client, imported only by CallingRedis.
  libhiredis-dev
  # TLS clients (SDK, `calling-server peer`) verify against the system trust store.
  ca-certificates
  # Foundation's URLSession (FoundationNetworking) loads it: the webhook sender, the SDK's REST calls.
  libcurl4
  # CallingMedia (WebRTC media for Linux peers, `calling-server peer`): webrtcbin, libnice, Opus.
  libgstreamer1.0-dev libgstreamer-plugins-base1.0-dev libgstreamer-plugins-bad1.0-dev
  gstreamer1.0-plugins-base gstreamer1.0-plugins-good gstreamer1.0-plugins-bad gstreamer1.0-nice
  # calling-bench compiles its bare libwebsockets baseline (bench/lws-baseline.c) with gcc and
  # pins server and generator with taskset (util-linux).
  gcc util-linux
)
if [ "$want_test" = 1 ]; then
  # chromium: headless browser peer of tests/integration/media/test_media_chromium.py.
  # python3-venv: Debian's python3 refuses system-wide pip installs (PEP 668), so the Python
  # test tools live in a virtual environment, and Debian ships venv's pip bootstrap separately.
  # nodejs: the browser SDK's unit tests (Node's built-in runner, no npm packages); node-typescript:
  # tsc, which typechecks calling-client.d.ts against a usage file (tests/js/dts-typecheck.test.mjs);
  # chromium-driver: Selenium drives headless Chromium against the real server (tests/integration/browser).
  # openssl: the TLS tests make their CA and server certificates with the CLI.
  # nginx-light: deploy/nginx.conf run in front of the server (tests/integration/test_deploy_nginx.py).
  # postgresql-15: initdb/postgres for the tests' own throwaway servers (CallingTesting TestPostgres,
  # tests/integration/support.py PostgresServer); psql/createdb come with postgresql-client-15.
  # redis-server: tests/integration/test_cluster.py and CallingRedisTests start their own on a free port.
  # valgrind: `calling-bench relay --instructions true` counts each target's instructions under
  # callgrind (tests/integration/test_bench.py).
  # kotlin ... junit4: the Android SDK's JVM core (sdk/android, `make test-android`) compiled with
  # Debian's kotlinc against OkHttp, org.json and coroutines; atomicfu is listed because the
  # coroutines package needs it at run time without depending on it.
  debs+=(redis-server coturn iproute2 procps chromium chromium-driver nodejs node-typescript python3-venv openssl nginx-light
         postgresql-15 postgresql-client-15 valgrind
         kotlin libokhttp-java libokio-java libkotlinx-coroutines-java libkotlinx-atomicfu-java libandroid-json-java junit4)
fi

missing=()
for p in "${debs[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [ "$status" = "install ok installed" ] || missing+=("$p")
done

if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "install-deps: missing Debian packages: ${missing[*]} (run as root, or apt-get install them)" >&2
    exit 1
  fi
  echo "install-deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  # coturn's package enables a system service on install; tests start their own instance.
  if printf '%s\n' "${missing[@]}" | grep -qx coturn; then
    (systemctl disable --now coturn >/dev/null 2>&1 || service coturn stop >/dev/null 2>&1 || true)
  fi
  # Debian's postgresql-15 creates a default cluster (15/main, port 5432) and starts it. The tests
  # never use it (they initdb their own on free ports); stop it and keep it from starting at boot.
  if printf '%s\n' "${missing[@]}" | grep -qx postgresql-15; then
    (systemctl disable --now postgresql >/dev/null 2>&1 || true)
    (pg_ctlcluster 15 main stop >/dev/null 2>&1 || true)
    if [ -f /etc/postgresql/15/main/start.conf ]; then echo manual > /etc/postgresql/15/main/start.conf; fi
  fi
  # So does redis-server's; the tests start their own on free ports.
  if printf '%s\n' "${missing[@]}" | grep -qx redis-server; then
    (systemctl disable --now redis-server >/dev/null 2>&1 || service redis-server stop >/dev/null 2>&1 || true)
  fi
  # So does nginx (on port 80); the nginx test starts its own on loopback ports.
  if printf '%s\n' "${missing[@]}" | grep -qx nginx-light; then
    (systemctl disable --now nginx >/dev/null 2>&1 || service nginx stop >/dev/null 2>&1 || true)
  fi
fi

# SwiftPM refuses the `-pthread` that GStreamer's pkg-config files carry (a warning on every
# build), so CGStreamer reads this copy of their flags without it. Rewritten only when it differs.
pc_dir=/usr/local/lib/pkgconfig
pc_file=$pc_dir/calling-gstreamer.pc
gst_modules="gstreamer-webrtc-1.0 gstreamer-sdp-1.0 gstreamer-app-1.0"
pc_text="Name: calling-gstreamer
Description: GStreamer WebRTC, SDP and app flags for calling-server, without -pthread
Version: $(pkg-config --modversion gstreamer-webrtc-1.0)
Cflags: $(pkg-config --cflags $gst_modules | tr ' ' '\n' | grep -vx -- '-pthread' | grep . | sort -u | tr '\n' ' ')
Libs: $(pkg-config --libs $gst_modules | tr ' ' '\n' | grep -vx -- '-pthread' | grep . | tr '\n' ' ')"
if [ "$(cat "$pc_file" 2>/dev/null)" != "$pc_text" ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "install-deps: $pc_file must be written (run as root)" >&2
    exit 1
  fi
  mkdir -p "$pc_dir"
  printf '%s\n' "$pc_text" > "$pc_file"
fi

if [ "$want_test" = 1 ]; then
  # Independent test peers and the runner for tests/integration (PyPI, test tools only), in a
  # virtual environment: never a system-wide pip install (refused by Debian's python3, PEP 668).
  venv=${CALLING_VENV:-.venv}
  if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import sys' >/dev/null 2>&1; then
    echo "install-deps: creating the test virtual environment $venv"
    rm -rf "$venv"
    python3 -m venv "$venv"
  fi
  py="$venv/bin/python"
  pips=()
  # 15+: the tests connect with `proxy=None`, which older releases reject.
  "$py" -c 'import sys, websockets; sys.exit(int(websockets.__version__.split(".")[0]) < 15)' >/dev/null 2>&1 \
    || pips+=('websockets>=15,<16')
  "$py" -c 'import pytest' >/dev/null 2>&1 || pips+=('pytest>=7')
  # A hung test fails on its own instead of holding the whole run (make test-integration).
  "$py" -c 'import pytest_timeout' >/dev/null 2>&1 || pips+=('pytest-timeout>=2')
  # WebRTC peers for tests/integration/media (independent of the server's own media code).
  "$py" -c 'import aiortc' >/dev/null 2>&1 || pips+=('aiortc>=1.16,<2')
  # Drives Debian's chromium through chromium-driver in the browser tests.
  "$py" -c 'import selenium' >/dev/null 2>&1 || pips+=('selenium>=4.15,<5')
  if [ ${#pips[@]} -gt 0 ]; then
    echo "install-deps: installing Python ${pips[*]} into $venv"
    "$py" -m pip install -q --disable-pip-version-check "${pips[@]}"
  fi
fi
