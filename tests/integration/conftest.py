"""Fixtures: a real calling-server process per test, on port 0, in a fresh data dir.

`start_server(**flags)` starts one (flags are `calling-server serve` flags, e.g.
`max_frame_bytes=2048`); `server` is one with default settings. Every process a test starts is
SIGKILLed and reaped at teardown, whatever the test did.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import support  # noqa: E402
from support import Server  # noqa: E402

# Hard per-test bound on top of the asyncio.wait_for bounds inside the tests.
TEST_TIME_LIMIT_S = 30


_snapshot_dir: Path | None = None


def pytest_sessionstart(session):
    """Runs the whole session against a private copy of the binary (and its SwiftPM resource
    bundles): other people rebuild .build/debug while the suite runs, and a binary replaced
    mid-session ("Text file busy", or a different server from one test to the next) would make
    results depend on timing. SERVER_BIN_UNDER_TEST, when set, is used as is."""
    global _snapshot_dir
    source = support.BINARY
    if not source.exists():
        raise pytest.UsageError(f"{source} is missing: run `swift build` in the repository first")
    if os.environ.get("SERVER_BIN_UNDER_TEST"):
        return
    _snapshot_dir = Path(tempfile.mkdtemp(prefix="calling-server-bin-"))
    copy = _snapshot_dir / source.name
    problem = ""
    for _ in range(30):
        try:
            shutil.copy2(source, copy)
            for bundle in source.parent.glob("*.resources"):
                shutil.copytree(bundle, _snapshot_dir / bundle.name, dirs_exist_ok=True)
            # `migrate` needs both the executable and the schema bundle: proves the copy is whole.
            with tempfile.TemporaryDirectory() as data_dir:
                result = subprocess.run([str(copy), "migrate", "--data-dir", data_dir], capture_output=True,
                                        text=True, timeout=20)
            if result.returncode == 0:
                support.BINARY = copy
                return
            problem = result.stderr
        except (OSError, subprocess.SubprocessError) as error:  # mid-rebuild: try again
            problem = repr(error)
        time.sleep(1)
    raise pytest.UsageError(f"cannot take a usable copy of {source}: {problem}")


def pytest_sessionfinish(session):
    if _snapshot_dir is not None:
        shutil.rmtree(_snapshot_dir, ignore_errors=True)


class TestTimeout(Exception):
    pass


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    def expired(signum, frame):
        raise TestTimeout(f"{item.nodeid} ran longer than {TEST_TIME_LIMIT_S}s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(TEST_TIME_LIMIT_S)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"report_{report.when}", report)


@pytest.fixture
def start_server(tmp_path, request):
    servers: list[Server] = []
    counter = iter(range(1000))

    def start(data_dir: Path | None = None, env: dict | None = None, ssl_context=None, **flags) -> Server:
        if data_dir is None:
            data_dir = tmp_path / f"data{next(counter)}"
            data_dir.mkdir()
        server = Server(data_dir, flags=flags, env=env)
        # A TLS server (tls_cert_file in flags) is probed and spoken to through this context.
        if ssl_context is not None:
            server.ssl_context = ssl_context
        servers.append(server)
        return server.start()

    yield start
    for server in servers:
        server.kill()
    report = getattr(request.node, "report_call", None)
    if report is not None and report.failed:
        for server in servers:
            print(f"--- server stderr (port {server.port}, exit {server.proc.returncode if server.proc else None}) ---")
            print(server.stderr_text())


@pytest.fixture
def server(start_server) -> Server:
    return start_server()


@pytest.fixture(scope="session")
def postgres():
    """One PostgreSQL server for the session (support.PostgresServer), stopped at its end. Tests
    take a fresh database each with `postgres.create_database()`."""
    pg = support.PostgresServer().start()
    try:
        yield pg
    finally:
        pg.stop()


@pytest.fixture(scope="session")
def package() -> dict:
    """`swift package describe --type json` of this repository (the targets, their dependencies
    and sources), for the tests that hold docs and layering against the manifest."""
    import json
    swift = shutil.which("swift")
    if swift is None:
        pytest.skip("no swift toolchain")
    out = subprocess.run([swift, "package", "describe", "--type", "json"], cwd=Path(__file__).resolve().parents[2],
                         check=True, capture_output=True, text=True, timeout=120).stdout
    return json.loads(out[out.index("{"):])
