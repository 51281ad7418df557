"""Fixtures for the end-to-end media tests (issue #7).

`make_lab(routed=True)` builds a private network out of namespaces (see netns.py) and returns the
Lab; everything started in it (calling-server, coturn, peers) is SIGKILLed and the namespaces are
deleted at teardown, whatever the test did. On failure the server's stderr and every process's
output are printed. `lab` is a routed lab.

Needs root (network namespaces; CI runs as root), iproute2, coturn for the relay tests and the
Python package aiortc (deploy/install-deps.sh --test).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import netns  # noqa: E402


@pytest.fixture
def make_lab(tmp_path, request):
    reason = netns.namespaces_available()
    if reason is not None:
        pytest.skip(reason)
    if importlib.util.find_spec("aiortc") is None:
        pytest.fail("the Python package aiortc is missing: run deploy/install-deps.sh --test")
    labs: list[netns.Lab] = []

    def make(routed: bool = True) -> netns.Lab:
        workdir = tmp_path / f"lab{len(labs)}"
        workdir.mkdir()
        lab = netns.Lab(workdir, routed=routed)
        labs.append(lab)
        return lab

    yield make
    report = getattr(request.node, "report_call", None)
    failed = report is not None and report.failed
    for lab in labs:
        if failed:
            print(lab.diagnostics())
        lab.close()


@pytest.fixture
def lab(make_lab) -> netns.Lab:
    return make_lab()
