"""The namespace harness itself (netns.py): what runs through it is inside its namespace, and a
namespace whose set-up fails does not outlive the test."""

from __future__ import annotations

import itertools
import os
from pathlib import Path

import pytest

import netns

_COUNTER = itertools.count(1)


@pytest.fixture(autouse=True)
def namespaces():
    reason = netns.namespaces_available()
    if reason is not None:
        pytest.skip(reason)


def fresh_name() -> str:
    # The lab's pattern, so a run killed part-way is swept like any other lab's leftovers.
    return f"{netns.PREFIX}-{os.getpid()}-{900 + next(_COUNTER)}-t"


def listed() -> set[str]:
    return {line.split()[0] for line in netns.ip("netns", "list").splitlines() if line.strip()}


def test_commands_and_sysctls_apply_inside_the_namespace_only():
    host = netns.Namespace(fresh_name())
    try:
        links = host.run(["ip", "-o", "link", "show"])
        assert links.returncode == 0, links.stderr
        names = [line.split(":")[1].strip() for line in links.stdout.splitlines()]
        assert names == ["lo"], names
        assert "LOWER_UP" in netns.ip_in(host.name, "link", "show", "lo")
        # ip_default_ttl is per network namespace: set inside, the host's own stays as it was.
        own = Path("/proc/sys/net/ipv4/ip_default_ttl").read_text().strip()
        value = "77" if own != "77" else "78"
        host.sysctl("net.ipv4.ip_default_ttl", value)
        inside = host.run(["cat", "/proc/sys/net/ipv4/ip_default_ttl"])
        assert inside.stdout.strip() == value, inside
        assert Path("/proc/sys/net/ipv4/ip_default_ttl").read_text().strip() == own
    finally:
        host.delete()
    assert host.name not in listed()


def test_a_namespace_whose_set_up_fails_is_removed(monkeypatch):
    name = fresh_name()

    def refuse(namespace: str, *args: str, timeout: float = 10.0) -> str:
        raise netns.LabError(f"`ip {' '.join(args)}` in {namespace} refused by the test")

    monkeypatch.setattr(netns, "ip_in", refuse)
    with pytest.raises(netns.LabError, match="refused by the test"):
        netns.Namespace(name)
    assert name not in listed()
