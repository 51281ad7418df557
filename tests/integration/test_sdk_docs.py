"""docs/sdk.md's Swift snippets compile against the SDK as an app sees it.

Every ```swift block of docs/sdk.md is typechecked with the toolchain's `swiftc -typecheck`
against the built modules (.build/debug/Modules, `swift build` first), importing only
`CallingClient` (and `CallingMedia` where a snippet uses it): a renamed method, a type the SDK does
not export or a wrong label fails here. Blocks that are not app code are left out: Package.swift
fragments and the `MediaEngine` requirement listing. Each block becomes the body of its own async
function; the names the prose assumes (`peerJWT`, `server`, `client`, `pc`…) are declared in a
prelude.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "sdk.md"
MODULES = REPO / ".build" / "debug" / "Modules"

PRELUDE = """
import CallingClient
import Foundation

struct DocDescription { var sdp = "v=0" }
struct DocPeerConnection { var localDescription = DocDescription() }
let peerJWT = "header.payload.signature"
let token = peerJWT
let callerPresenceToken = peerJWT
let accessToken = peerJWT
let callID = "call_0"
let server = URL(string: "ws://127.0.0.1:8080")!
let client = SignalingClient(url: server, token: peerJWT)
let pc = DocPeerConnection()
let newPC = DocPeerConnection()
"""


def snippets() -> list[tuple[int, str]]:
    text = DOC.read_text()
    blocks = []
    for match in re.finditer(r"```swift\n(.*?)```", text, re.S):
        body = match.group(1)
        line = text.count("\n", 0, match.start()) + 1
        if "dependencies:" in body or ".package(" in body or "// in `targets:`" in body:
            continue  # Package.swift fragments
        if re.search(r"^func \w+\(.*\)[^{]*$", body, re.M):
            continue  # the MediaEngine requirement listing
        blocks.append((line, body))
    return blocks


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


def test_the_docs_have_swift_snippets():
    assert len(snippets()) >= 6, "docs/sdk.md lost its examples"


def test_every_swift_snippet_of_sdk_md_typechecks(tmp_path):
    swiftc = shutil.which("swiftc")
    if swiftc is None or not (MODULES / "CallingClient.swiftmodule").exists():
        pytest.skip("needs swiftc and a `swift build` (.build/debug/Modules)")
    source = [PRELUDE]
    if any("CallingMedia" in body or "MediaOptions" in body for _, body in snippets()):
        source.insert(0, "import CallingMedia")
    for index, (line, body) in enumerate(snippets()):
        # `import` lines are hoisted to file scope (the prelude imports the same modules).
        body = "".join(text for text in body.splitlines(keepends=True) if not text.startswith("import "))
        source.append(f"// docs/sdk.md line {line}\nfunc snippet{index}() async throws {{\n{body}}}\n")
    path = tmp_path / "snippets.swift"
    path.write_text("\n".join(source))
    result = subprocess.run([swiftc, "-typecheck", "-swift-version", "6", *compiler_flags(), str(path)],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0 and "error:" not in result.stderr, \
        f"docs/sdk.md snippets do not compile:\n{result.stderr[-6000:]}\n--- generated file ---\n{path.read_text()}"
