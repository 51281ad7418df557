"""The SDK on Apple platforms, held from here (no Apple SDK on this machine; docs/ios.md).

* Package.swift: the `CallingClient` target's graph on iOS and macOS, with the platform conditions
  of its dependencies evaluated (`swift package dump-package` reports them), holds no C module
  (libwebsockets, GStreamer, OpenSSL, SQLite…) and no module that imports one; on Linux it still
  holds the libwebsockets adapter.
* Sources: in that graph, a module only Linux has (`CallingWebSocket`, `Glibc`, a C module) is
  imported only under `#if canImport(<it>)` or `#if os(Linux)`.
* The iOS media engine (`CallingWebRTC`): Package.swift's Apple branch (read here with
  CALLING_PACKAGE_APPLE_GRAPH=1) links stasel/WebRTC's `WebRTC` product and has no stub; the Linux
  branch links the stub module (Sources/WebRTCStub) instead, which says in its header that it is one.
* Compilation: `CallingClient` compiles with only the Swift modules of its Apple graph visible
  (so every `#if canImport(CallingWebSocket)` takes its Apple branch, URLSession), without
  warnings, and its public API (symbol graph) is the same as the Linux build's.

Needs the toolchain and a `swift build` (the modules of .build/debug).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MODULES = REPO / ".build" / "debug" / "Modules"

# Modules an Apple build of the SDK cannot have.
LINUX_ONLY = {"Glibc", "CallingWebSocket", "CallingTransport"}


def swift() -> str:
    found = shutil.which("swift")
    if found is None:
        pytest.fail("no swift toolchain")
    return found


@pytest.fixture(scope="module")
def manifest() -> dict:
    out = subprocess.run([swift(), "package", "dump-package"], cwd=REPO, check=True, capture_output=True, text=True,
                         timeout=120).stdout
    return json.loads(out[out.index("{"):])


def dependencies(target: dict, platform: str) -> list[str]:
    """The target's dependencies that apply on `platform` (ios, macos, linux)."""
    names = []
    for dependency in target["dependencies"]:
        # {"byName": [name, condition]}, {"target": [name, condition]},
        # {"product": [name, package, moduleAliases, condition]}
        (_, value), = dependency.items()
        name, condition = value[0], value[-1]
        platforms = (condition or {}).get("platformNames")
        if platforms is None or platform in platforms:
            names.append(name)
    return names


def closure(manifest: dict, name: str, platform: str) -> set[str]:
    by_name = {target["name"]: target for target in manifest["targets"]}
    seen: set[str] = set()
    stack = [name]
    while stack:
        for dependency in dependencies(by_name[stack.pop()], platform):
            if dependency in by_name and dependency not in seen:
                seen.add(dependency)
                stack.append(dependency)
    return seen


def system_libraries(manifest: dict) -> set[str]:
    return {target["name"] for target in manifest["targets"] if target["type"] == "system"}


def target_dir(target: dict) -> Path:
    return REPO / (target.get("path") or f"Sources/{target['name']}")


@pytest.fixture(scope="module")
def apple_manifest(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Package.swift evaluated as on an Apple host (a fresh directory: no cached manifest)."""
    directory = tmp_path_factory.mktemp("apple-manifest")
    shutil.copy(REPO / "Package.swift", directory / "Package.swift")
    out = subprocess.run([swift(), "package", "dump-package"], cwd=directory, check=True, capture_output=True, text=True,
                         timeout=120, env={**os.environ, "CALLING_PACKAGE_APPLE_GRAPH": "1"}).stdout
    return json.loads(out[out.index("{"):])


def test_the_ios_engine_links_stasel_webrtc_on_apple_and_a_stub_only_on_linux(manifest: dict, apple_manifest: dict) -> None:
    remotes = [location["urlString"] for dependency in apple_manifest["dependencies"]
               for control in dependency.get("sourceControl", []) for location in control["location"].get("remote", [])]
    assert remotes == ["https://github.com/stasel/WebRTC.git"]
    apple_targets = {target["name"]: target for target in apple_manifest["targets"]}
    assert "WebRTC" not in apple_targets, "the stub must not exist in the Apple graph"
    assert {"product": ["WebRTC", "WebRTC", None, None]} in apple_targets["CallingWebRTC"]["dependencies"]
    for platform in ("ios", "macos"):
        graph = closure(apple_manifest, "CallingWebRTC", platform)
        assert not graph & system_libraries(apple_manifest), f"CallingWebRTC on {platform}: {sorted(graph)}"
        assert "CallingWebSocket" not in graph

    linux_targets = {target["name"]: target for target in manifest["targets"]}
    assert manifest["dependencies"] == []
    assert linux_targets["WebRTC"]["path"] == "Sources/WebRTCStub"
    assert {"byName": ["CallingClient", None]} in linux_targets["CallingWebRTC"]["dependencies"]
    assert {"target": ["WebRTC", None]} in linux_targets["CallingWebRTC"]["dependencies"]
    stub = (REPO / "Sources" / "WebRTCStub" / "WebRTC.swift").read_text()
    assert stub.startswith("// STUB OF THE WebRTC MODULE, FOR THE LINUX COMPILE CHECK OF CallingWebRTC ONLY.")
    assert stub.count("{ stub() }") >= 30, "every stub method traps"


@pytest.mark.parametrize("platform", ["ios", "macos"])
def test_the_sdk_graph_on_apple_platforms_has_no_c_library(manifest: dict, platform: str) -> None:
    graph = closure(manifest, "CallingClient", platform)
    assert graph, "CallingClient has no dependencies?"
    c_modules = graph & system_libraries(manifest)
    assert not c_modules, f"CallingClient on {platform} links C modules {sorted(c_modules)}"
    for forbidden in ("CallingWebSocket", "CallingAuth", "CallingMedia", "CallingTransport"):
        assert forbidden not in graph, f"CallingClient on {platform} links {forbidden}"


def test_linux_builds_keep_the_libwebsockets_transport(manifest: dict) -> None:
    graph = closure(manifest, "CallingClient", "linux")
    assert {"CallingWebSocket", "CLibWebSockets"} <= graph


IF = re.compile(r"^\s*#\s*(if|elseif|else|endif)\b(.*)$")
IMPORT = re.compile(r"^\s*(?:@\w+\s+)*(?:public\s+|package\s+|internal\s+)?import\s+(?:struct\s+|enum\s+|class\s+|func\s+)?(\w+)")


def unguarded_imports(text: str, modules: set[str]) -> list[str]:
    """Imports of `modules` not inside an `#if canImport(<module>)` or `#if os(Linux)` branch."""
    stack: list[str] = []  # the condition of each open #if branch ("" for #else of a guard)
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        directive = IF.match(line)
        if directive:
            kind, condition = directive.group(1), directive.group(2).strip()
            if kind == "if":
                stack.append(condition)
            elif kind in ("elseif", "else") and stack:
                stack[-1] = condition if kind == "elseif" else ""
            elif kind == "endif" and stack:
                stack.pop()
            continue
        imported = IMPORT.match(line)
        if imported and imported.group(1) in modules:
            module = imported.group(1)
            if not any(f"canImport({module})" in c.replace(" ", "") or "os(Linux)" in c.replace(" ", "")
                       for c in stack if not c.lstrip().startswith("!")):
                found.append(f"line {number}: import {module}")
    return found


def test_apple_graph_sources_import_linux_only_modules_under_a_guard(manifest: dict) -> None:
    by_name = {target["name"]: target for target in manifest["targets"]}
    linux_only = LINUX_ONLY | system_libraries(manifest)
    graph = closure(manifest, "CallingClient", "ios") | {"CallingClient"}
    checked = 0
    for name in sorted(graph):
        for source in sorted(target_dir(by_name[name]).rglob("*.swift")):
            stray = unguarded_imports(source.read_text(), linux_only)
            assert not stray, f"{source.relative_to(REPO)} imports Linux-only modules unguarded: {stray}"
            checked += 1
    assert checked >= 20
    # The guard check itself catches an unguarded import.
    assert unguarded_imports("import CallingWebSocket\n", linux_only)
    assert not unguarded_imports("#if canImport(CallingWebSocket)\nimport CallingWebSocket\n#endif\n", linux_only)
    assert unguarded_imports("#if canImport(CallingWebSocket)\n#else\nimport CallingWebSocket\n#endif\n", linux_only)


@pytest.fixture(scope="module")
def symbol_graphs(manifest: dict, tmp_path_factory: pytest.TempPathFactory) -> dict[str, set[str]]:
    """CallingClient's public symbols: as built for Linux, and compiled here with only the
    modules of its Apple graph visible. Built once (a fixture: outside the per-test time limit)."""
    if not (MODULES / "CallingClient.swiftmodule").exists():
        pytest.fail("run `swift build` first: .build/debug/Modules has no CallingClient")
    work = tmp_path_factory.mktemp("apple-graph")
    visible, apple, linux = work / "modules", work / "apple", work / "linux"
    for directory in (visible, apple, linux):
        directory.mkdir()
    by_name = {target["name"]: target for target in manifest["targets"]}
    for name in closure(manifest, "CallingClient", "ios"):
        (visible / f"{name}.swiftmodule").symlink_to(MODULES / f"{name}.swiftmodule")
    sources = sorted(str(path) for path in target_dir(by_name["CallingClient"]).rglob("*.swift"))
    swiftc = shutil.which("swiftc")
    compiled = subprocess.run([swiftc, "-emit-module", "-swift-version", "6", "-parse-as-library", "-module-name",
                               "CallingClient", "-I", str(visible), "-emit-module-path", str(apple / "CallingClient.swiftmodule"),
                               *sources], capture_output=True, text=True, timeout=600)
    assert compiled.returncode == 0, compiled.stderr[-4000:]
    assert "warning:" not in compiled.stderr, compiled.stderr[-4000:]
    extract = shutil.which("swift-symbolgraph-extract")
    common = ["-module-name", "CallingClient", "-target", "x86_64-unknown-linux-gnu", "-minimum-access-level", "public"]
    subprocess.run([extract, *common, "-I", str(apple), "-I", str(visible), "-output-dir", str(apple)], check=True,
                   capture_output=True, timeout=300)
    lws = subprocess.run(["pkg-config", "--cflags-only-I", "libwebsockets"], capture_output=True, text=True).stdout.split()
    subprocess.run([extract, *common, "-I", str(MODULES), "-I", str(REPO / "Sources" / "CLibWebSockets"),
                    *[flag for include in lws for flag in ("-Xcc", include)], "-output-dir", str(linux)], check=True,
                   capture_output=True, timeout=300)

    def symbols(directory: Path) -> set[str]:
        graph = json.loads((directory / "CallingClient.symbols.json").read_text())
        return {".".join(symbol["pathComponents"]) + " " + "".join(part["spelling"] for part in symbol.get("declarationFragments", []))
                for symbol in graph["symbols"]}

    return {"apple": symbols(apple), "linux": symbols(linux)}


def test_the_sdk_compiles_without_libwebsockets_with_the_same_public_api(symbol_graphs: dict[str, set[str]]) -> None:
    apple, linux = symbol_graphs["apple"], symbol_graphs["linux"]
    assert any(symbol.startswith("SignalingClient.connect") for symbol in linux), "the Linux symbol graph is empty?"
    assert apple == linux, (f"only on Apple platforms: {sorted(apple - linux)[:10]}; "
                            f"only on Linux: {sorted(linux - apple)[:10]}")


def test_the_swift_blocks_of_ios_md_compile() -> None:
    """Each ```swift block of docs/ios.md that starts with `import CallingClient` typechecks against
    the built modules (CallingWebRTC against its stub: a compile check, docs/ios.md says so)."""
    text = (REPO / "docs" / "ios.md").read_text()
    blocks = [block for block in re.findall(r"```swift\n(.*?)```", text, re.DOTALL) if block.startswith("import CallingClient")]
    assert blocks, "docs/ios.md has no compiled example"
    lws = subprocess.run(["pkg-config", "--cflags-only-I", "libwebsockets"], capture_output=True, text=True).stdout.split()
    with tempfile.TemporaryDirectory() as directory:
        for number, block in enumerate(blocks):
            source = Path(directory) / f"block{number}.swift"
            source.write_text(block)
            checked = subprocess.run([shutil.which("swiftc"), "-typecheck", "-swift-version", "6", "-parse-as-library",
                                      "-I", str(MODULES), "-I", str(REPO / "Sources" / "CLibWebSockets"),
                                      *[flag for include in lws for flag in ("-Xcc", include)], str(source)],
                                     capture_output=True, text=True, timeout=25)
            assert checked.returncode == 0 and "warning:" not in checked.stderr, f"block {number}:\n{checked.stderr[-3000:]}"


def test_the_feature_table_of_ios_md_names_only_declared_api() -> None:
    """Every Swift name in backticks in docs/ios.md's feature table is declared in Sources (a
    renamed or made-up member fails here); wire keys (`rtt_ms`) and headers are not Swift names."""
    text = (REPO / "docs" / "ios.md").read_text()
    table = text[text.index("## Feature table"):]
    rows = [line for line in table.splitlines() if line.startswith("| ") and not line.startswith("| feature")]
    assert len(rows) >= 15
    names = {name for row in rows for name in re.findall(r"`([A-Za-z][A-Za-z0-9]*)`", row)}
    assert {"WebRTCMediaEngine", "tokenProvider", "tlsCAFile"} <= names
    sources = "\n".join(path.read_text() for path in (REPO / "Sources").rglob("*.swift"))
    for name in sorted(names):
        declared = re.search(rf"\b(?:func|var|let|case|class|struct|enum|protocol|typealias)\s+{name}\b", sources)
        assert declared, f"docs/ios.md's feature table names `{name}`, which no source declares"
