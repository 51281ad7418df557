"""docs/sdk.md's Swift snippets compile exactly as shown, against the SDK as an app sees it.

Every ```swift block of docs/sdk.md is typechecked with the toolchain's `swiftc -typecheck`
against the built modules (.build/debug/Modules, `swift build` first). Nothing is added to a block
that the reader does not see. A block is one of (docs/sdk.md, "Code blocks", says the same):

* a complete program: the block is the whole `main.swift`, imports included (the Quick start);
* a fragment, marked by its first line `// Fragment; given NAME: TYPE, …`: it is compiled as the
  body of `func fragment(NAME: TYPE, …) async throws` in a file that imports `CallingClient` and
  `Foundation`, and nothing else;
* a listing, marked by its first line `// Listing: …`: declarations compiled as the body of a
  `protocol` (labels and types must exist, nothing runs);
* a manifest, whose first line is `// swift-tools-version…`: not compiled here; test_sdk_install.py
  resolves it against a copy of this repository.

Any other block is complete: a snippet that leans on a name nobody declared fails here.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "sdk.md"
MODULES = REPO / ".build" / "debug" / "Modules"

FRAGMENT = re.compile(r"^// Fragment; given (?P<given>.+)$")

FRAGMENT_WRAPPER = """import CallingClient
import Foundation

func fragment({given}) async throws {{
{body}}}
"""

LISTING_WRAPPER = """import CallingClient
import Foundation

protocol Listing {{
{body}}}
"""


def blocks(text: str | None = None) -> list[tuple[int, str]]:
    """(line, body) of every ```swift block."""
    text = DOC.read_text() if text is None else text
    return [(text.count("\n", 0, match.start()) + 1, match.group(1))
            for match in re.finditer(r"```swift\n(.*?)```", text, re.S)]


def kind(body: str) -> str:
    first = body.splitlines()[0] if body.strip() else ""
    if first.startswith("// swift-tools-version"):
        return "manifest"
    if FRAGMENT.match(first):
        return "fragment"
    if first.startswith("// Listing:"):
        return "listing"
    return "program"


def source(body: str) -> tuple[str, str]:
    """The file name and the text swiftc checks for one block."""
    match = FRAGMENT.match(body.splitlines()[0])
    if match:
        return "fragment.swift", FRAGMENT_WRAPPER.format(given=match.group("given"), body=body)
    if kind(body) == "listing":
        return "listing.swift", LISTING_WRAPPER.format(body=body)
    return "main.swift", body


def compiler_flags() -> list[str]:
    flags = ["-I", str(MODULES)]
    for modulemap in sorted((REPO / "Sources").glob("C[A-Z]*/module.modulemap")):
        flags += ["-Xcc", f"-fmodule-map-file={modulemap}"]
    pkg = shutil.which("pkg-config")
    if pkg:
        result = subprocess.run([pkg, "--cflags-only-I", "libwebsockets", "gstreamer-1.0", "libjwt", "openssl"],
                                capture_output=True, text=True)
        for include in result.stdout.split():
            flags += ["-Xcc", include]
    return flags


def typecheck(swiftc: str, directory: Path, name: str, text: str) -> subprocess.CompletedProcess:
    directory.mkdir(parents=True)
    path = directory / name
    path.write_text(text)
    return subprocess.run([swiftc, "-typecheck", "-swift-version", "6", *compiler_flags(), str(path)],
                          capture_output=True, text=True, timeout=300)


def test_the_docs_have_swift_snippets_and_a_complete_quick_start():
    found = blocks()
    assert len(found) >= 6, "docs/sdk.md lost its examples"
    text = DOC.read_text()
    quick = text.index("## Quick start")
    first = next(body for line, body in found if text.count("\n", 0, quick) < line)
    assert kind(first) == "program", "the Quick start must be a complete program, not a fragment"
    assert first.startswith("import CallingClient\nimport Foundation\n")


def test_a_fragment_gets_only_its_given_names():
    name, text = source("// Fragment; given client: SignalingClient, token: String\ntry await client.connect()\n")
    assert name == "fragment.swift"
    assert "func fragment(client: SignalingClient, token: String) async throws {\n// Fragment" in text
    assert source("let x = 1\n") == ("main.swift", "let x = 1\n")


def test_every_swift_snippet_of_sdk_md_compiles_as_shown(tmp_path):
    swiftc = shutil.which("swiftc")
    if swiftc is None or not (MODULES / "CallingClient.swiftmodule").exists():
        pytest.skip("needs swiftc and a `swift build` (.build/debug/Modules)")
    checked = [(line, body) for line, body in blocks() if kind(body) != "manifest"]
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(lambda item: (item[0], *source(item[1]), typecheck(swiftc, tmp_path / f"line{item[0]}",
                                                                                   *source(item[1]))), checked))
    failures = [f"docs/sdk.md line {line} ({name}):\n{result.stderr[-3000:]}\n--- compiled ---\n{text}"
                for line, name, text, result in results
                if result.returncode != 0 or "error:" in result.stderr or "warning:" in result.stderr]
    assert not failures, "docs/sdk.md snippets do not compile as shown:\n\n" + "\n\n".join(failures)
