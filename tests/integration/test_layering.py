"""The module layering of docs/architecture.md ("Modules"), read from the package itself.

* The SDK (`CallingClient`), the media library (`CallingMedia`) and the examples built on them
  link no server module: their transitive target dependencies in Package.swift (as
  `swift package describe --type json` reports them) contain none of `SERVER_MODULES`, and their
  sources import nothing outside that closure.
* Each C module (a system-library target) is imported by exactly one Swift module, which lists
  it as a dependency; `CallingCore` and `CallingProtocol` import no C module. Test targets may
  import a C module to look inside its adapter and are not counted.

Needs only the toolchain (no build, no server).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

# Server logic and drivers: the hub and its state machines, storage, the cluster's Redis client,
# the WebSocket/HTTP server, the server app, and the test and benchmark tooling built on them.
SERVER_MODULES = {
    "CallingCore", "CallingStore", "CallingPostgres", "CallingRedis", "CallingTransport", "CallingServer",
    "CallingTesting", "CallingBench",
}

# What an app links: the SDK, the media library and the examples of docs/sdk.md.
APP_MODULES = ["CallingClient", "CallingMedia", "CallingWebRTC", "ChatBot", "VoiceAgent"]

# Toolchain modules any target may import.
TOOLCHAIN_MODULES = {"Foundation", "FoundationNetworking", "Dispatch", "Glibc", "Synchronization", "XCTest"}

IMPORT = re.compile(r"^\s*(?:@\w+\s+)*(?:public\s+|package\s+|internal\s+)?import\s+(?:struct\s+|enum\s+|class\s+|func\s+)?(\w+)",
                    re.MULTILINE)


def targets(package: dict) -> dict[str, dict]:
    return {target["name"]: target for target in package["targets"]}


def closure(package: dict, name: str) -> set[str]:
    by_name = targets(package)
    seen: set[str] = set()
    stack = [name]
    while stack:
        current = stack.pop()
        for dependency in by_name[current].get("target_dependencies", []):
            if dependency not in seen:
                seen.add(dependency)
                stack.append(dependency)
    return seen


def imports(target: dict) -> set[str]:
    found: set[str] = set()
    for source in target.get("sources", []):
        if source.endswith(".swift"):
            found |= set(IMPORT.findall((REPO / target["path"] / source).read_text()))
    return found


@pytest.mark.parametrize("name", APP_MODULES)
def test_apps_link_no_server_module(package: dict, name: str) -> None:
    linked = closure(package, name)
    assert not linked & SERVER_MODULES, f"{name} links server modules {sorted(linked & SERVER_MODULES)}"


@pytest.mark.parametrize("name", APP_MODULES)
def test_app_sources_import_only_what_they_link(package: dict, name: str) -> None:
    by_name = targets(package)
    allowed = closure(package, name) | TOOLCHAIN_MODULES
    for module in [name] + sorted(closure(package, name)):
        if by_name[module]["module_type"] != "SwiftTarget":
            continue
        stray = imports(by_name[module]) - allowed - {module}
        assert not stray, f"{module} (linked by {name}) imports {sorted(stray)}, which {name} does not link"


def test_each_c_module_has_exactly_one_importer(package: dict) -> None:
    by_name = targets(package)
    c_modules = {name for name, target in by_name.items() if target["module_type"] == "SystemLibraryTarget"}
    assert "CLibWebSockets" in c_modules and len(c_modules) >= 8
    importers: dict[str, set[str]] = {name: set() for name in c_modules}
    for name, target in by_name.items():
        if target["module_type"] != "SwiftTarget" or target["type"] == "test":
            continue
        for module in imports(target) & c_modules:
            importers[module].add(name)
            assert module in target.get("target_dependencies", []), f"{name} imports {module} without depending on it"
    for module, names in sorted(importers.items()):
        assert len(names) == 1, f"{module} is imported by {sorted(names)}; exactly one adapter module may import it"
    for pure in ("CallingCore", "CallingProtocol", "CallingValues", "CallingLogging"):
        assert not imports(by_name[pure]) & c_modules, f"{pure} imports a C module"


def test_the_sdk_links_the_lws_adapter_but_not_the_server(package: dict) -> None:
    linked = closure(package, "CallingClient")
    assert "CallingWebSocket" in linked and "CLibWebSockets" in linked
    assert "CallingTransport" not in linked
    assert "CallingWebSocket" in closure(package, "CallingTransport")
