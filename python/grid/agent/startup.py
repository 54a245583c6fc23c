"""What ``grid agent`` checks before it starts anything: a configuration that cannot work
is refused at once, with one line saying what to fix, instead of an agent that runs
without SWIM and says so only in ``/healthz`` and ``/status``.

Checked, in this order: the resource directory (at least one GridNetwork); every
``NETWORK=`` in the options names a GridNetwork; this site is a GridSite of each network
it joins; the ``--bind``, ``--advertise``, ``--http`` and ``--egress-listen`` addresses
parse (a wildcard ``--bind`` needs ``--advertise``); each network has a SWIM key file the
agent can read (no key, no SWIM: there is no keyless mode); ``tls.crt`` and ``tls.key``
exist, are usable and are accepted by a SWIM node of this site in each network (they name
the site, and the CA or the GridSite's pin vouches for them); the state directory can be
written; each SWIM UDP port, and the HTTP and egress TCP ports, can be bound right now.

Ports are probed by binding a socket and releasing it (the SWIM node binds its own
socket, natively, and cannot take one over). Whatever fails after a good start (a port
taken when the node restarts, a key file rotated to garbage, new TLS files the node
refuses) keeps the agent up and shows in ``/healthz``, ``/status`` and the conditions.

Nothing here replaces the agent's own checks: a program that builds an
:class:`~grid.agent.Agent` directly keeps its tolerant start (a missing key file is
reported and SWIM starts when one appears).
"""

from __future__ import annotations

import errno
import ipaddress
import socket
import tempfile
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from grid.agent.agent import read_site_certificate, site_swim_credentials
from grid.agent.keys import read_key_file
from grid.agent.options import DEFAULT_BIND_HOST, AgentOptions
from grid.agent.probes import SiteTls
from grid.errors import AgentConfigError, ConfigError, ResourceError
from grid.membership import parse_address
from grid.models.network import GridNetwork
from grid.models.resources import LoadedResources, load_resources_from_dir
from grid.runtime.credentials import swim_pins
from grid.suggest import listing, unknown_name

NEW_KEY_HINT = "head -c 32 /dev/urandom > swim.key, the same file at every site"
READ_LIMIT_S = 35.0
"""How long the resource directory may take to read before the start is refused (the
agent's own read gets as long)."""


@dataclass(frozen=True, slots=True)
class StartupReport:
    """What the checks found: this site's name in each network it joins, and warnings
    worth a log line at start (nothing in them stops the agent)."""

    sites: Mapping[str, str]
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class _Bind:
    network: str
    text: str
    """As given, or the default ``127.0.0.1:<swim.port>``."""
    address: str
    """As :func:`~grid.membership.parse_address` reads it (``IP:port``, ``[IPv6]:port``)."""
    given: bool


def check_startup(options: AgentOptions) -> StartupReport:
    """Check ``options`` against the resources and the machine before anything starts.
    Raises :class:`~grid.errors.AgentConfigError` with one line naming the first problem
    and what to do about it."""
    resources = _load(options.resources)
    networks = {network.metadata.name: network for network in resources.networks}
    _check_network_names(options, networks)
    sites = _sites(options, resources, networks)
    binds = _binds(options, networks, sites)
    http = _tcp_address(options.http, "--http")
    egress = _tcp_address(options.egress_listen, "--egress-listen")
    for network in sorted(sites):
        _check_key_files(options, network)
    _check_tls(options, resources, sites)
    _check_state_dir(options.state_dir)
    for bind in binds:
        _probe_udp(bind)
    for option, address in (("--http", http), ("--egress-listen", egress)):
        if address is not None:
            _probe_tcp(option, *address)
    warnings = tuple(
        f"GridNetwork {name} lists no gatewayRefs: no overlay will be written for it"
        for name in sorted(sites)
        if not networks[name].spec.gateway_refs
    )
    return StartupReport(sites, warnings)


# -- resources, networks and sites ----------------------------------------------------------


def _load(directory: Path) -> LoadedResources:
    """The resources in ``directory``, read in a daemon thread that is abandoned after
    :data:`READ_LIMIT_S` (a file system that does not answer must not hang the start)."""
    outcome: list[LoadedResources | BaseException] = []

    def read() -> None:
        try:
            outcome.append(load_resources_from_dir(directory))
        except BaseException as error:  # handed to the main thread
            outcome.append(error)

    reader = threading.Thread(target=read, name="grid-startup-resources", daemon=True)
    reader.start()
    reader.join(READ_LIMIT_S)
    if not outcome:
        raise AgentConfigError(
            f"reading the resource directory {directory} did not finish within "
            f"{READ_LIMIT_S:g} s (a file system that does not answer?)"
        )
    resources = outcome[0]
    if isinstance(resources, ConfigError):
        raise AgentConfigError(str(resources)) from None
    if isinstance(resources, BaseException):
        raise resources
    if not resources.networks:
        errors = resources.errors
        problem = _invalid(errors, "GridNetwork") or (errors[0] if errors else None)
        if problem is not None:
            more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
            raise AgentConfigError(f"no valid GridNetwork in {directory}: {problem}{more}")
        raise AgentConfigError(f"no GridNetwork in {directory}")
    return resources


def _invalid(
    errors: Iterable[ResourceError], kind: str, name: str | None = None
) -> ResourceError | None:
    """The first load error of a ``kind`` resource (named ``name``, when given)."""
    return next(
        (e for e in errors if e.kind == kind and (name is None or e.name == name)),
        None,
    )


def _check_network_names(options: AgentOptions, networks: Mapping[str, GridNetwork]) -> None:
    """A ``NETWORK=`` that names no GridNetwork is a typo: it would be ignored."""
    given: list[tuple[str, Iterable[str | None]]] = [
        ("--site", options.site.by_network),
        ("--bind", options.bind.by_network),
        ("--advertise", options.advertise.by_network),
        ("--key-file", options.key_files),
    ]
    for option, names in given:
        for name in sorted(n for n in names if n is not None):
            if name not in networks:
                raise AgentConfigError(
                    unknown_name(
                        f"{option} {name}=...: there is no GridNetwork {name!r} in "
                        f"{options.resources}",
                        name,
                        networks,
                        "GridNetworks",
                    )
                )


def _sites(
    options: AgentOptions, resources: LoadedResources, networks: Mapping[str, GridNetwork]
) -> dict[str, str]:
    """This site's name in each network it will join, as the agent picks it: as given
    (which must be a GridSite of the network), else the network's only GridSite. A network
    whose site cannot be told is refused if it is the first one (the agent's own rule);
    the agent reports the others and does not join them."""
    first = min(networks)
    all_sites = {entry.metadata.name for entry in resources.sites}
    chosen: dict[str, str] = {}
    for network in sorted(networks):
        names = sorted(
            s.metadata.name for s in resources.sites if s.spec.grid_network_ref == network
        )
        given = options.site.get(network)
        option = f"--site {network}=" if network in options.site.by_network else "--site "
        if given is not None:
            if given in names:
                chosen[network] = given
                continue
            invalid = _invalid(resources.errors, "GridSite", given)
            if invalid is not None:
                raise AgentConfigError(f"the GridSite of {option}{given} is invalid: {invalid}")
            if given in all_sites:
                raise AgentConfigError(
                    f"{option}{given} is a GridSite of another network, not of GridNetwork "
                    f"{network!r} (its GridSites: {listing(names)}): give --site {network}=NAME"
                )
            raise AgentConfigError(
                unknown_name(
                    f"{option}{given} is not a GridSite of GridNetwork {network!r} in "
                    f"{options.resources}",
                    given,
                    names or all_sites,
                    "its GridSites" if names else "GridSites",
                )
            )
        if len(names) == 1:
            chosen[network] = names[0]
        elif network == first:
            where = f"GridNetwork {network!r} in {options.resources}"
            if not names:
                raise AgentConfigError(
                    f"no GridSite of {where}: add this site's GridSite "
                    f"(spec.gridNetworkRef: {network})"
                )
            raise AgentConfigError(
                f"{len(names)} GridSites of {where} ({listing(names)}): "
                f"give --site [{network}=]NAME"
            )
    return chosen


# -- addresses and ports --------------------------------------------------------------------


def _binds(
    options: AgentOptions, networks: Mapping[str, GridNetwork], sites: Mapping[str, str]
) -> list[_Bind]:
    binds: list[_Bind] = []
    taken: dict[str, str] = {}
    for network in sorted(sites):
        given = options.bind.get(network)
        text = given or f"{DEFAULT_BIND_HOST}:{networks[network].spec.swim.port}"
        option = f"--bind {network}=" if network in options.bind.by_network else "--bind "
        try:
            address = parse_address(text, f"{option.strip()} address", allow_port_zero=True)
        except ConfigError as error:
            raise AgentConfigError(f"{error}") from None
        if not text.endswith(":0") and address in taken:
            raise AgentConfigError(
                f"networks {taken[address]!r} and {network!r} would both bind {text}; "
                "give each its own --bind NETWORK=HOST:PORT"
            )
        taken[address] = network
        advertise = options.advertise.get(network)
        if advertise is not None:
            try:
                parse_address(advertise, "--advertise address")
            except ConfigError as error:
                raise AgentConfigError(str(error)) from None
        elif _host(address).is_unspecified:
            raise AgentConfigError(
                f"{option}{text} is a wildcard address, which peers cannot reach: give "
                f"--advertise [{network}=]HOST:PORT too"
            )
        binds.append(_Bind(network, text, address, given is not None))
    return binds


def _host(address: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    host, _, _ = address.rpartition(":")
    return ipaddress.ip_address(host.strip("[]"))


def _probe_udp(bind: _Bind) -> None:
    """Bind ``bind``'s UDP address and release it at once, as the SWIM node will bind it
    (no address reuse)."""
    port = bind.address.rpartition(":")[2]
    ip = _host(bind.address)
    family = socket.AF_INET6 if ip.version == 6 else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_DGRAM) as probe:
            probe.bind((str(ip), int(port)))
    except OSError as error:
        where = "" if bind.given else f" (GridNetwork {bind.network}'s spec.swim.port)"
        raise AgentConfigError(
            f"cannot bind SWIM (UDP) to {bind.text}{where}: {error.strerror}; "
            f"{_bind_hint(error)} --bind [{bind.network}=]HOST:PORT"
        ) from None


def _bind_hint(error: OSError) -> str:
    """What to do about a port that cannot be bound, by its reason."""
    if error.errno == errno.EADDRINUSE:
        return "stop what holds it or give another"
    if error.errno == errno.EADDRNOTAVAIL:
        return "it is not an address of this machine: give one that is as"
    if error.errno == errno.EACCES:
        return "ports below 1024 need privileges: give another"
    return "give another"


def _tcp_address(text: str | None, option: str) -> tuple[str, str, int] | None:
    """(as given, host, port) of a ``host:port`` TCP listener option."""
    if text is None:
        return None
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit() or int(port) > 65535:
        raise AgentConfigError(f"{option} {text!r} is not host:port (port 0 to 65535)")
    try:
        parse_address(f"{host}:1", f"{option} address")
    except ConfigError as error:
        raise AgentConfigError(str(error)) from None
    return text, host.strip("[]"), int(port)


def _probe_tcp(option: str, text: str, host: str, port: int) -> None:
    """Listen on ``host:port`` and stop at once (with address reuse, as the listeners
    themselves bind)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        family, kind, protocol, _, address = infos[0]
        with socket.socket(family, kind, protocol) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind(address)
            probe.listen()
    except OSError as error:
        reason = error.strerror or str(error)
        raise AgentConfigError(
            f"cannot listen on {option} {text}: {reason}; {_bind_hint(error)} {option}"
        ) from None


# -- keys, certificates, state ----------------------------------------------------------------


def _check_key_files(options: AgentOptions, network: str) -> None:
    paths = options.key_files_for(network)
    if not paths:
        raise AgentConfigError(
            f"network {network}: SWIM needs a key file and none is given: give --key-file "
            f"[{network}=]FILE ({NEW_KEY_HINT})"
        )
    for path in paths:
        try:
            read_key_file(path)
        except ConfigError as error:
            raise AgentConfigError(str(error)) from None


def _check_tls(options: AgentOptions, resources: LoadedResources, sites: Mapping[str, str]) -> None:
    """The checks the agent makes of ``--tls-dir`` at start, and the one its SWIM nodes
    make of the credentials (naming the site, vouched for by the CA or a pin)."""
    directory = options.tls_dir
    if directory is not None and not directory.is_dir():
        raise AgentConfigError(f"--tls-dir {directory} is not a directory")
    try:
        tls = SiteTls.from_dir(directory)
    except ConfigError as error:
        raise AgentConfigError(str(error)) from None
    credentials = site_swim_credentials(tls, directory)
    read_site_certificate(tls)
    try:
        tls.prober()
    except ConfigError as error:
        raise AgentConfigError(f"{directory}: {error}") from None
    pinned: dict[str, dict[str, tuple[str, ...]]] = {}
    for resource in resources.sites:
        if resource.spec.trust.pins:
            network_pins = pinned.setdefault(resource.spec.grid_network_ref, {})
            network_pins[resource.metadata.name] = resource.spec.trust.pins
    for network, site in sorted(sites.items()):
        try:
            pins = swim_pins(pinned.get(network, {}))
        except ConfigError as error:
            raise AgentConfigError(f"network {network}: {error}") from None
        try:
            replace(credentials, pins=pins).check(site)
        except ConfigError as error:
            raise AgentConfigError(f"network {network}: SWIM cannot start: {error}") from None


def _check_state_dir(directory: Path) -> None:
    if directory.exists() and not directory.is_dir():
        raise AgentConfigError(f"--state-dir {directory} is not a directory")
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=directory, prefix=".grid-startup-"):
            pass
    except OSError as error:
        raise AgentConfigError(
            f"cannot write to the state directory {directory}: {error.strerror} (--state-dir)"
        ) from None
