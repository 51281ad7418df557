"""The benchmark suite cannot rot: every scenario of `calling-bench suite --smoke` runs at tiny N
against the real server and the bare lws baseline, and reports the counts it verified.

A smoke run, not a measurement (bench/README.md): it checks that each scenario completes, counts
what it claims to count (every welcome, pong, relayed frame, delivery, ack and page was checked by
the generator), and writes its JSON and Markdown summaries. No figure is compared with a target.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
from pathlib import Path

import support
from support import REPO

BUILT_BENCH = Path(os.environ.get("CALLING_BENCH_BIN", REPO / ".build" / "debug" / "calling-bench"))
SCENARIOS = ["idle", "rtt", "relay", "fanout", "chat", "chat-postgres", "join", "history"]


def session_bench() -> Path:
    """The bench beside the session's copy of the server, whose folder also holds the schema bundle
    the history scenario's seeding needs (conftest.py), so a rebuild mid-session cannot swap it."""
    bench = support.BINARY.parent / "calling-bench"
    if not bench.exists():
        shutil.copy2(BUILT_BENCH, bench)
    return bench


def test_every_scenario_runs_at_tiny_n_and_reports_verified_counts(tmp_path):
    bench = session_bench()
    result = subprocess.run(
        [str(bench), "suite", "--smoke", "--server", str(support.BINARY), "--out", str(tmp_path), "--quiet", "true",
         "--baseline-source", str(REPO / "bench" / "lws-baseline.c"), "--chat-trace", str(tmp_path / "trace")],
        capture_output=True, text=True, timeout=180, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "server flood limits out of the way: --max_frames_per_second 1000000" in result.stdout
    [summary] = list(tmp_path.glob("results-*.json"))
    assert list(tmp_path.glob("results-*.md")), "the Markdown summary is written too"
    report = json.loads(summary.read_text())
    by_name = {entry["scenario"]: entry for entry in report["scenarios"]}
    assert sorted(by_name) == sorted(SCENARIOS)
    for name, entry in by_name.items():
        assert "error" not in entry, f"{name}: {entry.get('error')}"
        assert entry["load_before"] and entry["load_after"], name
        stolen = entry["cpu_stolen"]
        assert len(stolen) == os.cpu_count() and all(s is None or 0 <= s <= 1 for s in stolen), f"{name}: {stolen}"
        for target in ("server", "baseline"):
            counts = [value for key, value in entry["verified"].items() if key.startswith(target)]
            assert counts and all(value > 0 for value in counts), f"{name}: {target} verified {entry['verified']}"
        assert entry["figures"], name
        for figure in entry["figures"]:
            assert figure["server"] is not None and math.isfinite(figure["server"]), f"{name}: {figure}"
            assert figure.get("baseline") is not None, f"{name}: {figure} has no baseline"
    # Exact counts where the scenario fixes them: 20 welcomes, 50 pongs, 20 history pages.
    assert by_name["idle"]["verified"] == {"server welcomes": 20, "baseline welcomes": 20}
    assert by_name["rtt"]["verified"] == {"server pongs in order": 50, "baseline pongs in order": 50}
    assert by_name["history"]["verified"] == {"server pages checked": 20, "baseline pages checked": 20}
    assert by_name["join"]["verified"] == {"server welcomes": 20, "baseline welcomes": 20}
    # The join phase says what each target spent per join, and how much of the phase it was busy.
    for target in ("server", "baseline"):
        assert any(re.fullmatch(rf"{target}: [0-9]+ µs CPU per join, [0-9]+ % of the phase", note)
                   for note in by_name["join"]["notes"]), by_name["join"]["notes"]
    # Each chat phase says what it cost the target: CPU per acked chat and the share of its core.
    chat_notes = "\n".join(by_name["chat"]["notes"])
    for target in ("server", "baseline"):
        spent = rf"{target} busy rooms: the target spent saturated [0-9.]+ µs CPU per acked chat, [0-9]+ % of a core; " \
                rf"paced at [0-9]+/s [0-9.]+ µs CPU per acked chat, [0-9]+ % of a core"
        assert re.search(spent, chat_notes), chat_notes
    # --chat-trace: every paced ack of each target, in arrival order, with a positive latency.
    for target in ("server", "baseline"):
        lines = (tmp_path / "trace" / f"chat-{target}-paced.csv").read_text().splitlines()
        assert lines[0] == "received_us,latency_ms" and len(lines) > 1, lines[:3]
        rows = [tuple(float(field) for field in line.split(",")) for line in lines[1:]]
        assert all(later[0] >= earlier[0] for earlier, later in zip(rows, rows[1:])), "arrival order"
        assert all(latency > 0 for _, latency in rows)
    # Fan-out counts whole messages: every delivery is one of 10 receivers.
    assert by_name["fanout"]["verified"]["server deliveries in order"] % 10 == 0


def test_rounds_alternate_the_targets_and_report_medians(tmp_path):
    command = [str(session_bench()), "suite", "rtt", "relay", "--smoke", "--server", str(support.BINARY), "--out", str(tmp_path),
               "--quiet", "true", "--baseline-source", str(REPO / "bench" / "lws-baseline.c")]
    refused = subprocess.run(command + ["--rounds", "0"], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert refused.returncode == 64 and "--rounds wants a count" in refused.stderr, refused.stderr
    result = subprocess.run(command + ["--rounds", "2"], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    for name in ("rtt", "relay"):
        assert f"round 1 of 2: {name}" in result.stdout and f"round 2 of 2: {name}" in result.stdout, result.stdout
    [summary] = list(tmp_path.glob("results-*.json"))
    entries = {entry["scenario"]: entry for entry in json.loads(summary.read_text())["scenarios"]}
    # Both rounds' pongs, every one checked: 50 per target per round.
    assert entries["rtt"]["verified"] == {"server pongs in order": 100, "baseline pongs in order": 100}
    # Without --relay-run the paced phase hands each side runs of the saturated phase's window (8 in --smoke).
    assert "in runs of 8 frames per side (the window)" in entries["relay"]["parameters"], entries["relay"]["parameters"]
    for entry in entries.values():
        assert entry["parameters"].endswith("; median of 2 of 2 rounds"), entry["parameters"]
        # Every figure found in both rounds (the relay's paced rate, which differs by round, is
        # in a note, not in the figure's name).
        for figure in entry["figures"]:
            ratios = figure["round_ratios"]
            assert len(ratios) == 2 and all(r > 0 for r in ratios), figure
            assert math.isclose(figure["ratio"], sum(ratios) / 2), figure


def test_relay_paces_each_rate_given_in_turn_for_both_targets(tmp_path):
    command = [str(session_bench()), "relay", "--smoke", "--server", str(support.BINARY), "--out", str(tmp_path),
               "--quiet", "true", "--baseline-source", str(REPO / "bench" / "lws-baseline.c")]
    for bad in ("2000,", "2000,x", "0", "-5"):
        refused = subprocess.run(command + ["--relay-rate", bad], capture_output=True, text=True, timeout=60, cwd=tmp_path)
        assert refused.returncode == 64 and "--relay-rate wants frames per second" in refused.stderr, (bad, refused.stderr)
    for bad in ("0", "4097", "x", "2.5"):
        refused = subprocess.run(command + ["--relay-run", bad], capture_output=True, text=True, timeout=60, cwd=tmp_path)
        assert refused.returncode == 64 and "--relay-run wants how many consecutive paced frames" in refused.stderr, (bad, refused.stderr)
    result = subprocess.run(command + ["--relay-rate", "2000,3000", "--relay-run", "3", "--relay-trace", str(tmp_path / "trace")],
                            capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    [summary] = list(tmp_path.glob("results-*.json"))
    [entry] = json.loads(summary.read_text())["scenarios"]
    assert ("paced at each of 2000 frames/s, 3000 frames/s (--relay-rate), in runs of 3 frames per side (--relay-run)"
            in entry["parameters"]), entry["parameters"]
    names = [figure["name"] for figure in entry["figures"]]
    assert names == ["saturated relay rate"] + [f"latency {p} at {rate} frames/s"
                                                for rate in (2000, 3000) for p in ("p50", "p99", "p99.9")], names
    notes = "\n".join(entry["notes"])
    for target in ("server", "baseline"):
        for rate, frames in ((2000, 600), (3000, 900)):
            # Each phase sends rate × 0.3 s frames, all of them delivered and said to be of that rate.
            assert f"{target} paced at {rate} frames/s: {frames} frames in" in notes, notes
            lines = (tmp_path / "trace" / f"relay-{target}-paced-{rate}.csv").read_text().splitlines()
            assert lines[0] == "received_us,latency_us,sender" and len(lines) == frames + 1, (target, rate, len(lines))
            # In due order (arrival minus latency, frames 1/rate apart), the 4 sides a0, b0, a1, b1
            # sent runs of 3 in turn: the schedule the phase claims is the one that went out.
            rows = [line.split(",") for line in lines[1:]]
            senders = [int(sender) for received, latency, sender in sorted(rows, key=lambda row: float(row[0]) - float(row[1]))]
            assert senders == [(n // 3) % 4 for n in range(frames)], (target, rate, senders[:24])


def test_instructions_count_each_targets_relayed_frames_under_callgrind(tmp_path):
    command = [str(session_bench()), "relay", "--smoke", "--server", str(support.BINARY), "--out", str(tmp_path),
               "--quiet", "true", "--baseline-source", str(REPO / "bench" / "lws-baseline.c"), "--instructions", "true"]
    refused = subprocess.run(command[:1] + ["suite", "rtt"] + command[2:], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert refused.returncode == 64 and "--instructions counts the relay only" in refused.stderr, refused.stderr
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "counting instructions: each target under" in result.stdout, result.stdout
    [summary] = list(tmp_path.glob("results-*.json"))
    [entry] = json.loads(summary.read_text())["scenarios"]
    assert "error" not in entry, entry.get("error")
    # Under valgrind a rate is not the machine's: the count is the only figure.
    [figure] = entry["figures"]
    assert figure["name"] == "instructions per relayed frame", figure
    # A relayed frame takes the server its scan, rules, route and write on top of what the bare
    # echo does with the same bytes; each target executes some thousands of instructions a frame.
    assert 1_000 < figure["baseline"] < figure["server"] < 100_000, figure
    for target in ("server", "baseline"):
        frames = entry["verified"][f"{target} frames relayed in order"]
        [note] = [n for n in entry["notes"] if n.startswith(f"{target}: ")]
        counted, over, counts = re.fullmatch(
            rf"{target}: ([0-9]+) instructions in ev_invoke_pending over ([0-9]+) frames relayed \(by function and line: callgrind_annotate (\S+)\)",
            note).groups()
        assert int(over) == frames > 0
        assert math.isclose(int(counted) / frames, figure[target]), (note, figure)
        # The phase's counts stay for callgrind_annotate; the whole run's file is removed.
        assert Path(counts).parent == tmp_path and re.search(rf"^totals: {counted}$", Path(counts).read_text(), re.M), counts
    assert len(list(tmp_path.glob("callgrind-*"))) == 2, list(tmp_path.glob("callgrind-*"))


def test_the_keepalive_scenario_holds_its_peers_through_three_rounds(tmp_path):
    """Named only (the suite leaves it out by default): 20 idle peers, idle_ping_seconds 1, every
    peer answers three PINGs on each target, and the figures and notes are there."""
    result = subprocess.run(
        [str(session_bench()), "suite", "keepalive", "--smoke", "--server", str(support.BINARY), "--out", str(tmp_path),
         "--quiet", "true", "--baseline-source", str(REPO / "bench" / "lws-baseline.c")],
        capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    [summary] = list(tmp_path.glob("results-*.json"))
    [entry] = json.loads(summary.read_text())["scenarios"]
    assert "error" not in entry, entry.get("error")
    assert "idle_ping_seconds 1" in entry["parameters"], entry["parameters"]
    for target in ("server", "baseline"):
        assert entry["verified"][f"{target} PINGs answered"] >= 60, entry["verified"]
        assert entry["verified"][f"{target} probe pongs in order"] > 0, entry["verified"]
        assert any(note.startswith(f"{target}: ") and "HTTP probes" in note for note in entry["notes"]), entry["notes"]
    names = {figure["name"] for figure in entry["figures"]}
    assert names == {"CPU per peer per round", "HTTP probe p99 during rounds", "probe peer ping p99 during rounds"}, names
    for figure in entry["figures"]:
        assert math.isfinite(figure["server"]) and figure.get("baseline") is not None, figure


def test_rest_cluster_compares_one_node_with_three_and_checks_every_call(tmp_path):
    """`rest-cluster` (run when named): 1 node and 3 nodes on one PostgreSQL and one Redis; every
    call created through one node is read back through another (bench/README.md)."""
    result = subprocess.run([str(session_bench()), "rest-cluster", "--smoke", "--server", str(support.BINARY), "--out", str(tmp_path),
                             "--quiet", "true", "--baseline-source", str(REPO / "bench" / "lws-baseline.c")],
                            capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    [summary] = list(tmp_path.glob("results-*.json"))
    [entry] = json.loads(summary.read_text())["scenarios"]
    assert "error" not in entry, entry.get("error")
    assert sorted(entry["verified"]) == ["server 1 node: calls created and read back",
                                         "server 3 nodes: calls created and read back through another node"], entry["verified"]
    assert all(count > 0 for count in entry["verified"].values()), entry["verified"]
    names = [figure["name"] for figure in entry["figures"]]
    assert names == [f"{size}: {what}" for size in ("1 node", "3 nodes")
                     for what in ("calls created and read back per second", "create + read p50", "create + read p99")], names
    assert all(math.isfinite(figure["server"]) and figure["server"] > 0 for figure in entry["figures"]), entry["figures"]
