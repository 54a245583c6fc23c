"""How the operator's own API calls are bounded and retried (:class:`RetryPolicy`), and
whether the API server answers (:class:`Reachability`, which ``/healthz`` reports). Pure."""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How one API call is bounded and retried.

    Attempt ``n`` (from 1) that failed for a retryable reason is followed, after a wait, by
    attempt ``n + 1``, at most ``attempts`` in all. The wait is drawn from
    ``[c/2, c]`` where ``c = min(cap_s, base_s * 2**(n-1))`` (exponential, with jitter so
    that many clients do not retry in step), and is at least the answer's ``Retry-After``.
    A ``Retry-After`` longer than ``retry_after_cap_s``, or a wait that would end past
    ``budget_s`` after the call began, ends the call at once with the error."""

    attempts: int = 5
    base_s: float = 0.2
    cap_s: float = 5.0
    timeout_s: float = 10.0
    """One attempt's limit, from connecting to the last byte of the answer."""
    budget_s: float = 30.0
    """The whole call's limit: attempts and waits."""
    retry_after_cap_s: float = 10.0

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError("attempts must be at least 1")
        for name in ("base_s", "cap_s", "timeout_s", "budget_s", "retry_after_cap_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be positive")

    def backoff(self, failed_attempt: int, rng: random.Random) -> float:
        """The wait after attempt ``failed_attempt`` (from 1), before any Retry-After."""
        ceiling = min(self.cap_s, self.base_s * 2 ** (failed_attempt - 1))
        return rng.uniform(ceiling / 2, ceiling)


@dataclass(slots=True)
class Reachability:
    """Whether the API server answers: when it last did, and since when it has not.

    Any HTTP answer below 500 counts (a 404 or a 429 is the server answering); a refused
    or dropped connection, a timeout or a 5xx does not."""

    last_answer: float | None = None
    """``time.monotonic()`` of the last answer."""
    failing_since: float | None = None
    """The first failure since the last answer (None while the last attempt was answered)."""
    problem: str | None = None
    """What the last failure was."""

    def answered(self, moment: float) -> None:
        self.last_answer = moment
        self.failing_since = None
        self.problem = None

    def failed(self, moment: float, problem: str) -> None:
        if self.failing_since is None:
            self.failing_since = moment
        self.problem = problem

    def unreachable_for(self, moment: float) -> float | None:
        """How long the API server has not answered (None when it last did)."""
        return None if self.failing_since is None else max(0.0, moment - self.failing_since)
