"""``grid secrets``: the Secrets a GridNetwork's ``spec.tls`` names, as YAML for
``kubectl apply -f -``.

A network has one SWIM key and one CA, shared by all its sites; each site has its own
certificate, issued by that CA and naming the site. Two kinds of Secret come out:

- the **site Secrets**, one set per cluster, in the namespace the operator reads: the SWIM
  key (``swim.key``), the CA certificate (``ca.crt``) and the site's ``kubernetes.io/tls``
  certificate and key (``tls.crt``, ``tls.key``);
- the **signing Secret** ``<network>-ca-signing`` (``ca.crt``, ``ca.key``, ``swim.key``):
  what issues more site certificates. No operator needs it; it belongs in a namespace no
  operator is bound in (``--signing-namespace``, never the site namespace), or in a file the
  administrators keep.

A run without ``--from-secrets`` mints a new CA and SWIM key and prints the signing Secret
(and, with ``--site``, that site's Secrets). A run with ``--from-secrets`` reads the signing
Secret (``kubectl get secret -o yaml``, a file or standard input) and prints one more site's
Secrets with the same CA and key.

Key material goes to standard output and nowhere else: no file is written, and messages
(standard error) name Secrets and keys but never quote what they hold.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import json
import os
import re
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from grid.errors import CertificateRejected, ConfigError, TrustConfigError
from grid.models.fields import DNS_LABEL_PATTERN, DNS_SUBDOMAIN_PATTERN
from grid.models.resources import parse_yaml
from grid.runtime.keyring import KEY_BYTES, parse_keyring
from grid.trust.authority import CertificateAuthority, IssuedCertificate
from grid.trust.pem import check_public_cert_pem

EXIT_OK = 0
EXIT_USAGE = 2

SWIM_KEY_KEY = "swim.key"
CA_CERT_KEY = "ca.crt"
CA_PRIVATE_KEY_KEY = "ca.key"
TLS_CERT_KEY = "tls.crt"
TLS_PRIVATE_KEY_KEY = "tls.key"
OPAQUE = "Opaque"
TLS_SECRET_TYPE = "kubernetes.io/tls"

DEFAULT_SIGNING_NAMESPACE = "grid-ca"
DEFAULT_SITE_DAYS = 365
DEFAULT_CA_DAYS = 3650
MAX_INPUT_BYTES = 1024 * 1024
# A certificate's common name is at most 64 characters; the site name is its common name.
MAX_SITE_NAME = 64

NETWORK_LABEL = "grid.praxis-proxy.io/network"
SITE_LABEL = "grid.praxis-proxy.io/site"
ROLE_LABEL = "grid.praxis-proxy.io/secret"
PART_OF_LABEL = "app.kubernetes.io/part-of"

_PROG = "grid secrets"

DESCRIPTION = """\
Print, as YAML for 'kubectl apply -f -', the Secrets a GridNetwork's spec.tls names:

  site Secrets, in --namespace (the one the operator reads), for one cluster:
    NETWORK-swim-key  swim.key          the SWIM key, the same in every cluster
    NETWORK-ca        ca.crt            the network's CA certificate
    NETWORK-site-tls  tls.crt, tls.key  the site's certificate (naming --site) and key
  the signing Secret, in --signing-namespace, which issues more sites' certificates:
    NETWORK-ca-signing  ca.crt, ca.key, swim.key

A run without --from-secrets mints a new CA and SWIM key and prints the signing Secret
(and, with --site, that site's Secrets); a run with --from-secrets reads the signing
Secret and prints one more site's Secrets with the same CA and SWIM key.
"""

EPILOG = """\
The first cluster (mints the network's CA and SWIM key):

  kubectl create namespace grid-ca
  grid secrets --network glb-demo --namespace grid-system --site east-edge \\
    | kubectl apply -f -

Every other cluster (the same CA and SWIM key, a certificate of its own):

  kubectl -n grid-ca get secret glb-demo-ca-signing -o yaml \\
    | grid secrets --network glb-demo --namespace grid-system --site west-edge \\
        --from-secrets - \\
    | kubectl --context west apply -f -

Without --site, only the signing Secret is printed (to keep the CA key out of every site
cluster: apply it to an administration cluster, or keep it in a file only you can read).

Standard output carries the Secrets (private keys included) and refuses to be a terminal;
standard error carries the site certificate's SHA-256 fingerprint, the value its GridSite
pins in spec.trust.certFingerprint. Exit status: 0 printed, 2 bad usage or input.
"""


def register(subparsers: Any) -> None:
    """Add ``grid secrets``."""
    parser = subparsers.add_parser(
        "secrets",
        help="print a network's SWIM key, CA and site certificate Secrets (YAML for kubectl)",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--network", metavar="NAME", help="the GridNetwork's name (required; names the Secrets)"
    )
    parser.add_argument(
        "--site",
        metavar="NAME",
        help="the GridSite to issue a certificate for (its name is the certificate's DNS "
        "subject alternative name); without it only the signing Secret is printed",
    )
    parser.add_argument(
        "--namespace",
        metavar="NS",
        help="namespace of the site Secrets, the one the GridNetwork's spec.tls refers to "
        "(required with --site)",
    )
    parser.add_argument(
        "--from-secrets",
        metavar="FILE",
        help="reuse the CA and SWIM key of the signing Secret in this YAML (a file, or '-' "
        "for standard input; e.g. kubectl get secret NETWORK-ca-signing -o yaml); the SWIM "
        "key is taken from a Secret named as --key-secret if the YAML holds one. Without "
        "it a new CA and SWIM key are minted",
    )
    names = parser.add_argument_group("Secret names (defaults follow the network's name)")
    names.add_argument(
        "--key-secret", metavar="NAME", help="the SWIM key Secret (NETWORK-swim-key)"
    )
    names.add_argument("--ca-secret", metavar="NAME", help="the CA certificate Secret (NETWORK-ca)")
    names.add_argument(
        "--site-secret", metavar="NAME", help="the site's TLS Secret (NETWORK-site-tls)"
    )
    names.add_argument(
        "--signing-secret", metavar="NAME", help="the signing Secret (NETWORK-ca-signing)"
    )
    names.add_argument(
        "--signing-namespace",
        metavar="NS",
        default=DEFAULT_SIGNING_NAMESPACE,
        help="namespace of the signing Secret, one no operator is bound in (default: "
        f"{DEFAULT_SIGNING_NAMESPACE}; must differ from --namespace)",
    )
    certificate = parser.add_argument_group("the site certificate")
    certificate.add_argument(
        "--dns-name",
        metavar="NAME",
        action="append",
        default=[],
        help="another DNS subject alternative name, e.g. the host of the GridSite's egress "
        "address (repeatable)",
    )
    certificate.add_argument(
        "--ip-address",
        metavar="IP",
        action="append",
        default=[],
        help="an IP subject alternative name (repeatable)",
    )
    certificate.add_argument(
        "--days",
        type=int,
        default=DEFAULT_SITE_DAYS,
        metavar="N",
        help=f"validity of the site certificate in days (default: {DEFAULT_SITE_DAYS}; "
        "never beyond the CA's)",
    )
    certificate.add_argument(
        "--ca-days",
        type=int,
        default=DEFAULT_CA_DAYS,
        metavar="N",
        help=f"validity of a newly minted CA in days (default: {DEFAULT_CA_DAYS})",
    )
    parser.set_defaults(handler=secrets_command)


class SecretsUsageError(ConfigError):
    """Bad usage or unusable input; the message never quotes key material."""


@dataclass(frozen=True, slots=True)
class Plan:
    """What to print: every name checked, and whether a new CA is minted."""

    network: str
    site: str | None
    namespace: str | None
    key_secret: str
    ca_secret: str
    site_secret: str
    signing_secret: str
    signing_namespace: str
    dns_names: tuple[str, ...]
    ip_addresses: tuple[str, ...]
    days: int
    ca_days: int
    from_secrets: str | None


class NetworkMaterial:
    """A network's CA (certificate and key) and SWIM key entry. Never printed: the repr
    gives the CA's fingerprint only."""

    __slots__ = ("authority", "ca_pem", "minted", "swim_key")

    def __init__(
        self, authority: CertificateAuthority, ca_pem: str, swim_key: bytes, *, minted: bool
    ) -> None:
        self.authority = authority
        self.ca_pem = ca_pem
        self.swim_key = swim_key
        self.minted = minted

    def __repr__(self) -> str:
        return f"NetworkMaterial(ca={self.authority.fingerprint}, minted={self.minted})"


def secrets_command(args: argparse.Namespace) -> int:
    """Print the Secrets, or one line saying what is wrong."""
    try:
        plan = make_plan(args)
        if sys.stdout.isatty():
            raise SecretsUsageError(
                "standard output is a terminal and would show private keys: pipe it to "
                "'kubectl apply -f -' (or redirect it to a file only you can read)"
            )
        now = datetime.now(UTC)
        if plan.from_secrets is None:
            material = mint(plan.network, now, plan.ca_days)
        else:
            material = load_material(read_input(plan.from_secrets), plan, now)
        site = None
        if plan.site is not None:
            site = issue_site(material, plan, now)
        text = render(plan, material, site, now)
    except ConfigError as error:
        print(f"{_PROG}: {error}", file=sys.stderr)
        return EXIT_USAGE
    sys.stdout.write(text)
    sys.stdout.flush()
    if material.minted:
        print(
            f"{_PROG}: minted a new CA and SWIM key for network {plan.network}; Secret "
            f"{plan.signing_namespace}/{plan.signing_secret} holds the CA key: keep it where "
            "no operator reads it, and give it to --from-secrets to issue other sites",
            file=sys.stderr,
        )
    if site is not None and plan.site is not None:
        print(
            f"{_PROG}: site {plan.site}: certificate SHA-256 fingerprint {site.fingerprint}, "
            f"valid until {site.certificate.not_valid_after_utc:%Y-%m-%d}",
            file=sys.stderr,
        )
        print(f"{_PROG}: pin it: {pin_command(plan.site, site.fingerprint)}", file=sys.stderr)
    return EXIT_OK


# --- usage ------------------------------------------------------------------------------


def make_plan(args: argparse.Namespace) -> Plan:
    """Check the arguments (one error at a time, as one line) and settle the names."""
    network = _name(args.network, "--network", DNS_SUBDOMAIN_PATTERN, 253, required=True)
    site = args.site
    if site is not None:
        site = _name(site, "--site", DNS_SUBDOMAIN_PATTERN, MAX_SITE_NAME)
    namespace = args.namespace
    if site is None:
        if args.from_secrets is not None:
            raise SecretsUsageError(
                "--from-secrets issues a site's Secrets from an existing CA: give --site"
            )
        if namespace is not None:
            raise SecretsUsageError(
                "--namespace is where the site Secrets go: give --site too (without --site "
                "only the signing Secret is printed, into --signing-namespace)"
            )
    else:
        namespace = _name(namespace, "--namespace", DNS_LABEL_PATTERN, 63, required=True)
    signing_namespace = _name(
        args.signing_namespace, "--signing-namespace", DNS_LABEL_PATTERN, 63, required=True
    )
    if signing_namespace == namespace:
        raise SecretsUsageError(
            f"--signing-namespace is {namespace}, the namespace of the site Secrets: the "
            "signing Secret holds the CA key and must stay where no operator reads it"
        )
    plan = Plan(
        network=network,
        site=site,
        namespace=namespace,
        key_secret=_secret_name(args.key_secret, "--key-secret", f"{network}-swim-key"),
        ca_secret=_secret_name(args.ca_secret, "--ca-secret", f"{network}-ca"),
        site_secret=_secret_name(args.site_secret, "--site-secret", f"{network}-site-tls"),
        signing_secret=_secret_name(
            args.signing_secret, "--signing-secret", f"{network}-ca-signing"
        ),
        signing_namespace=signing_namespace,
        dns_names=tuple(_name(n, "--dns-name", DNS_SUBDOMAIN_PATTERN, 253) for n in args.dns_name),
        ip_addresses=tuple(args.ip_address),
        days=_days(args.days, "--days"),
        ca_days=_days(args.ca_days, "--ca-days"),
        from_secrets=args.from_secrets,
    )
    if site is not None:
        taken = [plan.key_secret, plan.ca_secret, plan.site_secret]
        if len(set(taken)) != len(taken):
            raise SecretsUsageError(
                "--key-secret, --ca-secret and --site-secret must be three different names "
                f"(got {', '.join(taken)})"
            )
    elif args.dns_name or args.ip_address:
        raise SecretsUsageError(
            "--dns-name and --ip-address name the site certificate: give --site"
        )
    return plan


def _name(
    value: str | None, option: str, pattern: str, max_length: int, *, required: bool = False
) -> str:
    if value is None:
        if required:
            raise SecretsUsageError(f"{option} is required")
        raise SecretsUsageError(f"{option} is empty")
    if len(value) > max_length or not re.fullmatch(pattern, value):
        kind = "a DNS label" if pattern == DNS_LABEL_PATTERN else "a DNS name"
        raise SecretsUsageError(
            f"{option} {value!r} is not {kind} of at most {max_length} characters (lowercase "
            "letters, digits and '-', starting and ending alphanumeric)"
        )
    return value


def _secret_name(value: str | None, option: str, default: str) -> str:
    if value is None:
        if len(default) > 253:
            raise SecretsUsageError(f"the default {option} name is too long; give {option}")
        return default
    return _name(value, option, DNS_SUBDOMAIN_PATTERN, 253)


def _days(value: int, option: str) -> int:
    if not 1 <= value <= 36500:
        raise SecretsUsageError(f"{option} must be between 1 and 36500 days")
    return value


# --- material ---------------------------------------------------------------------------


def mint(network: str, now: datetime, ca_days: int) -> NetworkMaterial:
    """A new CA and a new 32-byte SWIM key for ``network``."""
    authority = CertificateAuthority.generate(
        _common_name(f"{network} Grid CA"), now=now, valid_for=timedelta(days=ca_days)
    )
    return NetworkMaterial(authority, authority.certificate_pem, os.urandom(KEY_BYTES), minted=True)


def read_input(source: str) -> tuple[bytes, str]:
    """The bytes of ``--from-secrets`` (``-`` is standard input) and how to name them."""
    where = "--from-secrets (standard input)" if source == "-" else f"--from-secrets {source}"
    if source == "-" and sys.stdin.isatty():
        raise SecretsUsageError(
            f"{where} is a terminal: pipe the signing Secret in (kubectl get secret ... -o yaml)"
        )
    try:
        if source == "-":
            data = sys.stdin.buffer.read(MAX_INPUT_BYTES + 1)
        else:
            with Path(source).open("rb") as handle:
                data = handle.read(MAX_INPUT_BYTES + 1)
    except OSError as error:
        raise SecretsUsageError(f"{where}: cannot read ({error.strerror})") from None
    if len(data) > MAX_INPUT_BYTES:
        raise SecretsUsageError(f"{where} is larger than {MAX_INPUT_BYTES} bytes")
    if not data.strip():
        raise SecretsUsageError(f"{where} is empty")
    return data, where


def load_material(source: tuple[bytes, str], plan: Plan, now: datetime) -> NetworkMaterial:
    """The CA and SWIM key of the signing Secret in ``source`` (see ``--from-secrets``)."""
    data, where = source
    secrets = list(_secrets_in(data, where))
    signing = _signing_secret(secrets, plan, where)
    name = signing.name
    network = signing.labels.get(NETWORK_LABEL)
    if network is not None and network != plan.network:
        raise SecretsUsageError(
            f"{where}: Secret {name} is the signing Secret of network {network}, not {plan.network}"
        )
    ca_pem = _pem_text(signing.entry(CA_CERT_KEY, where), f"{where}: Secret {name}, {CA_CERT_KEY}")
    authority = _authority(
        ca_pem, signing.entry(CA_PRIVATE_KEY_KEY, where), f"{where}: Secret {name}", now
    )
    key_holder = next((s for s in secrets if s.name == plan.key_secret and s is not signing), None)
    holder = key_holder or signing
    if SWIM_KEY_KEY not in holder.data:
        raise SecretsUsageError(
            f"{where}: Secret {holder.name} has no key {SWIM_KEY_KEY} (keys present: "
            f"{', '.join(sorted(holder.data)) or 'none'})"
        )
    swim_key = holder.entry(SWIM_KEY_KEY, where)
    parse_keyring(
        swim_key, f"{where}: Secret {holder.name}, {SWIM_KEY_KEY}", error=SecretsUsageError
    )
    return NetworkMaterial(authority, ca_pem, swim_key, minted=False)


@dataclass(frozen=True, slots=True)
class _InputSecret:
    name: str
    labels: Mapping[str, str]
    data: Mapping[str, bytes]

    def __repr__(self) -> str:
        return f"_InputSecret({self.name!r}, keys={sorted(self.data)})"

    def entry(self, key: str, where: str) -> bytes:
        value = self.data.get(key)
        if value is None:
            present = ", ".join(sorted(self.data)) or "none"
            raise SecretsUsageError(
                f"{where}: Secret {self.name} has no key {key} (keys present: {present})"
            )
        return value


def _secrets_in(data: bytes, where: str) -> Iterator[_InputSecret]:
    try:
        documents = parse_yaml(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise SecretsUsageError(f"{where} is not UTF-8 text") from None
    except yaml.YAMLError as error:
        # The parser's message quotes the input, which may be a private key: give the line.
        mark = getattr(error, "problem_mark", None)
        line = f" (line {mark.line + 1})" if mark is not None else ""
        raise SecretsUsageError(f"{where} is not YAML{line}") from None
    found = 0
    for document in _objects(documents):
        if not isinstance(document, dict) or document.get("kind") != "Secret":
            continue
        found += 1
        metadata = document.get("metadata")
        name = metadata.get("name") if isinstance(metadata, dict) else None
        if not isinstance(name, str) or not name:
            raise SecretsUsageError(f"{where}: a Secret has no metadata.name")
        labels = metadata.get("labels") if isinstance(metadata, dict) else None
        yield _InputSecret(
            name,
            {str(k): str(v) for k, v in labels.items()} if isinstance(labels, dict) else {},
            _decoded(document, name, where),
        )
    if not found:
        raise SecretsUsageError(f"{where} holds no Secret")


def _objects(documents: Sequence[Any]) -> Iterator[Any]:
    for document in documents:
        if isinstance(document, dict) and document.get("kind") == "List":
            items = document.get("items")
            yield from items if isinstance(items, list) else ()
        else:
            yield document


def _decoded(document: Mapping[str, Any], name: str, where: str) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    data = document.get("data") or {}
    plain = document.get("stringData") or {}
    if not isinstance(data, dict) or not isinstance(plain, dict):
        raise SecretsUsageError(f"{where}: Secret {name}: data and stringData must be maps")
    for key, value in data.items():
        try:
            out[str(key)] = base64.b64decode(str(value or ""), validate=True)
        except (binascii.Error, ValueError):
            raise SecretsUsageError(
                f"{where}: Secret {name}, key {key} is not valid base64"
            ) from None
    for key, value in plain.items():
        out[str(key)] = str(value).encode()
    return out


def _signing_secret(secrets: list[_InputSecret], plan: Plan, where: str) -> _InputSecret:
    named = [s for s in secrets if s.name == plan.signing_secret]
    if named:
        return named[0]
    candidates = [s for s in secrets if CA_PRIVATE_KEY_KEY in s.data]
    if len(candidates) == 1:
        return candidates[0]
    if not candidates:
        raise SecretsUsageError(
            f"{where} holds no signing Secret ({plan.signing_secret}, or any Secret with "
            f"{CA_CERT_KEY} and {CA_PRIVATE_KEY_KEY}): give it the Secret the first run of "
            f"{_PROG} printed"
        )
    names = ", ".join(s.name for s in candidates)
    raise SecretsUsageError(
        f"{where} holds several Secrets with a CA key ({names}): name one with --signing-secret"
    )


def _pem_text(raw: bytes, where: str) -> str:
    try:
        return raw.decode("ascii")
    except UnicodeDecodeError:
        raise SecretsUsageError(f"{where} is not PEM text") from None


def _authority(ca_pem: str, key_bytes: bytes, where: str, now: datetime) -> CertificateAuthority:
    try:
        info = check_public_cert_pem(ca_pem, now)
    except (CertificateRejected, TrustConfigError) as error:
        raise SecretsUsageError(f"{where}, {CA_CERT_KEY}: {error}") from None
    if not info.is_ca:
        raise SecretsUsageError(f"{where}, {CA_CERT_KEY} is not a CA certificate")
    # The first certificate of ca.crt is the one ca.key signs as.
    certificate = x509.load_pem_x509_certificate(ca_pem.encode("ascii"))
    try:
        key = serialization.load_pem_private_key(key_bytes, None)
    except (ValueError, TypeError):
        # The parser's message may quote the input; say only what kind of thing is wrong.
        raise SecretsUsageError(
            f"{where}, {CA_PRIVATE_KEY_KEY} is not an unencrypted PEM private key"
        ) from None
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise SecretsUsageError(
            f"{where}, {CA_PRIVATE_KEY_KEY} must be an ECDSA key (the CA {_PROG} mints is P-256)"
        )
    if key.public_key() != certificate.public_key():
        raise SecretsUsageError(
            f"{where}: {CA_PRIVATE_KEY_KEY} is not the private key of the first certificate "
            f"in {CA_CERT_KEY}"
        )
    return CertificateAuthority(certificate, key)


def issue_site(material: NetworkMaterial, plan: Plan, now: datetime) -> IssuedCertificate:
    """The site's certificate, never valid beyond its CA."""
    assert plan.site is not None
    ca_expires = material.authority.certificate.not_valid_after_utc
    valid_for = min(timedelta(days=plan.days), ca_expires - now)
    try:
        return material.authority.issue(
            plan.site,
            now=now,
            dns_names=plan.dns_names,
            ip_addresses=plan.ip_addresses,
            valid_for=valid_for,
        )
    except TrustConfigError as error:
        raise SecretsUsageError(f"--ip-address: {error}") from None


def _common_name(name: str) -> str:
    return name if len(name) <= 64 else name[:64]


# --- output -----------------------------------------------------------------------------


def render(
    plan: Plan, material: NetworkMaterial, site: IssuedCertificate | None, now: datetime
) -> str:
    """The YAML stream: the signing Secret when it was minted, then the site Secrets."""
    documents: list[str] = []
    if material.minted:
        documents.append(
            secret_document(
                [
                    f"The signing Secret of network {plan.network}: the CA certificate and "
                    "key, and the SWIM key.",
                    "No operator reads it: keep it in a namespace no operator is bound in.",
                    "Issue another site's Secrets with it:",
                    f"  kubectl -n {plan.signing_namespace} get secret {plan.signing_secret} "
                    f"-o yaml | {_PROG} --network {plan.network} --from-secrets - ...",
                ],
                plan.signing_secret,
                plan.signing_namespace,
                kind=OPAQUE,
                labels=_labels(plan, "ca-signing"),
                data={
                    CA_CERT_KEY: material.ca_pem.encode("ascii"),
                    CA_PRIVATE_KEY_KEY: material.authority.private_key_pem(),
                    SWIM_KEY_KEY: material.swim_key,
                },
            )
        )
    if site is not None and plan.site is not None and plan.namespace is not None:
        namespace = plan.namespace
        documents.append(
            secret_document(
                [
                    f"Site {plan.site} of network {plan.network}; the GridNetwork's spec.tls:",
                    f"  swimKeyRef: {{name: {plan.key_secret}, namespace: {namespace}, "
                    f"key: {SWIM_KEY_KEY}}}",
                    f"  caSecretRef: {{name: {plan.ca_secret}, namespace: {namespace}, "
                    f"key: {CA_CERT_KEY}}}",
                    f"  siteCertSecretRef: {{name: {plan.site_secret}, namespace: {namespace}}}",
                    "",
                    "The SWIM key: the same in every cluster of the network.",
                ],
                plan.key_secret,
                namespace,
                kind=OPAQUE,
                labels=_labels(plan, "swim-key"),
                data={SWIM_KEY_KEY: material.swim_key},
            )
        )
        documents.append(
            secret_document(
                ["The network's CA certificate: every site's certificate chains to it."],
                plan.ca_secret,
                namespace,
                kind=OPAQUE,
                labels=_labels(plan, "ca"),
                data={CA_CERT_KEY: material.ca_pem.encode("ascii")},
            )
        )
        expires = site.certificate.not_valid_after_utc
        documents.append(
            secret_document(
                [
                    f"The certificate of site {plan.site}, issued by the network's CA, valid "
                    f"until {expires:%Y-%m-%d}.",
                    f"SHA-256 fingerprint, for GridSite {plan.site}'s "
                    f"spec.trust.certFingerprint: {site.fingerprint}",
                ],
                plan.site_secret,
                namespace,
                kind=TLS_SECRET_TYPE,
                labels=_labels(plan, "site-tls", site=plan.site),
                data={
                    TLS_CERT_KEY: site.certificate_pem.encode("ascii"),
                    TLS_PRIVATE_KEY_KEY: site.private_key_pem(),
                },
            )
        )
    header = f"# {_PROG}: network {plan.network}, generated {now:%Y-%m-%dT%H:%M:%SZ}\n"
    return header + "---\n".join(documents)


def secret_document(
    comments: Sequence[str],
    name: str,
    namespace: str,
    *,
    kind: str,
    labels: Mapping[str, str],
    data: Mapping[str, bytes],
) -> str:
    """One Secret of type ``kind`` as YAML, preceded by comments (which never hold key
    material)."""
    document = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(labels)},
        "type": kind,
        "data": {key: base64.b64encode(value).decode("ascii") for key, value in data.items()},
    }
    lines = "".join(f"# {line}".rstrip() + "\n" for line in comments)
    return lines + yaml.safe_dump(document, sort_keys=False, width=1 << 30)


def _labels(plan: Plan, role: str, *, site: str | None = None) -> dict[str, str]:
    labels = {PART_OF_LABEL: "grid", NETWORK_LABEL: plan.network, ROLE_LABEL: role}
    if site is not None:
        labels[SITE_LABEL] = site
    return labels


def pin_command(site: str, fingerprint: str) -> str:
    """The ``kubectl patch`` that pins ``fingerprint`` in GridSite ``site``."""
    patch = json.dumps({"spec": {"trust": {"certFingerprint": fingerprint}}}, separators=(",", ":"))
    return f"kubectl patch gridsite {site} --type merge -p '{patch}'"
