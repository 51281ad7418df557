"""Damaged and failing storage (issue 37, "A damaged database starts healthy" and "Silent
refusals"), against the real server and real SQLite files: a file damaged past its header is
refused at start with exit 65 and a log line that says what to do; a read-only data dir names the
file and the cause; on a full disk (a small tmpfs) refused chats are logged, rate-limited, and
/healthz says degraded until a write succeeds again."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

import support
from support import Peer, Server, run


def stop(server: Server) -> None:
    """SIGTERM and wait: the last connection's close checkpoints and removes the WAL."""
    server.signal(signal.SIGTERM)
    assert server.wait(20) == 0, server.stderr_text()


def start_refused(data_dir: Path, **flags) -> tuple[int, str]:
    """Starts a server that must exit before listening; returns its exit code and stderr."""
    server = Server(data_dir, flags=flags)
    with pytest.raises(RuntimeError):
        server.start(timeout=60)
    return server.proc.returncode, server.stderr_path.read_text(errors="replace")


def log_lines(text: str, message: str) -> list[str]:
    return [line for line in text.splitlines() if f'msg="{message}"' in line]


@pytest.fixture
def tmpfs(tmp_path):
    """A tmpfs mounted at a fresh directory (root only), unmounted at the end. The server's data
    dir is the mount itself, so its stdout/stderr files (kept beside the data dir) stay off it."""
    mounts: list[Path] = []

    def mount(size: str) -> Path:
        point = tmp_path / f"tmpfs{len(mounts)}"
        point.mkdir()
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(point)],
                              capture_output=True, text=True)
        if done.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
        mounts.append(point)
        return point

    yield mount
    for point in mounts:
        subprocess.run(["umount", "-l", str(point)], capture_output=True)


def test_damaged_database_refuses_to_start_with_exit_65_and_says_what_to_do(start_server):
    server = start_server()
    run(send_chats(server, 20))
    stop(server)
    path = server.data_dir / "calling.sqlite"
    assert not (server.data_dir / "calling.sqlite-wal").exists()
    size = path.stat().st_size
    assert size > 4096 * 4, size
    # Past the header page: SQLite opens the file and reads its schema without complaint.
    with open(path, "r+b") as f:
        f.seek(4096)
        f.write(os.urandom(size - 4096))
    code, stderr = start_refused(server.data_dir)
    assert code == 65, stderr
    [line] = log_lines(stderr, "store damaged; refusing to start")
    assert "level=critical" in line, line
    assert f"path={path}" in line, line
    assert re.search(r'found="[^"]+', line), line
    assert "calling-server backup" in line and "docs/operations.md" in line, line


def test_damaged_database_check_can_be_turned_off(start_server):
    """Damage in a chat page that start-up never reads: quick_check finds it (65), and with
    sqlite_quick_check_at_start=false (for files too large to read at every start) the server starts."""
    server = start_server(chat_max_text_bytes=16384)
    run(send_chats(server, 60, text_bytes=16000), timeout=60)
    stop(server)
    path = server.data_dir / "calling.sqlite"
    size = path.stat().st_size
    assert size > 4096 * 50, size
    with open(path, "r+b") as f:
        f.seek(size - 4096)
        f.write(os.urandom(4096))
    code, stderr = start_refused(server.data_dir)
    assert code == 65, stderr
    # quick_check's findings, on the one line.
    [line] = log_lines(stderr, "store damaged; refusing to start")
    assert re.search(r'found="On tree page \d+', line), stderr
    again = Server(server.data_dir, flags={"sqlite_quick_check_at_start": "false"})
    try:
        again.start(timeout=30)
    finally:
        again.kill()


def test_read_only_data_dir_names_the_file_and_the_cause(tmpfs):
    data = tmpfs("16m")
    server = Server(data).start(timeout=30)
    stop(server)
    remount = subprocess.run(["mount", "-o", "remount,ro", str(data)], capture_output=True, text=True)
    assert remount.returncode == 0, remount.stderr
    code, stderr = start_refused(data)
    assert code != 0
    assert str(data / "calling.sqlite") in stderr, stderr
    assert "EROFS" in stderr, stderr


async def send_chats(server: Server, count: int, text_bytes: int = 100, prefix: str = "c") -> tuple[int, int]:
    """Sends `count` chats as alice and reads their acks; returns (acked, refused)."""
    alice = await Peer.connect(server, server.token("r1", "alice"), "alice")
    acked = refused = 0
    for i in range(count):
        await alice.send({"type": "chat", "payload": {"client_id": f"{prefix}-{i}", "text": "x" * text_bytes}})
    while acked + refused < count:
        frame = await alice.recv(timeout=20)
        if frame["type"] != "chat-ack":
            continue
        if "error" in frame:
            refused += 1
        else:
            acked += 1
    await alice.ws.close()
    return acked, refused


def fill(directory: Path) -> Path:
    """Writes a file until the file system is full, to the last byte."""
    filler = directory / "filler"
    with open(filler, "wb", buffering=0) as f:
        for chunk in (65536, 4096, 1):
            try:
                while True:
                    f.write(b"\0" * chunk)
            except OSError:
                pass
    return filler


def test_full_disk_refusals_are_logged_rate_limited_and_healthz_degraded(tmpfs):
    data = tmpfs("8m")
    server = Server(data, flags={"store_failure_log_seconds": "2", "chat_max_text_bytes": "16384"}).start(timeout=30)
    try:
        assert server.get_json("/healthz")[2] == {"status": "ok"}
        fill(data)
        acked, refused = run(send_chats(server, 60, text_bytes=16000, prefix="full"), timeout=60)
        assert refused >= 2, (acked, refused)
        status, _, body = server.get_json("/healthz")
        assert (status, body) == (200, {"status": "degraded"}), body
        failures = server.metrics().get("calling_store_failures_total", 0)
        assert failures >= refused
        lines = log_lines(server.stderr_path.read_text(errors="replace"), "store operation failed")
        assert 1 <= len(lines) <= 2, lines  # one per 2 s, not one per refused chat
        assert "kind=disk_full" in lines[0] and "level=error" in lines[0], lines[0]
        assert f"path={data / 'calling.sqlite'}" in lines[0], lines[0]
        assert "ENOSPC" in lines[0], lines[0]
        # After the interval, the next failure's line carries the count of those held back.
        time.sleep(2.2)
        run(send_chats(server, 3, text_bytes=16000, prefix="later"), timeout=60)
        lines = log_lines(server.stderr_path.read_text(errors="replace"), "store operation failed")
        suppressed = sum(int(m) for line in lines for m in re.findall(r"\bsuppressed=(\d+)", line))
        assert suppressed >= 1, lines
        assert len(lines) <= 3, lines
        # Space again: the next chat is stored and /healthz is ok again.
        (data / "filler").unlink()
        acked, refused = run(send_chats(server, 1, prefix="after"), timeout=30)
        assert (acked, refused) == (1, 0)
        assert server.get_json("/healthz")[2] == {"status": "ok"}
    finally:
        server.kill()
