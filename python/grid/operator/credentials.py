"""Checks of the providers' credential Secrets: present, key there, not empty. The value is
never decoded or kept; only the verdict goes to the engine."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

from grid.engine import SiteEngine
from grid.errors import KubernetesApiError
from grid.models.phases import CredentialState
from grid.operator.kube import KubeApi
from grid.operator.metrics import OperatorMetrics
from grid.operator.secrets import credential_state_of
from grid.runtime.notices import Notices

CredentialRef = tuple[str, str, str]
"""(namespace, Secret name, key)."""


@dataclass
class _Checked:
    refs: dict[str, CredentialRef | None] = field(default_factory=dict)
    checked_at: float | None = None


class CredentialChecks:
    """The credential checks of one network."""

    def __init__(
        self, kube: KubeApi, metrics: OperatorMetrics, notices: Notices, refresh_s: float
    ) -> None:
        self._kube = kube
        self._metrics = metrics
        self._notices = notices
        self._refresh_s = refresh_s
        self._checked = _Checked()

    async def check(self, engine: SiteEngine, moment: float) -> None:
        """Check the Secret of every observed provider that names one, when the providers
        changed or the refresh interval passed."""
        refs = engine.credential_refs()
        wanted: dict[str, CredentialRef | None] = {
            target.provider: refs.get(target.provider) for target in engine.observation_targets()
        }
        state = self._checked
        due = (
            state.checked_at is None
            or wanted != state.refs
            or moment - state.checked_at >= self._refresh_s
        )
        if not due:
            return
        state.refs, state.checked_at = wanted, moment
        checks = {
            provider: self._credential_state(ref)
            for provider, ref in wanted.items()
            if ref is not None
        }
        found = dict(zip(checks, await asyncio.gather(*checks.values()), strict=True))
        for provider in wanted:
            engine.observe_credentials(provider, found.get(provider, CredentialState.NOT_REQUIRED))

    async def _credential_state(self, ref: CredentialRef) -> CredentialState:
        namespace, name, key = ref
        try:
            data = await self._kube.read_secret(namespace, name)
        except KubernetesApiError as error:
            self._metrics.secret_reads.labels("credential", "error").inc()
            self._notices.say(
                f"credential {namespace}/{name}",
                f"cannot check credential Secret {namespace}/{name}: {error}",
                logging.WARNING,
            )
            return CredentialState.SECRET_NOT_FOUND
        state = credential_state_of(data, key)
        self._metrics.secret_reads.labels("credential", state.value).inc()
        # Only the verdict leaves this function; the Secret's data is dropped here.
        del data
        return state
