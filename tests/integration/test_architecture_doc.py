"""docs/architecture.md is held against the package and the tree.

* Its module table ("Module graph": `| target | depends on | C modules imported |`) lists, for
  every target it names, exactly the target dependencies `swift package describe` reports; and
  every library and executable target of the package has a row.
* Every file it names by a path (`Sources/…`, `Tests/…`, `tests/…`, `docs/…`, `sdk/…`, or a
  module folder such as `CallingStore/ChatPersistence.swift`) or by a bare Swift/Python file name
  exists in the repository.
* It does not cite documents the repository does not have.
* No Swift source outside `Sources/CallingBench` and `Sources/calling-bench` carries an
  instruction count in a comment: figures live in docs/benchmarks.md and the callgrind tests.

Needs only the toolchain (no build, no server).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "architecture.md"

ROW = re.compile(r"^\| ([^|]+) \| ([^|]+) \|", re.MULTILINE)
TICKED = re.compile(r"`([^`]+)`")
FILE = re.compile(r"(?<![\w/.+-])((?:[\w.-]+/)*[\w.+-]+\.(?:swift|py|mjs|js|md|yaml|c|h|modulemap|sh))(?![\w/])")


def module_table(text: str, names: set[str]) -> dict[str, set[str]]:
    """Rows whose first cell is one or more ticked target names, mapped to the ticked target
    names of their second cell (other ticked words, such as `@_exported`, are not targets)."""
    section = text[text.index("## Module graph"):]
    section = section[:section.index("\n## ", 1)]
    rows: dict[str, set[str]] = {}
    for first, second in ROW.findall(section):
        targets = [name for name in TICKED.findall(first) if name in names]
        if not targets:
            continue
        listed = {name for name in TICKED.findall(second) if name in names}
        for target in targets:
            rows[target] = listed
    return rows


def test_the_module_table_lists_each_targets_dependencies(package: dict) -> None:
    by_name = {target["name"]: target for target in package["targets"]}
    rows = module_table(DOC.read_text(), set(by_name))
    assert len(rows) >= 15, "the module table was not found"
    wrong = {name: (sorted(listed), sorted(by_name[name].get("target_dependencies", [])))
             for name, listed in rows.items()
             if listed != set(by_name[name].get("target_dependencies", []))}
    assert not wrong, f"docs/architecture.md lists (doc, package) dependencies that differ: {wrong}"


def test_every_library_and_executable_target_has_a_row(package: dict) -> None:
    names = {target["name"] for target in package["targets"]}
    rows = module_table(DOC.read_text(), names)
    missing = sorted(target["name"] for target in package["targets"]
                     if target["type"] in ("library", "executable") and target["module_type"] == "SwiftTarget"
                     and target["name"] not in rows)
    assert not missing, f"docs/architecture.md's module table has no row for {missing}"


def test_every_file_it_names_exists() -> None:
    tracked = subprocess.run(["git", "ls-files"], cwd=REPO, check=True, capture_output=True,
                             text=True).stdout.split()
    basenames = {Path(path).name for path in tracked}
    missing = []
    for name in sorted(set(FILE.findall(DOC.read_text()))):
        if "/" in name:
            if not any(path == name or path.endswith("/" + name) for path in tracked):
                missing.append(name)
        elif name.endswith((".swift", ".py", ".mjs", ".md")) and name not in basenames:
            missing.append(name)
    assert not missing, f"docs/architecture.md names files the repository does not have: {missing}"


def test_it_cites_no_document_outside_the_repository() -> None:
    text = DOC.read_text()
    assert "design.md" not in text, "docs/architecture.md cites a design.md the repository does not have"


INSTRUCTION_COUNT = re.compile(r"[0-9][0-9,.]*k?\s+instructions|[0-9]\s+instr")
BENCH_MODULES = ("CallingBench", "calling-bench")


def comment_text(source: str) -> str:
    """The file's `//` comments, consecutive lines joined with a space, so that a figure wrapped
    onto the next line is still read as one phrase."""
    comments = []
    for line in source.splitlines():
        at = line.find("//")
        comments.append(line[at:].lstrip("/") if at >= 0 else "\n")
    return " ".join(comments)


def test_no_swift_comment_outside_the_benchmarks_carries_an_instruction_count() -> None:
    found = []
    for path in sorted((REPO / "Sources").rglob("*.swift")):
        if path.relative_to(REPO / "Sources").parts[0] in BENCH_MODULES:
            continue
        for match in INSTRUCTION_COUNT.finditer(comment_text(path.read_text())):
            found.append(f"{path.relative_to(REPO)}: {match.group(0)!r}")
    assert not found, f"instruction counts in source comments (they belong in docs/benchmarks.md): {found}"
