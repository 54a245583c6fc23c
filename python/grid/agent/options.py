"""The agent's settings, as ``grid agent`` takes them or a program builds them."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

from grid.errors import AgentConfigError

DEFAULT_BIND_HOST = "127.0.0.1"
DEFAULT_RELOAD_INTERVAL_S = 2.0
DEFAULT_TICK_S = 1.0
DEFAULT_STATUS_INTERVAL_S = 5.0


@dataclass(frozen=True, slots=True)
class PerNetwork:
    """A value given for every network (``VALUE``) or for one (``NETWORK=VALUE``)."""

    default: str | None = None
    by_network: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))

    @classmethod
    def parse(cls, values: Iterable[str], option: str) -> PerNetwork:
        default: str | None = None
        by_network: dict[str, str] = {}
        for value in values:
            name, equals, rest = value.partition("=")
            if equals and name and "/" not in name and ":" not in name:
                if name in by_network:
                    raise AgentConfigError(f"{option} is given twice for network {name!r}")
                by_network[name] = rest
            elif default is not None:
                raise AgentConfigError(
                    f"{option} is given twice without a network; write NETWORK=VALUE"
                )
            else:
                default = value
        return cls(default, MappingProxyType(by_network))

    def get(self, network: str) -> str | None:
        return self.by_network.get(network, self.default)


@dataclass(frozen=True, slots=True)
class AgentOptions:
    """Everything the agent needs to run one site."""

    resources: Path
    """Directory of GridNetwork, GridSite and InferenceProvider YAML (reloaded on change)."""
    state_dir: Path
    """Where overlays and status files are written."""
    site: PerNetwork = field(default_factory=PerNetwork)
    """This site's name (its GridSite, and its SWIM identity) per network; default the
    network's only GridSite in ``resources``. A site in several networks has a GridSite in
    each, under different names."""
    bind: PerNetwork = field(default_factory=PerNetwork)
    """SWIM UDP ``host:port`` per network; default 127.0.0.1 and the network's swim.port."""
    advertise: PerNetwork = field(default_factory=PerNetwork)
    """What peers use to reach the SWIM node; default the bound address."""
    key_files: Mapping[str | None, tuple[Path, ...]] = field(
        default_factory=lambda: MappingProxyType({})
    )
    """SWIM key files per network (``None``: for every network without its own)."""
    tls_dir: Path | None = None
    """``tls.crt`` and ``tls.key`` of this site (required: they sign its SWIM messages; the
    certificate is advertised, presented by the egress listener and used as client
    certificate by probes) and optionally ``ca.crt`` (the network CA, which vouches for
    peers)."""
    secrets_dir: Path | None = None
    """Mounted Secrets as ``<namespace>/<name>/<key>`` files: the agent checks that a
    provider's credential exists and is not empty, and never reads it, except an Oauth2
    provider's (a client secret, a key) and a Sigv4 provider's (AWS credentials), which it
    mints the provider's tokens from."""
    http: str | None = None
    """``host:port`` of ``/metrics``, ``/healthz`` and ``/status``."""
    egress_listen: str | None = None
    """``host:port`` of a TLS listener presenting this site's certificate (for sites whose
    egress gateway is not running yet, and for the demo)."""
    probe_interval_s: float = 10.0
    reload_interval_s: float = DEFAULT_RELOAD_INTERVAL_S
    tick_s: float = DEFAULT_TICK_S
    """How often the engine is refreshed when nothing wakes it earlier."""
    status_interval_s: float = DEFAULT_STATUS_INTERVAL_S
    """A status file whose phase did not change is rewritten at most this often."""
    push_pull_factor: float = 6.0
    """Full-state syncs every this many probe intervals (30 s at the default 5 s)."""

    def __post_init__(self) -> None:
        for name in ("probe_interval_s", "reload_interval_s", "tick_s", "status_interval_s"):
            value = getattr(self, name)
            if not value > 0:
                raise AgentConfigError(f"{name} must be a positive number of seconds")
        if self.push_pull_factor < 1:
            raise AgentConfigError("push_pull_factor must be at least 1")

    def key_files_for(self, network: str) -> tuple[Path, ...]:
        return self.key_files.get(network) or self.key_files.get(None) or ()


def parse_key_files(values: Iterable[str]) -> Mapping[str | None, tuple[Path, ...]]:
    """``--key-file [NETWORK=]FILE`` values grouped by network (``None``: every network)."""
    grouped: dict[str | None, list[Path]] = {}
    for value in values:
        name, equals, rest = value.partition("=")
        if equals and name and "/" not in name:
            grouped.setdefault(name, []).append(Path(rest))
        else:
            grouped.setdefault(None, []).append(Path(value))
    return MappingProxyType({name: tuple(paths) for name, paths in grouped.items()})
