"""What the operator takes from Secrets, and how.

A GridNetwork names three Secrets in ``spec.tls``: the SWIM keyring (``swimKeyRef``), the CA
certificate (``caSecretRef``) and this site's ``kubernetes.io/tls`` certificate and key
(``siteCertSecretRef``, required: every SWIM message is signed with it). They are read
together into one :class:`TrustMaterial`: either all of them are usable or none is taken, so
the mesh never runs half on old and half on new material. Provider credentials are only
checked (the Secret exists, the key is there and not empty); their value is never decoded,
kept or passed on.

Messages name Secrets by namespace, name and key; they never quote what a Secret holds.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from grid.errors import (
    CertificateRejected,
    KubernetesApiError,
    SecretMaterialError,
    SiteCredentialsError,
    TrustConfigError,
)
from grid.membership import SwimCredentials
from grid.models.limits import size_problem
from grid.models.meta import SecretKeyRef, SecretObjectRef
from grid.models.network import TlsSettings
from grid.models.phases import CredentialState
from grid.runtime.credentials import swim_credentials
from grid.runtime.keyring import Keyring, parse_keyring
from grid.runtime.probes import pem_paths
from grid.trust.pem import check_public_cert_pem
from grid.trust.probe import build_client_context

TLS_CERT_KEY = "tls.crt"
TLS_PRIVATE_KEY_KEY = "tls.key"
_PRIVATE_KEY_BEGIN = "-----BEGIN"
_MAX_PEM_BYTES = 64 * 1024
_MAX_KEYS_NAMED = 20


class SecretSource(Protocol):
    """Reads a Secret's ``data`` (base64 text per key), None when it does not exist."""

    async def read_secret(self, namespace: str, name: str) -> Mapping[str, str] | None: ...


@dataclass(frozen=True, slots=True)
class TrustMaterial:
    """A network's keyring, CA and site certificate, all read from its Secrets at once, and
    the SWIM credentials made of them. Never printed: the repr says what is present, not
    what it is."""

    keyring: Keyring
    credentials: SwimCredentials
    ca_pem: str | None = None
    certificate_pem: str | None = None
    private_key_pem: str | None = None
    certificate_fingerprint: str | None = None

    def __repr__(self) -> str:
        return (
            f"TrustMaterial(keys={len(self.keyring.keys)}, ca={self.ca_pem is not None}, "
            f"certificate={self.certificate_fingerprint})"
        )


def _where(ref: SecretKeyRef | SecretObjectRef, field: str, key: str | None = None) -> str:
    entry = f", key {key}" if key else ""
    return f"Secret {ref.namespace}/{ref.name}{entry} ({field})"


async def _read(
    source: SecretSource, ref: SecretKeyRef | SecretObjectRef, field: str
) -> Mapping[str, str]:
    try:
        data = await source.read_secret(ref.namespace, ref.name)
    except KubernetesApiError as error:
        hint = (
            f"; bind the grid-operator-namespaced ClusterRole in namespace {ref.namespace}"
            if error.status == 403
            else ""
        )
        raise SecretMaterialError(f"{_where(ref, field)} cannot be read: {error}{hint}") from None
    if data is None:
        raise SecretMaterialError(f"{_where(ref, field)} does not exist")
    return data


def _entry(
    data: Mapping[str, str], ref: SecretKeyRef | SecretObjectRef, field: str, key: str
) -> bytes:
    encoded = data.get(key)
    if encoded is None:
        names = sorted(str(name) for name in data)
        present = ", ".join(names[:_MAX_KEYS_NAMED]) or "none"
        if len(names) > _MAX_KEYS_NAMED:
            present += f" and {len(names) - _MAX_KEYS_NAMED} more"
        raise SecretMaterialError(
            f"{_where(ref, field)} has no key {key} (keys present: {present})"
        )
    if not isinstance(encoded, str | bytes):
        raise SecretMaterialError(f"{_where(ref, field, key)} is not valid base64 data")
    too_large = size_problem(len(encoded))
    if too_large is not None:
        raise SecretMaterialError(f"{_where(ref, field, key)} {too_large} (as base64)")
    try:
        return base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError, TypeError):
        raise SecretMaterialError(f"{_where(ref, field, key)} is not valid base64 data") from None


def _text(raw: bytes, where: str) -> str:
    if len(raw) > _MAX_PEM_BYTES:
        raise SecretMaterialError(f"{where} is larger than {_MAX_PEM_BYTES} bytes")
    try:
        return raw.decode("ascii")
    except UnicodeDecodeError:
        raise SecretMaterialError(f"{where} is not PEM text") from None


async def load_trust_material(
    source: SecretSource, tls: TlsSettings | None, now: datetime
) -> TrustMaterial:
    """Read and check every Secret ``tls`` names. Raises
    :class:`~grid.errors.SecretMaterialError` for the first one that is missing or unusable
    (nothing is taken then)."""
    if tls is None or tls.swim_key_ref is None:
        raise SecretMaterialError(
            "spec.tls.swimKeyRef is not set: SWIM traffic is always encrypted; create a "
            "Secret holding a 32-byte key and reference it (grid secrets makes one; grid docs "
            "install, step 4)"
        )
    key_ref = tls.swim_key_ref
    data = await _read(source, key_ref, "spec.tls.swimKeyRef")
    keyring = secret_keyring(
        _entry(data, key_ref, "spec.tls.swimKeyRef", key_ref.key),
        _where(key_ref, "spec.tls.swimKeyRef", key_ref.key),
    )
    ca_pem = None
    if tls.ca_secret_ref is not None:
        ca_ref = tls.ca_secret_ref
        where = _where(ca_ref, "spec.tls.caSecretRef", ca_ref.key)
        data = await _read(source, ca_ref, "spec.tls.caSecretRef")
        ca_pem = _text(_entry(data, ca_ref, "spec.tls.caSecretRef", ca_ref.key), where)
        _check_certificate(ca_pem, where, now)
        try:
            build_client_context(ca_pem=ca_pem)
        except TrustConfigError as error:
            raise SecretMaterialError(f"{where}: {error}") from None
    if tls.site_cert_secret_ref is None:
        raise SecretMaterialError(
            "spec.tls.siteCertSecretRef is not set: every SWIM message is signed with the site "
            "certificate; reference this site's kubernetes.io/tls Secret (grid secrets makes one; "
            "grid docs install)"
        )
    site_ref = tls.site_cert_secret_ref
    field = "spec.tls.siteCertSecretRef"
    data = await _read(source, site_ref, field)
    cert_where = _where(site_ref, field, TLS_CERT_KEY)
    certificate_pem = _text(_entry(data, site_ref, field, TLS_CERT_KEY), cert_where)
    fingerprint = _check_certificate(certificate_pem, cert_where, now)
    key_where = _where(site_ref, field, TLS_PRIVATE_KEY_KEY)
    private_key_pem = _text(_entry(data, site_ref, field, TLS_PRIVATE_KEY_KEY), key_where)
    if _PRIVATE_KEY_BEGIN not in private_key_pem:
        raise SecretMaterialError(f"{key_where} is not a PEM private key")
    try:
        with pem_paths(certificate_pem, private_key_pem) as (cert_path, key_path):
            build_client_context(client_cert=cert_path, client_key=key_path)
    except TrustConfigError:
        raise SecretMaterialError(
            f"{_where(site_ref, field)}: tls.key is not the private key of tls.crt, or "
            "one of them is not PEM"
        ) from None
    try:
        credentials = swim_credentials(certificate_pem, private_key_pem, ca_pem)
    except SiteCredentialsError as error:
        raise SecretMaterialError(f"{_where(site_ref, field)}: {error}") from None
    return TrustMaterial(
        keyring, credentials, ca_pem, certificate_pem, private_key_pem, fingerprint
    )


def secret_keyring(entry: bytes, where: str) -> Keyring:
    """The SWIM keyring held by one Secret entry; ``where`` names the entry in messages.
    Raises :class:`~grid.errors.SecretMaterialError`."""
    return parse_keyring(entry, where, error=SecretMaterialError)


def _check_certificate(pem: str, where: str, now: datetime) -> str:
    try:
        return check_public_cert_pem(pem, now).fingerprint
    except (CertificateRejected, TrustConfigError) as error:
        raise SecretMaterialError(f"{where}: {error}") from None


def credential_state_of(data: Mapping[str, str] | None, key: str) -> CredentialState:
    """What a provider's credential Secret holds for ``key``, judged by presence and length
    alone: the value is never decoded."""
    if data is None:
        return CredentialState.SECRET_NOT_FOUND
    if key not in data:
        return CredentialState.KEY_NOT_FOUND
    return CredentialState.VALID if data[key] else CredentialState.EMPTY
