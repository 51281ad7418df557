"""Fixtures for the browser tests (issue #11): a network lab with calling-server, chromedriver and
Chromium sessions (browser_lab.py), and the artifacts folder for screenshots.

`blab` is a BrowserLab: `blab.server` (a RestartableServer on the lab's server host), and
`blab.browser(label)` for each Chromium session. Everything is killed and the namespaces removed at
teardown, whatever the test did; on failure the server's stderr, every process's output and each
page's state and console are printed.

Screenshots go to $CALLING_TEST_ARTIFACTS (default tests/integration/browser/artifacts/, git-ignored).
docs/images/demo.png is a copy of artifacts/demo-call-and-chat.png, refreshed by hand when the
page changes visibly.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "media"))
sys.path.insert(0, str(HERE))

import browser_lab  # noqa: E402
import netns  # noqa: E402


@pytest.fixture
def artifacts() -> Path:
    path = Path(os.environ.get("CALLING_TEST_ARTIFACTS") or HERE / "artifacts")
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture
def blab(tmp_path, request):
    reason = browser_lab.missing()
    if reason is not None:
        pytest.skip(reason)
    (tmp_path / "lab").mkdir()
    lab = netns.Lab(tmp_path / "lab")
    browsers = None
    try:
        data_dir = lab.workdir / "data"
        data_dir.mkdir()
        server = browser_lab.RestartableServer(lab, data_dir)
        lab.servers.append(server)
        server.start()
        browsers = browser_lab.BrowserLab(lab, server)
        yield browsers
    finally:
        report = getattr(request.node, "report_call", None)
        if report is not None and report.failed:
            if browsers is not None:
                print(browsers.diagnostics())
            print(lab.diagnostics())
        if browsers is not None:
            browsers.close()
        lab.close()
