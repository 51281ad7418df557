"""The namespace harness itself (netns.py): what runs through it is inside its namespace, and a
namespace whose set-up fails does not outlive the test."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import netns


@pytest.fixture(autouse=True)
def namespaces():
    reason = netns.namespaces_available()
    if reason is not None:
        pytest.skip(reason)


def fresh_name() -> str:
    # The lab's pattern, so a run killed part-way is swept like any other lab's leftovers.
    return f"{netns.fresh_base()}-t"


def listed() -> set[str]:
    return {line.split()[0] for line in netns.ip("netns", "list").splitlines() if line.strip()}


def link_names(output: str) -> set[str]:
    return {line.split(":")[1].strip().split("@")[0] for line in output.splitlines()}


def test_commands_and_sysctls_apply_inside_the_namespace_only():
    host = netns.Namespace(fresh_name())
    try:
        # The namespace's own network: its lo, none of the host's links (a kernel may add tunnel
        # fallback devices such as sit0 to every new namespace, so those are not counted).
        inside = host.run(["ip", "-o", "link", "show"])
        assert inside.returncode == 0, inside.stderr
        assert "lo" in link_names(inside.stdout)
        own_links = link_names(netns.ip("-o", "link", "show")) - {"lo"}
        fallback = {"sit0", "tunl0", "gre0", "gretap0", "erspan0", "ip6tnl0", "ip6gre0", "ip_vti0", "ip6_vti0"}
        assert not (link_names(inside.stdout) & (own_links - fallback)), inside.stdout
        assert "LOWER_UP" in netns.ip_in(host.name, "link", "show", "lo")
        # The host's mount namespace: entering the network namespace alone is what works in a
        # chroot (`ip netns exec` makes a mount namespace of its own, and fails there).
        mounts = host.run(["readlink", "/proc/self/ns/mnt"])
        assert mounts.stdout.strip() == os.readlink("/proc/self/ns/mnt"), mounts
        assert host.run(["readlink", "/proc/self/ns/net"]).stdout.strip() != os.readlink("/proc/self/ns/net")
        # ip_default_ttl is per network namespace: set inside, the host's own stays as it was.
        own = Path("/proc/sys/net/ipv4/ip_default_ttl").read_text().strip()
        value = "77" if own != "77" else "78"
        host.sysctl("net.ipv4.ip_default_ttl", value)
        ttl = host.run(["cat", "/proc/sys/net/ipv4/ip_default_ttl"])
        assert ttl.stdout.strip() == value, ttl
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
