"""docs/sdk.md's Installation manifest resolves as written, offline.

The `// swift-tools-version` block of docs/sdk.md "Installation" becomes the Package.swift of a
throwaway app whose `main.swift` is the Quick start. Its dependency URL is replaced by a `file://`
URL of a bare clone of this repository named `CallingServer.git` (the identity the manifest's
`package: "CallingServer"` names), whose `main` is the commit checked out here. Everything else of
the manifest, the version requirement included, is used as shown: `swift package resolve` must
pick that commit and `swift package describe` must find the `CallingClient` product. A
requirement no tag can satisfy (`from: "1.0.0"` in a repository without tags) fails here.

Needs git and the swift toolchain; no network, no build.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from test_sdk_docs import DOC, blocks, kind

REPO = Path(__file__).resolve().parents[2]
URL = re.compile(r'\.package\(url: "([^"]+)"')


def manifest() -> str:
    found = [body for _, body in blocks() if kind(body) == "manifest"]
    assert len(found) == 1, "docs/sdk.md should have exactly one Package.swift block (Installation)"
    return found[0]


def run(args: list[str], cwd: Path, timeout: int = 180) -> subprocess.CompletedProcess:
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=timeout)


def test_the_installation_manifest_resolves_against_this_repository(tmp_path):
    swift, git = shutil.which("swift"), shutil.which("git")
    if swift is None or git is None:
        pytest.skip("needs swift and git")
    head = run([git, "rev-parse", "HEAD"], REPO).stdout.strip()
    remote = tmp_path / "remote" / "CallingServer.git"
    cloned = run([git, "clone", "--quiet", "--bare", "--no-hardlinks", str(REPO), str(remote)], tmp_path)
    assert cloned.returncode == 0, cloned.stderr
    # The clone's main is this checkout's commit (the branch under test, not the main checkout's main).
    assert run([git, "branch", "-f", "main", head], remote).returncode == 0

    text = manifest()
    urls = URL.findall(text)
    assert len(urls) == 1, f"one .package(url:) expected in the manifest:\n{text}"
    app = tmp_path / "MyApp"
    (app / "Sources" / "MyApp").mkdir(parents=True)
    (app / "Package.swift").write_text(text.replace(urls[0], remote.as_uri()))
    quick_start = next(body for _, body in blocks() if kind(body) == "program")
    (app / "Sources" / "MyApp" / "main.swift").write_text(quick_start)

    resolved = run([swift, "package", "resolve"], app)
    assert resolved.returncode == 0, f"the manifest of {DOC.name} does not resolve:\n{resolved.stderr}{resolved.stdout}"
    pins = json.loads((app / "Package.resolved").read_text())["pins"]
    assert [(pin["identity"], pin["state"].get("revision")) for pin in pins] == [("callingserver", head)]

    described = run([swift, "package", "describe", "--type", "json"], app)
    assert described.returncode == 0, described.stderr
    out = described.stdout
    target = next(t for t in json.loads(out[out.index("{"):])["targets"] if t["name"] == "MyApp")
    assert target.get("product_dependencies") == ["CallingClient"], target
