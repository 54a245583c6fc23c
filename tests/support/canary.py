"""Canary secrets, and what counts as leaking one: any 8 characters of it in any spelling a
program could write it in (as text, base64 at every alignment, URL-safe base64, hex, the
base64 body of a PEM file). A partial quote of a secret is a leak too."""

from __future__ import annotations

import base64
import contextlib
from collections.abc import Iterable

WINDOW = 8
"""The shortest run of a secret's characters that counts as a leak."""


def spellings(secret: bytes) -> list[str]:
    """Every way ``secret`` could be written out. Base64 is taken at the three alignments,
    so that a quote of part of the secret, encoded on its own, is still caught."""
    forms = [secret.hex(), secret.hex().upper()]
    for start in range(3):
        forms.append(base64.b64encode(secret[start:]).decode().rstrip("="))
        forms.append(base64.urlsafe_b64encode(secret[start:]).decode().rstrip("="))
    with contextlib.suppress(UnicodeDecodeError):
        forms.append(secret.decode())
    return forms


def pem_body(pem: bytes) -> bytes:
    """The DER bytes inside a PEM document."""
    lines = [line for line in pem.decode().splitlines() if line and "-----" not in line]
    return base64.b64decode("".join(lines))


class Canaries:
    """The windows of a set of secrets, minus any that also occur in public material (a
    private key and its certificate share algorithm identifiers, say)."""

    def __init__(self, secrets: Iterable[bytes], *, public: Iterable[str | bytes] = ()) -> None:
        shared = [p.decode(errors="replace") if isinstance(p, bytes) else p for p in public]
        windows: set[str] = set()
        for secret in secrets:
            for form in spellings(secret):
                windows.update(form[i : i + WINDOW] for i in range(len(form) - WINDOW + 1))
        self.windows = frozenset(w for w in windows if not any(w in text for text in shared))
        assert self.windows, "no canary window left to look for"

    def found_in(self, text: str | bytes) -> list[str]:
        """The windows that occur in ``text``."""
        if isinstance(text, bytes):
            text = text.decode(errors="replace")
        return sorted(window for window in self.windows if window in text)

    def assert_absent(self, text: str | bytes, where: str) -> None:
        found = self.found_in(text)
        if found:
            if isinstance(text, bytes):
                text = text.decode(errors="replace")
            at = text.index(found[0])
            context = text[max(0, at - 60) : at + 60]
            raise AssertionError(
                f"a secret leaked into {where}: {len(found)} windows, e.g. {found[0]!r} "
                f"in ...{context!r}..."
            )
