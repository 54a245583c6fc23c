"""A Custom provider's header value rendered from its Secret, the pure part: the template
language, the header's name when the Secret holds it, and what the provider's
``CredentialsValid`` says about the value in place.

The entry ``secretRef.key`` names is a template: ``{{entry}}`` (spaces inside the braces
allowed) stands for the value of another entry of the same Secret, e.g. ``Token {{apiKey}}``
or ``{{user}}:{{password}}``. Every ``{{`` opens a placeholder; the values put in are not
read as templates again. A final newline of the template, of each value and of the header
entry is dropped (``echo`` and editors add one); what is left must make a header value:
visible ASCII, spaces and tabs inside, nothing else.

Nothing here quotes what a Secret holds: a message names entries and rules, never a value
(nor the header entry's content, which may be a value put in the wrong entry)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta

from grid.errors import CredentialMaterialError
from grid.models.fields import SECRET_KEY_PATTERN
from grid.models.phases import CredentialState
from grid.models.provider import check_api_key_header
from grid.oauth.schedule import FailureKind, retry_delay

MAX_VALUE_BYTES = 8192
"""The longest value rendered: what servers commonly take for a whole header line."""
MAX_PLACEHOLDERS = 32
_ENTRY = SECRET_KEY_PATTERN.removeprefix("^").removesuffix("$")
_PLACEHOLDER = re.compile(r"\{\{\s*(" + _ENTRY + r")\s*\}\}")
_HEADER_VALUE = re.compile(r"[!-~]([\t -~]*[!-~])?")
"""A header field value as Grid renders it: visible ASCII, with spaces and tabs inside only
(RFC 9110 section 5.5 without obs-text, which gateways and servers treat differently)."""
_SAFE_TEXT = re.compile(r"[\t -~]*")


@dataclass(frozen=True, slots=True)
class CustomValueSettings:
    """What rendering a Custom provider's value takes besides its Secret."""

    template_entry: str
    """The entry holding the template (``secretRef.key``)."""
    header: str | None
    """``auth.header``, when the spec names the header."""
    header_entry: str | None
    """Else the Secret's entry holding the header's name."""


@dataclass(frozen=True, slots=True)
class RenderedValue:
    """A rendered value and the header it goes in; the value stays out of ``repr``."""

    value: str = field(repr=False)
    header: str


def placeholders(template: str) -> tuple[str, ...]:
    """The entries ``template`` names, in order, each once. Raises
    :class:`CredentialMaterialError` for a ``{{`` that opens no placeholder."""
    names: dict[str, None] = {}
    position = 0
    while (start := template.find("{{", position)) >= 0:
        found = _PLACEHOLDER.match(template, start)
        if found is None:
            raise CredentialMaterialError(
                "the template (the entry spec.auth.secretRef.key names) has a '{{' that opens "
                "no placeholder: placeholders are {{entry}}, entry a key of the same Secret"
            )
        names[found.group(1)] = None
        position = found.end()
    if len(names) > MAX_PLACEHOLDERS:
        raise CredentialMaterialError(
            f"the template names {len(names)} entries: at most {MAX_PLACEHOLDERS}"
        )
    return tuple(names)


def entry_text(entries: Mapping[str, bytes], name: str, what: str) -> str:
    """The text of entry ``name`` (``what`` says what it is for), without its final
    newline. Raises :class:`CredentialMaterialError` when it is missing, empty or holds a
    line break or control character."""
    raw = entries.get(name)
    if raw is None:
        raise CredentialMaterialError(f"the Secret has no entry {name} ({what})")
    try:
        text = raw.decode("ascii")
    except UnicodeDecodeError:
        raise CredentialMaterialError(f"the Secret's entry {name} ({what}) is not ASCII") from None
    text = text.removesuffix("\n").removesuffix("\r")
    if not text:
        raise CredentialMaterialError(f"the Secret's entry {name} ({what}) is empty")
    if not _SAFE_TEXT.fullmatch(text):
        raise CredentialMaterialError(
            f"the Secret's entry {name} ({what}) holds a line break or a control character, "
            "which no header value may carry"
        )
    return text


def header_from_entry(entries: Mapping[str, bytes], name: str) -> str:
    """The header name the Secret's entry ``name`` holds, checked by ApiKey's rules
    (:func:`~grid.models.provider.check_api_key_header`)."""
    text = entry_text(entries, name, "custom.headerKey: the header's name")
    try:
        return check_api_key_header(text)
    except ValueError as error:
        raise CredentialMaterialError(
            f"the Secret's entry {name} (custom.headerKey) is not a header Grid may send a "
            f"credential in: it {error}"
        ) from None


def fill(template: str, inputs: Mapping[str, bytes]) -> str:
    """``template`` with each placeholder replaced by its entry's text in ``inputs`` (which
    holds the entries the Secret has of those the template names)."""
    names = placeholders(template)
    texts = {
        name: entry_text(inputs, name, "named by the template") for name in names if name in inputs
    }
    missing = [name for name in names if name not in texts]
    if missing:
        raise CredentialMaterialError(
            f"the template names entr{'ies' if len(missing) > 1 else 'y'} "
            f"{', '.join(missing)}, which the Secret does not have"
        )
    value = _PLACEHOLDER.sub(lambda found: texts[found.group(1)], template)
    if len(value.encode()) > MAX_VALUE_BYTES:
        raise CredentialMaterialError(f"the rendered value is longer than {MAX_VALUE_BYTES} bytes")
    if not _HEADER_VALUE.fullmatch(value):
        raise CredentialMaterialError(
            "the rendered value begins or ends with a space or a tab, which a header value "
            "cannot carry"
        )
    return value


@dataclass(frozen=True, slots=True)
class RenderHealth:
    """Where rendering a Custom provider's value stands: when the value in place was
    written, and the failures since the last rendering that worked."""

    rendered_at: datetime | None = None
    """When the value in place (if any) was rendered and written."""
    header: str | None = None
    """The header the value in place goes in."""
    next_attempt_at: datetime | None = None
    """None: an attempt is due now (nothing was tried yet)."""
    failures: int = 0
    failing_since: datetime | None = None
    failure: FailureKind | None = None
    problem: str = ""

    def rendered(self, now: datetime, header: str, written: bool, recheck_s: float) -> RenderHealth:
        """An attempt at ``now`` rendered the value (``written``: a new one, else the one in
        place again); the Secret is read again ``recheck_s`` later."""
        return RenderHealth(
            rendered_at=now if written or self.rendered_at is None else self.rendered_at,
            header=header,
            next_attempt_at=now + timedelta(seconds=recheck_s),
        )

    def failed(self, kind: FailureKind, problem: str, now: datetime, draw: float) -> RenderHealth:
        """An attempt at ``now`` rendered nothing; the value in place (if any) stays."""
        failures = self.failures + 1
        return replace(
            self,
            next_attempt_at=now + timedelta(seconds=retry_delay(failures, draw)),
            failures=failures,
            failing_since=self.failing_since or now,
            failure=kind,
            problem=problem,
        )

    def due(self, now: datetime) -> bool:
        return self.next_attempt_at is None or now >= self.next_attempt_at

    def verdict(self) -> tuple[CredentialState, str]:
        """The provider's credential state and the sentence its ``CredentialsValid``
        condition carries (times and entry names, never a value)."""
        failing = ""
        if self.failing_since is not None:
            failing = f"rendering fails since {_moment(self.failing_since)}: {self.problem}"
        if self.rendered_at is not None:
            in_place = f"the value rendered at {_moment(self.rendered_at)} for header {self.header}"
            if self.failing_since is None:
                return CredentialState.RENDERED, f"{in_place} is in place"
            return CredentialState.REFRESH_FAILING, f"{in_place} stays in use; {failing}"
        if self.failure is None:
            return CredentialState.RENDERING, "no value yet: the first one is being rendered"
        state = (
            CredentialState.TOKEN_NOT_WRITTEN
            if self.failure is FailureKind.OUTPUT
            else CredentialState.SECRET_UNUSABLE
        )
        return state, f"no value in place: {failing}"


def _moment(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
