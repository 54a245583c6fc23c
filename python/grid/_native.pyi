"""Type stubs for the Rust extension ``grid._native``."""

from collections.abc import Mapping, Sequence
from typing import Any, TypeAlias, final

__all__ = [
    "FRAME_OVERHEAD",
    "KEY_LEN",
    "LANES",
    "MAX_FRAME_LEN",
    "MAX_ITEM_LEN",
    "MAX_JSON_DEPTH",
    "MAX_KEY_LEN",
    "PROTOCOLS",
    "Keyring",
    "ObjectForms",
    "Simulation",
    "SwimNode",
    "__version__",
    "canonical_digest",
    "canonical_json",
    "check_site_credentials",
    "compact_json",
    "compact_json_and_digest",
    "fnv1a_32",
    "run_state_scenario",
    "score_breakdowns",
    "stable_id",
]

__version__: str
FRAME_OVERHEAD: int
KEY_LEN: int
MAX_FRAME_LEN: int
MAX_ITEM_LEN: int
MAX_KEY_LEN: int
LANES: list[str]
MAX_JSON_DEPTH: int
# The SWIM protocol versions this build speaks: (lowest, highest).
PROTOCOLS: tuple[int, int]

# --- JSON (rust/grid-py/src/canonical.rs) ----------------------------------------------
# Values are dict (str keys), list, str, int, float, bool and None, subclasses included;
# anything else, NaN, infinities and nesting deeper than MAX_JSON_DEPTH raise
# grid.errors.CanonicalJsonError, naming the problem and its place ("... at $.a[2].b").

def canonical_json(value: object) -> bytes:
    """RFC 8785 canonical JSON; integers beyond ±(2**53 - 1) are refused."""

def canonical_digest(value: object) -> str:
    """Lowercase hex SHA-256 of ``canonical_json(value)``."""

def compact_json(value: object) -> bytes:
    """``json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()``."""

def compact_json_and_digest(
    document: object, holder: str, content: Sequence[str], digest_placeholder: object
) -> tuple[bytes, str]:
    """``compact_json(document)`` with the digest written where ``digest_placeholder`` (by
    identity) stands, and ``canonical_digest({name: document[holder][name] for name in
    content})``, from one walk."""

@final
class ObjectForms:
    """An object (a dict) written once both ways, compact and canonical, but for one
    integer member, ``index_member``: a list element that is an ObjectForms is written as
    its object with that member set to the element's index, last in document order. Raises
    CanonicalJsonError as the functions above do, and when the object already has
    ``index_member``; an ObjectForms anywhere but in a list is refused where written."""

    def __new__(cls, value: Mapping[str, object], index_member: str) -> ObjectForms: ...

# --- Score breakdowns (rust/grid-py/src/breakdown.rs) ----------------------------------

def score_breakdowns(
    signals: Sequence[Sequence[float]],
    weights: Sequence[Sequence[float]],
    decimals: int,
    names: tuple[str, ...],
) -> list[dict[str, float]]:
    """Per row: ``round(signal * weight, decimals)`` under each of ``names`` but the last,
    and the rounded sum of those under the last, as ``grid.scoring.signals.score_breakdown``
    computes them."""

# --- stable_id (rust/grid-py/src/fingerprint.rs) ----------------------------------------

def fnv1a_32(data: bytes) -> int: ...
def stable_id(kind: str, name: str, site: str, cluster: str) -> str: ...

# Events: (kind, site, address, generation) for member_up / member_down / member_left;
# ("member_renamed", site, address, generation, previous_generation);
# ("name_conflict", site, address, generation, yielded);
# ("item", origin, lane, key, version, payload).
_EventTuple: TypeAlias = (
    tuple[str, str, str, int]
    | tuple[str, str, str, int, int]
    | tuple[str, str, str, int, bool]
    | tuple[str, str, str, str, int, bytes]
    | tuple[str, str, str, int, tuple[int, int], tuple[int, int]]
)

@final
class Keyring:
    """A SWIM keyring: the primary key seals, every key opens."""

    def __new__(cls, primary: bytes, others: Sequence[bytes] = ...) -> Keyring: ...
    def install(self, key: bytes) -> str: ...
    def use_key(self, key: bytes) -> None: ...
    def remove(self, key: bytes) -> None: ...
    def key_ids(self) -> list[str]: ...
    def seal(self, plaintext: bytes) -> bytes: ...
    def open(self, frame: bytes) -> bytes: ...

def check_site_credentials(
    site: str,
    certificate_chain: Sequence[bytes],
    private_key: bytes,
    trust_anchors: Sequence[bytes] = ...,
    pins: Mapping[str, Sequence[bytes]] = ...,
    revoked: Sequence[bytes] = ...,
) -> None: ...

@final
class SwimNode:
    """A SWIM node: foca over AES-256-GCM UDP on its own thread."""

    def __new__(
        cls,
        bind: str,
        site: str,
        keys: Sequence[bytes],
        *,
        certificate_chain: Sequence[bytes],
        private_key: bytes,
        trust_anchors: Sequence[bytes] = ...,
        pins: Mapping[str, Sequence[bytes]] = ...,
        revoked: Sequence[bytes] = ...,
        advertise: str | None = None,
        probe_interval: float = 5.0,
        suspicion_timeout: float = 10.0,
        gossip_nodes: int = 3,
        push_pull_interval: float = 30.0,
        event_capacity: int = 4096,
        generation: int | None = None,
        item_capacity: int = ...,  # grid-core driver::DEFAULT_ITEM_CAPACITY (65,536)
    ) -> SwimNode: ...
    def start(self) -> None: ...
    def set_pins(self, pins: Mapping[str, Sequence[bytes]]) -> None: ...
    def renew(
        self,
        certificate_chain: Sequence[bytes],
        private_key: bytes,
        trust_anchors: Sequence[bytes] = ...,
        pins: Mapping[str, Sequence[bytes]] = ...,
        revoked: Sequence[bytes] = ...,
    ) -> None: ...
    def forget(self, site: str, items: Sequence[tuple[str, str]]) -> None: ...
    def join(self, seeds: Sequence[str]) -> None: ...
    def leave(self) -> None: ...
    def close(self) -> None: ...
    def members(self) -> list[tuple[str, str, str, int]]: ...
    def protocols(self) -> list[tuple[str, str, int, int]]: ...
    def publish(self, lane_name: str, key: str, version: int, payload: bytes) -> bool: ...
    def publish_many(self, items: Sequence[tuple[str, str, int, bytes]]) -> list[bool | str]: ...
    def stats(self) -> dict[str, int]: ...
    def install_key(self, key: bytes) -> str: ...
    def use_key(self, key: bytes) -> None: ...
    def remove_key(self, key: bytes) -> None: ...
    def key_ids(self) -> list[str]: ...
    def next_event(self, timeout: float | None = None) -> _EventTuple | None: ...
    def poll_events(self, max_events: int = 1024) -> list[_EventTuple]: ...
    def event_fd(self) -> int: ...
    def clear_event_fd(self) -> None: ...
    @property
    def running(self) -> bool: ...
    @property
    def address(self) -> str: ...
    @property
    def bound_address(self) -> str: ...
    @property
    def site(self) -> str: ...
    @property
    def generation(self) -> int: ...

# --- Simulation (rust/grid-py/src/sim.rs) -----------------------------------------------

@final
class Simulation:
    """N SWIM drivers on one virtual clock over an in-memory network."""

    def __new__(
        cls,
        nodes: int,
        seed: int = 0,
        *,
        probe_interval: float = 5.0,
        suspicion_timeout: float = 10.0,
        gossip_nodes: int = 3,
        push_pull_interval: float = 30.0,
        delay: float = 0.005,
        jitter: float = 0.005,
        jitter_kind: str = "exponential",
        loss: float = 0.0,
        converged: bool = True,
        threads: int | None = None,
        parallel_work: int | None = None,
    ) -> Simulation: ...
    @property
    def now(self) -> float: ...
    @property
    def nodes(self) -> int: ...
    @property
    def pending_bootstrap(self) -> int: ...
    def settings(self) -> dict[str, float | int | str]: ...
    def bootstrap(self, max_nodes: int | None = None) -> int: ...
    def add_node(self) -> int: ...
    def join(self, node: int, seeds: Sequence[int]) -> None: ...
    def crash(self, node: int) -> None: ...
    def restart(self, node: int, seeds: Sequence[int]) -> None: ...
    def leave(self, node: int) -> None: ...
    def set_slow(self, node: int, delay: float) -> None: ...
    def partition(self, groups: Sequence[Sequence[int]]) -> None: ...
    def heal(self) -> None: ...
    def set_network(
        self,
        *,
        delay: float | None = None,
        jitter: float | None = None,
        jitter_kind: str | None = None,
        loss: float | None = None,
    ) -> None: ...
    def set_link_loss(self, a: int, b: int, loss: float) -> None: ...
    def set_recording(self, on: bool) -> None: ...
    def set_message_log(self, on: bool, limit: int = 100_000) -> None: ...
    def messages(
        self, since: float = 0.0, until: float | None = None
    ) -> list[
        tuple[
            float,
            int,
            int | None,
            str,
            str,
            float | None,
            int | None,
            list[tuple[int, int, str]],
        ]
    ]: ...
    def messages_dropped(self) -> int: ...
    def refutations(self, since: float = 0.0) -> list[tuple[float, int, int]]: ...
    def records(self, observer: int) -> list[tuple[float, int, str, bool, bool]]: ...
    def member_view(self, node: int) -> list[tuple[int, int, str]]: ...
    def run_until(self, t: float) -> None: ...
    def run_until_learned(
        self, subject: int, change: str, since: float, deadline: float
    ) -> float | None: ...
    def run_until_converged(self, deadline: float, every: float = 0.1) -> float | None: ...
    def is_converged(self) -> bool: ...
    def status(self, node: int) -> str: ...
    def generation(self, node: int) -> int | None: ...
    def members_of(self, node: int) -> int: ...
    def learned_times(self, subject: int, change: str, since: float) -> tuple[list[float], int]: ...
    def learned_by(self, observer: int, since: float) -> list[float]: ...
    def suspicions(self, since: float = 0.0) -> list[tuple[float, int, int, int, bool]]: ...
    def declarations(self, since: float = 0.0) -> list[tuple[float, int, int, bool]]: ...
    def traffic(self) -> dict[str, list[int]]: ...
    def stats(self) -> dict[str, int]: ...
    def trace_hash(self) -> int: ...

# --- The state-plane scenario (rust/grid-py/src/sim_state.rs) -----------------------------

def run_state_scenario(
    sites: int,
    providers: int,
    seed: int = 1,
    *,
    probe_interval: float = 5.0,
    suspicion_timeout: float = 10.0,
    gossip_nodes: int = 3,
    push_pull_interval: float = 30.0,
    delay: float = 0.005,
    jitter: float = 0.005,
    jitter_kind: str = "exponential",
    loss: float = 0.0,
    scrape_interval: float = 15.0,
    window: float = 60.0,
    start_rate: float = 25.0,
    start: str = "growing",
    changes: int = 20,
    joins: int = 1,
    patience: float = 600.0,
    threads: int = 1,
) -> dict[str, Any]:
    """Runs the state-plane scenario at ``sites`` x ``providers``; its report."""
