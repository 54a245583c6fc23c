"""Rendering a Custom provider's header value, the I/O part: the Secret is read (through the
shell's :data:`~grid.runtime.tokens.SecretEntries`: the API for the operator, the mounted
files for the agent), the template filled in (:mod:`grid.oauth.custom`), and the value
written where the gateway reads credentials, as a minted token is: the Secret
``grid-token-<provider>`` (the agent: its directory), one key per value, which the gateway
configuration and the overlay's reference move to in two steps (:mod:`grid.oauth.rotation`).

The Secret is read again every ``recheck_s``; a value is written only when it (or its
header) changed, so an unchanged Secret never makes the gateway rebuild. What was rendered
is compared by a keyed digest (the key drawn per renderer, never shown), so neither the
value nor the template's inputs are kept between attempts. A failed attempt keeps the value
in place: the gateway goes on sending it while ``CredentialsValid`` says what fails."""

from __future__ import annotations

import hashlib
import hmac
import logging
import secrets
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from random import SystemRandom

import aiohttp

from grid.errors import CredentialMaterialError, GridError
from grid.models.phases import CredentialState
from grid.oauth.custom import (
    CustomValueSettings,
    RenderedValue,
    RenderHealth,
    entry_text,
    fill,
    header_from_entry,
    placeholders,
)
from grid.oauth.rotation import AGENT_SETTLE, Settle
from grid.oauth.schedule import FailureKind
from grid.runtime.tokens import KeyWriter, MintingPlan, SecretEntries, TokenSink

AGENT_RECHECK_S = 5.0
"""How often the agent reads a Custom provider's Secret again: local files, cheap to read.
The operator reads through the API at its Secret refresh interval instead."""
NEVER = datetime.max.replace(tzinfo=UTC)
"""When a rendered value lapses: it does not; it is replaced when the Secret changes."""

Render = Callable[[], Awaitable[RenderedValue]]
"""Reads the Secret and renders the value; raises :class:`CredentialMaterialError` saying
what is wrong, never a value."""

_log = logging.getLogger(__name__)
_random = SystemRandom()


def custom_render(settings: CustomValueSettings, read: SecretEntries) -> Render:
    """Renders from the Secret ``read`` reads: the template and the header's entry first,
    then the entries the template names."""

    async def render() -> RenderedValue:
        found = await read(
            (settings.template_entry,)
            if settings.header_entry is None
            else (settings.template_entry, settings.header_entry)
        )
        template = entry_text(
            found, settings.template_entry, "spec.auth.secretRef.key: the template"
        )
        header = settings.header
        if settings.header_entry is not None:
            header = header_from_entry(found, settings.header_entry)
        del found
        names = placeholders(template)
        inputs = await read(names) if names else {}
        value = fill(template, inputs)
        del inputs, template  # kept no longer than it takes to render
        assert header is not None  # the spec's, or the Secret's entry's
        return RenderedValue(value, header)

    return render


class ValueRenderer(KeyWriter):
    """Renders one Custom provider's value and keeps it where the gateway reads it:
    :meth:`attempt` when :meth:`due`."""

    def __init__(
        self,
        provider: str,
        plan: MintingPlan,
        render: Render,
        sink: TokenSink,
        *,
        recheck_s: float = AGENT_RECHECK_S,
        draw: Callable[[], float] = _random.random,
        settle: Settle = AGENT_SETTLE,
    ) -> None:
        super().__init__(provider, plan, sink, settle)
        self._render = render
        self._recheck_s = recheck_s
        self._draw = draw
        self._digest_key = secrets.token_bytes(32)
        self._digest: bytes | None = None
        """The keyed digest of the header and value in place."""
        self.health = RenderHealth()

    @property
    def next_attempt_at(self) -> datetime | None:
        return self.health.next_attempt_at

    def due(self, now: datetime) -> bool:
        return self.health.due(now)

    def expires_at(self, now: datetime) -> datetime | None:
        """A rendered value does not lapse."""
        del now
        return None

    def verdict(self, now: datetime) -> tuple[CredentialState, str]:
        del now  # nothing of a value's standing changes with time alone
        return self.health.verdict()

    async def attempt(self, now: datetime, session: aiohttp.ClientSession | None = None) -> None:
        """Render at ``now`` and write the value if it changed; never raises for the
        Secret's or the output's trouble."""
        del session  # nothing is asked of anyone
        try:
            rendered = await self._render()
        except CredentialMaterialError as error:
            self._failed(FailureKind.SECRET, str(error), now)
            return
        digest = hmac.new(
            self._digest_key, f"{rendered.header}\n{rendered.value}".encode(), hashlib.sha256
        ).digest()
        changed = self._digest is None or not hmac.compare_digest(digest, self._digest)
        if changed:
            try:
                await self.write(rendered.value, now, NEVER, rendered.header)
            except OSError as error:
                self._failed(
                    FailureKind.OUTPUT, f"the value could not be written: {error.strerror}", now
                )
                return
            except GridError as error:
                self._failed(FailureKind.OUTPUT, f"the value could not be written: {error}", now)
                return
            self._digest = digest
            _log.info(
                "provider %s: value rendered for header %s and written",
                self.provider,
                rendered.header,
            )
        self.health = self.health.rendered(now, rendered.header, changed, self._recheck_s)

    def fail_unexpectedly(self, error: str, now: datetime) -> None:
        """An attempt ended with an unexpected ``error`` (a bug), counted as a failure."""
        self._failed(FailureKind.SECRET, f"the attempt failed unexpectedly ({error})", now)

    def _failed(self, kind: FailureKind, problem: str, now: datetime) -> None:
        self.health = self.health.failed(kind, problem, now, self._draw())
        _log.warning(
            "provider %s: no value rendered: %s; next attempt at %s",
            self.provider,
            problem,
            self.health.next_attempt_at.isoformat() if self.health.next_attempt_at else "now",
        )
