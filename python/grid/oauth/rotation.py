"""Which of a provider's minted tokens the gateway is told to use, so that a token rotated
on disk never leaves the gateway with a file it cannot read or a token that lapsed. Pure:
every answer is computed from the tokens written so far and ``now``.

The Praxis AI gateway reads a token file once, when it builds its filter pipeline (at start,
and at each reload of its configuration); replacing the file's content changes nothing
until the next build. So each minted token is written under a key of its own,
``token-<issued-at>`` (a Secret key for the operator, a file for the agent), and the
gateway is moved to it in two steps, each after the time the previous change takes to reach
the gateway's files (:class:`Settle`):

1. ``declare_after`` the write (the kubelet's sync of the Secret volume; nothing for the
   agent's local files), the gateway configuration lists the new key beside the one in use
   (:attr:`TokenKeys.declared`): the gateway rebuilds its pipeline and reads both files;
2. ``reference_after`` that (the sync of the configuration's ConfigMap; for the agent, the
   gateway's own reload delay), the overlay's credential reference names the new key
   (:attr:`TokenKeys.reference`), which the pipeline in place already holds; the
   configuration then lists it alone.

The previous token stays where it was written until the next one is minted (a gateway still
on the configuration before stays able to rebuild), and older ones are removed then. When
the token in use would lapse before a change could reach the gateway (a refresh that failed
for long, tokens too short-lived for the settle times), the newest valid token is named at
once: a request the gateway refuses for a key it does not hold yet is better than one sent
with a lapsed token.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from grid.models.oauth2 import MINTED_TOKEN_KEY

TOKEN_KEY_PREFIX = "token-"
_KEY_TIME_FORMAT = "%Y%m%dT%H%M%SZ"
_BEFORE_ROTATION = datetime(1970, 1, 1, tzinfo=UTC)
"""When a token written under the plain key ``token`` (where tokens went before they had a
key each) counts as issued: before any other."""


@dataclass(frozen=True, slots=True)
class Settle:
    """How long each step of a rotation waits for the previous change to reach the
    gateway's files."""

    declare_after: timedelta
    """From writing a token to listing its key in the gateway configuration."""
    reference_after: timedelta
    """From listing it to naming it in the overlay's credential reference."""


OPERATOR_SETTLE = Settle(timedelta(minutes=2), timedelta(minutes=2))
"""The operator's: the kubelet updates a mounted Secret or ConfigMap volume within its sync
period and cache time (about a minute each by default), so two minutes for each."""
AGENT_SETTLE = Settle(timedelta(0), timedelta(seconds=2))
"""The agent's: its token files are local, so the configuration lists a new token at once;
the overlay names it after the gateway has had time to rebuild (its configuration watcher
waits 0.5 s for writes to settle, then builds)."""


def token_key(issued_at: datetime) -> str:
    """The key (file name) a token issued at ``issued_at`` is written under:
    ``token-YYYYmmddTHHMMSSZ`` (UTC)."""
    return TOKEN_KEY_PREFIX + issued_at.astimezone(UTC).strftime(_KEY_TIME_FORMAT)


def key_issued_at(key: str) -> datetime | None:
    """When the token under ``key`` was issued, from the key; None for a key that holds no
    minted token. The plain key ``token`` counts as the oldest."""
    if key == MINTED_TOKEN_KEY:
        return _BEFORE_ROTATION
    if not key.startswith(TOKEN_KEY_PREFIX):
        return None
    try:
        moment = datetime.strptime(key.removeprefix(TOKEN_KEY_PREFIX), _KEY_TIME_FORMAT)
    except ValueError:
        return None
    return moment.replace(tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class IssuedKey:
    """A token written where the gateway reads it, known by its key alone."""

    key: str
    issued_at: datetime
    expires_at: datetime | None = None
    """None for a token found there (written before this minter started): its life is not
    known, and it counts as valid and as settled."""
    header: str | None = None
    """The header a Custom provider's value under this key goes in, when its Secret names
    it (None for a token, and for a value found there)."""

    @property
    def found(self) -> bool:
        return self.expires_at is None

    def lasts_past(self, moment: datetime) -> bool:
        return self.expires_at is None or self.expires_at > moment


def found_keys(keys: Iterable[str]) -> tuple[IssuedKey, ...]:
    """The minted tokens among ``keys`` (a Secret's keys, a directory's files), oldest
    first."""
    found = []
    for key in keys:
        issued_at = key_issued_at(key)
        if issued_at is not None:
            found.append(IssuedKey(key, issued_at))
    return _ordered(found)


@dataclass(frozen=True, slots=True)
class TokenKeys:
    """What the gateway is told about a provider's minted tokens."""

    reference: str | None
    """The key the overlay's credential reference names; None while no token has reached
    the gateway (the first one is still settling): the provider is not offered then."""
    declared: tuple[str, ...]
    """The keys the gateway configuration lists (``reference`` among them), in order."""
    headers: tuple[tuple[str, str], ...] = ()
    """(key, header) for each listed key whose value goes in a header its Secret names."""

    def header_of(self, key: str | None) -> str | None:
        """The header the value under ``key`` goes in when its Secret names it; for no key
        (none named yet), the newest listed one's."""
        named = dict(self.headers)
        if key is None:
            return named.get(self.declared[-1]) if self.declared else None
        return named.get(key)


def token_keys(issued: Sequence[IssuedKey], now: datetime, settle: Settle) -> TokenKeys | None:
    """The keys to name at ``now`` among the tokens written (None before the first)."""
    if not issued:
        return None
    ordered = _ordered(issued)
    declared = [k for k in ordered if k.found or now >= k.issued_at + settle.declare_after]
    settled = [
        k
        for k in declared
        if k.found or now >= k.issued_at + settle.declare_after + settle.reference_after
    ]
    if not settled:
        # The first token is on its way to the gateway: naming it before its file is
        # there fails the provider's requests (503) and the gateway's rebuild (it cannot
        # read a listed file), so the provider waits, not offered.
        return TokenKeys(
            None, tuple(k.key for k in declared[-1:]), _headers(ordered, declared[-1:])
        )
    # A reference named now reaches the gateway within reference_after: it must last that.
    lasting = now + settle.reference_after
    reference = next((k for k in reversed(settled) if k.lasts_past(lasting)), None)
    if reference is None:
        reference = next((k for k in reversed(ordered) if k.lasts_past(now)), ordered[-1])
    listed = {reference.key}
    if declared:
        listed.add(declared[-1].key)
    named = [k for k in ordered if k.key in listed]
    return TokenKeys(reference.key, tuple(sorted(listed)), _headers(ordered, named))


def _headers(
    ordered: Sequence[IssuedKey], listed: Iterable[IssuedKey]
) -> tuple[tuple[str, str], ...]:
    """(key, header) of the ``listed`` keys whose header is known; a value found written
    (after a restart) is taken to go in the newest known header, the Secret's as last read."""
    newest = next((k.header for k in reversed(ordered) if k.header is not None), None)
    if newest is None:
        return ()
    return tuple((k.key, k.header or newest) for k in listed)


def next_change(issued: Sequence[IssuedKey], now: datetime, settle: Settle) -> datetime | None:
    """The next moment after ``now`` at which :func:`token_keys` may answer differently."""
    moments = []
    for k in issued:
        if k.found:
            continue
        declared_at = k.issued_at + settle.declare_after
        moments += [declared_at, declared_at + settle.reference_after]
        if k.expires_at is not None:
            moments += [k.expires_at - settle.reference_after, k.expires_at]
    return min((moment for moment in moments if moment > now), default=None)


def kept_after(
    issued: Sequence[IssuedKey], new: IssuedKey, in_use: TokenKeys | None
) -> tuple[IssuedKey, ...]:
    """The tokens that stay where they are written once ``new`` is: ``new``, the newest one
    before it, and any the gateway is told about now; the others are removed."""
    before = [k for k in _ordered(issued) if k.key != new.key]
    keep = {new.key}
    if before:
        keep.add(before[-1].key)
    if in_use is not None:
        keep.update(in_use.declared)
    return _ordered([k for k in before if k.key in keep] + [new])


def _ordered(keys: Iterable[IssuedKey]) -> tuple[IssuedKey, ...]:
    return tuple(sorted(keys, key=lambda k: (k.issued_at, k.key)))
