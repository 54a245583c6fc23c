"""A small lab network made of Linux network namespaces, for the chaos suite.

One namespace per site, each with loopback up and one veth (``eth0``) carrying a private
address (``10.77.0.0/24`` by default); the other ends of the veths sit in a bridge
namespace of their own, so nothing is added to the host's namespace. Every address a test
talks to lives inside these namespaces.

- **Partitions** (symmetric, group against group): each group's ports are moved to a bridge
  of their own, so frames cannot cross between groups. Healing moves every port back to the
  first bridge.
- **One-way loss**: every frame a site sends is dropped (``mute``: a qdisc on its ``eth0``),
  or every frame sent to it (``deafen``: a qdisc on its bridge port). ``tc qdisc ... netem
  loss 100%`` where the kernel has netem; otherwise ``pfifo limit 0`` (a queue that holds
  nothing: every frame is dropped and counted), which has the same effect. Neighbour entries
  are static, so a muted site's silence does not also starve its peers of ARP answers. When
  neither qdisc can be installed, :attr:`Lab.one_way_unsupported` says why.

Names start with ``gchaos-<pid>-<start time>-``: the pid and start time of the process that
made them. :func:`cleanup_stale` removes the namespaces (and kills the processes inside) of
runs whose process is gone, so a run that crashed leaves nothing behind for long.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

PREFIX = "gchaos"
SUBNET = "10.77.0"
SITE_DEVICE = "eth0"
_HOST_OFFSET = 11
_DROPPING_QDISCS = {"netem": ("netem", "loss", "100%"), "pfifo": ("pfifo", "limit", "0")}
"""Qdiscs that drop every frame of a device, in order of preference."""


class NetnsError(RuntimeError):
    """An ``ip`` or ``tc`` command failed."""


def run(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run a command (``ip``, ``tc``) and return what it printed; raise :class:`NetnsError`
    with its error output when it fails and ``check``."""
    done = subprocess.run(list(args), capture_output=True, text=True, timeout=30, check=False)
    if check and done.returncode != 0:
        raise NetnsError(f"{' '.join(args)}: exit {done.returncode}: {done.stderr.strip()}")
    return done


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return run("ip", *args, check=check)


def tc_in(namespace: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """``tc`` inside ``namespace``."""
    return ip("netns", "exec", namespace, "tc", *args, check=check)


def _start_time(pid: int) -> str | None:
    """A process's start time (clock ticks since boot), or None when it does not exist."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            text = stat.read()
    except OSError:
        return None
    # The command name is in parentheses and may hold spaces: split after the last ')'.
    return text.rsplit(")", 1)[1].split()[19]


def run_prefix(pid: int | None = None) -> str:
    """The name prefix of the namespaces made by process ``pid`` (default: this one)."""
    pid = os.getpid() if pid is None else pid
    return f"{PREFIX}-{pid}-{_start_time(pid)}"


def list_namespaces() -> list[str]:
    """Every named network namespace."""
    output = ip("netns", "list").stdout
    return [line.split()[0] for line in output.splitlines() if line.strip()]


def namespace_pids(namespace: str) -> list[int]:
    """The processes running in ``namespace``."""
    done = ip("netns", "pids", namespace, check=False)
    return [int(word) for word in done.stdout.split() if word.isdigit()]


def remove_namespace(namespace: str) -> None:
    """Kill what runs in ``namespace`` (processes this suite started there), then delete
    it. Deleting a namespace also deletes the veth ends inside it."""
    for pid in namespace_pids(namespace):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    ip("netns", "del", namespace, check=False)


def cleanup_stale() -> list[str]:
    """Remove the namespaces of earlier runs whose process is gone (a run that crashed or
    was killed); the names removed."""
    removed = []
    for namespace in list_namespaces():
        parts = namespace.split("-")
        if len(parts) < 4 or parts[0] != PREFIX or not parts[1].isdigit():
            continue
        pid, started = int(parts[1]), parts[2]
        if _start_time(pid) == started:
            continue  # its run is still going
        remove_namespace(namespace)
        removed.append(namespace)
    return removed


def unavailable_reason() -> str | None:
    """Why namespaces cannot be made here (None: they can): not root, no ``ip``, or the
    kernel refuses. Makes and removes a probe namespace."""
    if os.geteuid() != 0:
        return "network namespaces need root (ip netns add)"
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return f"`{tool}` is not installed (iproute2)"
    probe = f"{run_prefix()}-probe"
    try:
        ip("netns", "add", probe)
        ip("-n", probe, "link", "set", "lo", "up")
        ip("-n", probe, "link", "add", "name", "probe0", "type", "veth", "peer", "name", "probe1")
    except NetnsError as error:
        return f"cannot set up a network namespace: {error}"
    finally:
        ip("netns", "del", probe, check=False)
    return None


@dataclass
class Lab:
    """Namespaces for ``sites`` on one bridge. :meth:`create`, then :meth:`destroy` (always:
    it is safe after a partial create)."""

    sites: Sequence[str]
    prefix: str = field(default_factory=run_prefix)
    subnet: str = SUBNET
    one_way_method: str | None = None
    """``netem`` or ``pfifo`` once :meth:`create` found which drops frames here."""
    one_way_unsupported: str | None = None
    """Why one-way loss cannot be made here (None: it can)."""
    _bridges: int = 1
    _groups: tuple[frozenset[str], ...] = ()
    _muted: set[str] = field(default_factory=set)
    _deaf: set[str] = field(default_factory=set)
    _made: list[str] = field(default_factory=list)

    @property
    def bridge_namespace(self) -> str:
        return f"{self.prefix}-br"

    def namespace(self, site: str) -> str:
        return f"{self.prefix}-s{self.sites.index(site)}"

    def address(self, site: str) -> str:
        """The site's IPv4 address (inside its namespace)."""
        return f"{self.subnet}.{_HOST_OFFSET + self.sites.index(site)}"

    def port(self, site: str) -> str:
        """The site's veth end in the bridge namespace."""
        return f"p{self.sites.index(site)}"

    def exec_prefix(self, site: str) -> list[str]:
        """What runs a command inside the site's namespace."""
        return ["ip", "netns", "exec", self.namespace(site)]

    # -- building and tearing down ----------------------------------------------------------

    def create(self) -> None:
        bridge = self.bridge_namespace
        self._add_namespace(bridge)
        self._add_bridge(0)
        macs: dict[str, str] = {}
        for site in self.sites:
            namespace = self.namespace(site)
            self._add_namespace(namespace)
            ip("-n", namespace, "link", "set", "lo", "up")
            port = self.port(site)
            veth = ("link", "add", SITE_DEVICE, "netns", namespace, "type", "veth")
            ip(*veth, "peer", "name", port, "netns", bridge)
            ip("-n", bridge, "link", "set", port, "master", "br0")
            ip("-n", bridge, "link", "set", port, "up")
            address = f"{self.address(site)}/24"
            ip("-n", namespace, "addr", "add", address, "dev", SITE_DEVICE)
            ip("-n", namespace, "link", "set", SITE_DEVICE, "up")
            shown = json.loads(ip("-n", namespace, "-j", "link", "show", SITE_DEVICE).stdout)
            macs[site] = shown[0]["address"]
        for site in self.sites:
            for peer in self.sites:
                if peer != site:
                    entry = ("neigh", "replace", self.address(peer), "lladdr", macs[peer])
                    ip("-n", self.namespace(site), *entry, "dev", SITE_DEVICE, "nud", "permanent")
        self._groups = (frozenset(self.sites),)
        self._detect_one_way()

    def _add_namespace(self, name: str) -> None:
        ip("netns", "add", name)
        self._made.append(name)

    def _add_bridge(self, index: int) -> None:
        name = f"br{index}"
        ip("-n", self.bridge_namespace, "link", "add", name, "type", "bridge")
        ip("-n", self.bridge_namespace, "link", "set", name, "up")

    def _detect_one_way(self) -> None:
        namespace = self.namespace(self.sites[0])
        reasons = []
        for method, qdisc in _DROPPING_QDISCS.items():
            done = tc_in(
                namespace, "qdisc", "replace", "dev", SITE_DEVICE, "root", *qdisc, check=False
            )
            if done.returncode == 0:
                tc_in(namespace, "qdisc", "del", "dev", SITE_DEVICE, "root")
                self.one_way_method = method
                return
            reasons.append(f"{' '.join(qdisc)}: {done.stderr.strip() or done.returncode}")
        tried = "; ".join(reasons)
        self.one_way_unsupported = f"no qdisc can drop a veth's frames here ({tried})"

    def destroy(self) -> None:
        """Kill every process in the lab's namespaces and delete them."""
        for name in reversed(self._made):
            remove_namespace(name)
        self._made.clear()

    # -- faults ---------------------------------------------------------------------------

    @property
    def groups(self) -> tuple[frozenset[str], ...]:
        """The current partition: sites that can reach each other (one group when whole)."""
        return self._groups

    @property
    def muted(self) -> frozenset[str]:
        return frozenset(self._muted)

    @property
    def deaf(self) -> frozenset[str]:
        return frozenset(self._deaf)

    def partition(self, groups: Iterable[Iterable[str]]) -> None:
        """Split the network: each group on a bridge of its own (sites in no group stay with
        the first one)."""
        listed = [frozenset(group) for group in groups]
        rest = frozenset(self.sites) - frozenset().union(*listed)
        if rest:
            listed[0] |= rest
        while self._bridges < len(listed):
            self._add_bridge(self._bridges)
            self._bridges += 1
        for index, group in enumerate(listed):
            for site in sorted(group):
                port = self.port(site)
                ip("-n", self.bridge_namespace, "link", "set", port, "master", f"br{index}")
        self._groups = tuple(listed)

    def mute(self, site: str) -> None:
        """Drop every frame ``site`` sends (it still hears everyone)."""
        self._drop(self.namespace(site), SITE_DEVICE)
        self._muted.add(site)

    def deafen(self, site: str) -> None:
        """Drop every frame sent to ``site`` (everyone still hears it)."""
        self._drop(self.bridge_namespace, self.port(site))
        self._deaf.add(site)

    def unmute(self, site: str) -> None:
        tc_in(self.namespace(site), "qdisc", "del", "dev", SITE_DEVICE, "root", check=False)
        self._muted.discard(site)

    def undeafen(self, site: str) -> None:
        tc_in(self.bridge_namespace, "qdisc", "del", "dev", self.port(site), "root", check=False)
        self._deaf.discard(site)

    def _drop(self, namespace: str, device: str) -> None:
        if self.one_way_method is None:
            raise NetnsError(self.one_way_unsupported or "one-way loss is not available")
        qdisc = _DROPPING_QDISCS[self.one_way_method]
        tc_in(namespace, "qdisc", "replace", "dev", device, "root", *qdisc)

    def heal(self) -> None:
        """One network again: every port on the first bridge, no frame dropped."""
        for site in sorted(self._muted):
            self.unmute(site)
        for site in sorted(self._deaf):
            self.undeafen(site)
        if len(self._groups) > 1:
            self.partition([self.sites])

    def reachable(self, a: str, b: str) -> bool:
        """Whether frames get from ``a`` to ``b`` right now."""
        same = any(a in group and b in group for group in self._groups)
        return same and a not in self._muted and b not in self._deaf
