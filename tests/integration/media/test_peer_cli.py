"""`calling-server peer` refuses bad input with a clear message and a distinct exit status, before
it touches the network: 2 for bad options (with the usage), 1 for inputs it cannot use. No
namespace needed; the only address used is a closed loopback port."""

from __future__ import annotations

import subprocess

import pytest

import support
from peers import linux_peer_missing

CLOSED_PORT_URL = "ws://127.0.0.1:1/v1/ws"


@pytest.fixture(autouse=True)
def linux_peer_cli():
    reason = linux_peer_missing()
    if reason:
        pytest.skip(reason)


def peer(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(support.BINARY), "peer", *args], capture_output=True, text=True, timeout=30,
                          stdin=subprocess.DEVNULL)


@pytest.mark.parametrize("args, problem", [
    ([], "--url is required"),
    (["--url", CLOSED_PORT_URL], "--token is required"),
    (["--url", "http://127.0.0.1:1/v1/ws", "--token", "t"], "--url needs a ws:// or wss:// URL"),
    (["--url", CLOSED_PORT_URL, "--token", "t", "--seconds", "0"], "--seconds needs a positive number"),
    (["--url", CLOSED_PORT_URL, "--token", "t", "--tone", "30000"], "--tone needs a frequency"),
    (["--url", CLOSED_PORT_URL, "--token", "t", "--ice-restart-window", "0"], "--ice-restart-window needs a positive"),
    (["--url", CLOSED_PORT_URL, "--token", "t", "--bogus"], "unknown option --bogus"),
])
def test_bad_options_exit_2_with_the_problem_and_the_usage(args, problem):
    result = peer(*args)
    assert result.returncode == 2, result
    assert problem in result.stderr, result.stderr
    assert "usage: calling-server peer" in result.stderr, result.stderr


def test_help_exits_0_with_the_usage():
    result = peer("--help")
    assert result.returncode == 0 and "usage: calling-server peer" in result.stdout, result


def test_a_file_that_is_not_a_pcm_wav_exits_1_naming_the_problem(tmp_path):
    not_wav = tmp_path / "song.mp3"
    not_wav.write_bytes(b"ID3\x04\x00" + bytes(200))
    result = peer("--url", CLOSED_PORT_URL, "--token", "t", "--play", str(not_wav))
    assert result.returncode == 1, result
    assert "not a 16-bit PCM WAV file" in result.stderr, result.stderr


def test_relay_only_without_reachable_ice_servers_exits_1():
    result = peer("--url", CLOSED_PORT_URL, "--token", "t", "--relay-only")
    assert result.returncode == 1, result
    assert "--relay-only needs TURN servers" in result.stderr, result.stderr


def test_sigterm_ends_the_peer_with_its_summary(start_server):
    """A supervisor stops an agent with SIGTERM: it must end cleanly and report, not abort (the
    signal handler once ran with the peer actor's isolation on a Dispatch queue and trapped)."""
    import signal
    import time

    server = start_server()
    token = server.token("demo", "bob")
    proc = subprocess.Popen([str(support.BINARY), "peer", "--url", server.ws_url(None), "--token", token],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 15
        seen = ""
        while "state connected" not in seen and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            seen += line
        assert "state connected" in seen, seen + proc.stderr.read()
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=15)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err[-2000:]
    assert "ending reason=signal" in out
    summary = [line for line in out.splitlines() if line.startswith("summary ")]
    assert summary and '"hangup_reason":"signal"' in summary[-1], out


def test_the_summary_names_the_sdks_hangup_reason_not_always_remote(start_server):
    """The peer calls alice, who leaves the room instead of answering: the SDK ends the call with
    `hangup(reason: .peerLeft)`, and the peer's log and summary say `peer_left` (they once said
    `remote` for every hangup, whoever ended the call and how)."""
    import time

    server = start_server()
    proc = subprocess.Popen([str(support.BINARY), "peer", "--url", server.ws_url(None),
                             "--token", server.token("demo", "bob"), "--call", "alice", "--seconds", "30"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 15
        seen = ""
        while "state connected" not in seen and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            seen += line
        assert "state connected" in seen, seen + proc.stderr.read()

        async def ring_and_leave():
            alice = await support.Peer.connect(server, server.token("demo", "alice"), "alice")
            offer = await alice.recv_type("offer", timeout=10, skip=("candidate", "peer-joined"))
            assert offer["from"] == "bob", offer
            await alice.send({"type": "leave"})
            await alice.close()

        support.run(ring_and_leave(), timeout=20)
        out, err = proc.communicate(timeout=15)
    finally:
        support.kill_and_reap(proc)
    out = seen + out
    assert "hangup alice reason=peer_left" in out, out + err[-2000:]
    summary = [line for line in out.splitlines() if line.startswith("summary ")]
    assert summary and '"hangup_reason":"peer_left"' in summary[-1], out
