"""``grid secrets``, run as the README runs it: the Secrets it prints are exactly those the
example network refers to (plus the signing Secret, in a namespace of its own), the site
certificate names its site and chains to the CA, the fingerprint printed is the
certificate's, a run for another site reuses the CA and the SWIM key, the operator's loader
takes the Secrets and two SWIM nodes built from them hear each other, bad input is one line
and exit status 2, and no piece of a private key reaches standard error or any file."""

from __future__ import annotations

import base64
import hashlib
import io
import os
import pty
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from grid.cli import main
from grid.membership import SwimConfig, SwimNode
from grid.models import GridSite, load_resource, load_resources_from_dir
from grid.models.network import TlsSettings
from grid.operator.secrets import load_trust_material
from grid.runtime.credentials import swim_credentials
from grid.trust import CertificateAuthority, fingerprint, normalize_fingerprint

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples"
MESH = EXAMPLES / "mesh"
README = REPO / "README.md"
INSTALL = REPO / "docs" / "install.md"
OVERLAY = REPO / "deploy" / "overlays" / "example" / "kustomization.yaml"

NETWORK = "glb-demo"
NAMESPACE = "grid-system"
SIGNING_NAMESPACE = "grid-ca"
FAST = SwimConfig(probe_interval=0.2, suspicion_timeout=0.6, push_pull_interval=2.0)
FINGERPRINT_LINE = re.compile(r"certificate SHA-256 fingerprint ([0-9a-f]{64})")


# --- running it ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Run:
    returncode: int
    stdout: str
    stderr: str

    @property
    def secrets(self) -> dict[tuple[str, str], dict[str, Any]]:
        """(namespace, name) -> the Secret."""
        documents = [d for d in yaml.safe_load_all(self.stdout) if d]
        assert all(d["kind"] == "Secret" and d["apiVersion"] == "v1" for d in documents)
        found = {(d["metadata"]["namespace"], d["metadata"]["name"]): d for d in documents}
        assert len(found) == len(documents), "a Secret printed twice"
        return found

    def entry(self, namespace: str, name: str, key: str) -> bytes:
        return base64.b64decode(self.secrets[(namespace, name)]["data"][key], validate=True)

    @property
    def fingerprint(self) -> str:
        (found,) = FINGERPRINT_LINE.findall(self.stderr)
        return found


class Sandbox:
    """Runs ``grid secrets`` in a working directory, home and temporary directory of its
    own, so that any file it wrote would be found; keeps every stderr for the canary."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.work = root / "work"
        self.home = root / "home"
        self.tmp = root / "tmp"
        for directory in (self.work, self.home, self.tmp):
            directory.mkdir(parents=True, exist_ok=True)
        self.stderrs: list[str] = []

    def run(self, *args: str, stdin: str | None = None) -> Run:
        env = {
            **os.environ,
            "HOME": str(self.home),
            "TMPDIR": str(self.tmp),
            "PYTHONDONTWRITEBYTECODE": "1",
        }
        done = subprocess.run(
            [sys.executable, "-m", "grid.cli", "secrets", *args],
            input=stdin if stdin is not None else "",
            capture_output=True,
            text=True,
            cwd=self.work,
            env=env,
            timeout=60,
            check=False,
        )
        self.stderrs.append(done.stderr)
        return Run(done.returncode, done.stdout, done.stderr)

    def files(self) -> list[Path]:
        return sorted(p for p in self.root.rglob("*") if p.is_file())


def site_args(site: str, *extra: str) -> list[str]:
    return ["--network", NETWORK, "--namespace", NAMESPACE, "--site", site, *extra]


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Sandbox:
    return Sandbox(tmp_path_factory.mktemp("secrets"))


Call = Callable[..., Run]


@pytest.fixture
def call(
    sandbox: Sandbox, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> Call:
    """``grid secrets`` in this process (quicker than a subprocess, for the many ways of
    getting it wrong); its standard error joins the sandbox's for the canary."""

    def run(*args: str, stdin: str = "") -> Run:
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin.encode())))
        code = main(["secrets", *args])
        out, err = capsys.readouterr()
        sandbox.stderrs.append(err)
        return Run(code, out, err)

    return run


@pytest.fixture(scope="module")
def first(sandbox: Sandbox) -> Run:
    """The first cluster's run: mints the CA and the SWIM key."""
    run = sandbox.run(*site_args("east-edge"))
    assert run.returncode == 0, run.stderr
    return run


@pytest.fixture(scope="module")
def second(sandbox: Sandbox, first: Run) -> Run:
    """Another cluster's run, given the signing Secret on standard input as
    ``kubectl get secret glb-demo-ca-signing -o yaml`` prints it."""
    signing = first.secrets[(SIGNING_NAMESPACE, f"{NETWORK}-ca-signing")]
    as_kubectl_prints_it = {
        **signing,
        "metadata": {
            **signing["metadata"],
            "uid": "0b5f6a52-7c2e-4f9b-9d59-1d2a9f3e6c11",
            "resourceVersion": "4242",
            "creationTimestamp": "2025-01-01T00:00:00Z",
        },
    }
    run = sandbox.run(
        *site_args("west-edge", "--from-secrets", "-"), stdin=yaml.safe_dump(as_kubectl_prints_it)
    )
    assert run.returncode == 0, run.stderr
    return run


# --- what the example network refers to -----------------------------------------------------


def network_tls() -> TlsSettings:
    (network,) = load_resources_from_dir(MESH).networks
    assert network.spec.tls is not None
    return network.spec.tls


def referenced_entries(tls: TlsSettings) -> set[tuple[str, str, str]]:
    """(namespace, name, data key) of every entry ``spec.tls`` makes the operator read
    (python/grid/operator/secrets.py: the SWIM key and CA entries, tls.crt and tls.key)."""
    assert tls.swim_key_ref and tls.ca_secret_ref and tls.site_cert_secret_ref
    site = tls.site_cert_secret_ref
    entries = {(r.namespace, r.name, r.key) for r in (tls.swim_key_ref, tls.ca_secret_ref)}
    return entries | {(site.namespace, site.name, key) for key in ("tls.crt", "tls.key")}


def entries_of(secrets: Mapping[tuple[str, str], dict[str, Any]]) -> set[tuple[str, str, str]]:
    return {(ns, name, key) for (ns, name), secret in secrets.items() for key in secret["data"]}


def shape(secret: Mapping[str, Any]) -> tuple[str, str, str, frozenset[str]]:
    meta = secret["metadata"]
    return (
        meta["namespace"],
        meta["name"],
        secret.get("type", "Opaque"),
        frozenset(secret["data"]),
    )


SIGNING_ENTRIES = {
    (SIGNING_NAMESPACE, f"{NETWORK}-ca-signing", key) for key in ("ca.crt", "ca.key", "swim.key")
}


def test_the_first_run_prints_what_the_example_network_refers_to(first: Run) -> None:
    tls = network_tls()
    printed = entries_of(first.secrets)
    site_namespace = {(ns, name, key) for ns, name, key in printed if ns != SIGNING_NAMESPACE}
    assert site_namespace == referenced_entries(tls)
    assert printed - site_namespace == SIGNING_ENTRIES
    assert tls.site_cert_secret_ref is not None
    site_secret = first.secrets[(NAMESPACE, tls.site_cert_secret_ref.name)]
    assert site_secret["type"] == "kubernetes.io/tls"
    # The same objects examples/secrets shows (without their keys), the API key aside.
    examples = [
        d
        for path in sorted((EXAMPLES / "secrets").glob("*.yaml"))
        for d in yaml.safe_load_all(path.read_text())
        if d and d["metadata"]["name"] != "openai-api-key"
    ]
    assert {shape(s) for s in first.secrets.values()} == {shape(s) for s in examples}


def test_the_secrets_are_valid_kubernetes_secrets(first: Run) -> None:
    from kubernetes.client import models

    for secret in first.secrets.values():
        assert set(secret) == {"apiVersion", "kind", "metadata", "type", "data"}
        models.V1Secret(**{k: v for k, v in secret.items() if k != "apiVersion"})
        assert secret["metadata"]["labels"]["grid.praxis-proxy.io/network"] == NETWORK
        for value in secret["data"].values():
            assert base64.b64decode(value, validate=True)


def test_the_certificate_names_the_site_and_chains_to_the_ca(first: Run) -> None:
    ca = x509.load_pem_x509_certificate(first.entry(NAMESPACE, f"{NETWORK}-ca", "ca.crt"))
    site = x509.load_pem_x509_certificate(first.entry(NAMESPACE, f"{NETWORK}-site-tls", "tls.crt"))
    names = site.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "east-edge" in names.get_values_for_type(x509.DNSName)
    assert names.get_values_for_type(x509.IPAddress) == []
    site.verify_directly_issued_by(ca)
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert not site.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    now = datetime.now(UTC)
    assert ca.not_valid_before_utc < now < site.not_valid_after_utc <= ca.not_valid_after_utc
    key = serialization.load_pem_private_key(
        first.entry(NAMESPACE, f"{NETWORK}-site-tls", "tls.key"), None
    )
    assert isinstance(key, ec.EllipticCurvePrivateKey) and key.curve.name == "secp256r1"
    assert key.public_key() == site.public_key()
    # The signing Secret's CA is the published one, and its key signs as it.
    signing = f"{NETWORK}-ca-signing"
    assert first.entry(SIGNING_NAMESPACE, signing, "ca.crt") == first.entry(
        NAMESPACE, f"{NETWORK}-ca", "ca.crt"
    )
    ca_key = serialization.load_pem_private_key(
        first.entry(SIGNING_NAMESPACE, signing, "ca.key"), None
    )
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    assert ca_key.public_key() == ca.public_key()
    assert first.entry(SIGNING_NAMESPACE, signing, "swim.key") == first.entry(
        NAMESPACE, f"{NETWORK}-swim-key", "swim.key"
    )
    assert len(first.entry(NAMESPACE, f"{NETWORK}-swim-key", "swim.key")) == 32


def test_the_fingerprint_printed_is_the_certificates_and_pins_the_site(first: Run) -> None:
    certificate = first.entry(NAMESPACE, f"{NETWORK}-site-tls", "tls.crt").decode()
    der = x509.load_pem_x509_certificate(certificate.encode()).public_bytes(
        serialization.Encoding.DER
    )
    assert first.fingerprint == hashlib.sha256(der).hexdigest() == fingerprint(certificate)
    # The same value is in the Secret's comment and in the kubectl patch on standard error.
    assert f"spec.trust.certFingerprint: {first.fingerprint}" in first.stdout
    assert (
        "kubectl patch gridsite east-edge --type merge -p "
        f"""'{{"spec":{{"trust":{{"certFingerprint":"{first.fingerprint}"}}}}}}'"""
    ) in first.stderr
    assert pinned_site("east-edge", first.fingerprint).spec.trust.cert_fingerprint == (
        first.fingerprint
    )


def pinned_site(name: str, pin: str) -> GridSite:
    (document,) = [
        d
        for d in yaml.safe_load_all((MESH / "10-sites.yaml").read_text())
        if d["metadata"]["name"] == name
    ]
    document["spec"]["trust"] = {"certFingerprint": pin}
    site = load_resource(document)
    assert isinstance(site, GridSite)
    return site


def test_a_run_for_another_site_reuses_the_ca_and_the_swim_key(first: Run, second: Run) -> None:
    assert set(second.secrets) == {
        (NAMESPACE, f"{NETWORK}-swim-key"),
        (NAMESPACE, f"{NETWORK}-ca"),
        (NAMESPACE, f"{NETWORK}-site-tls"),
    }
    for name, key in ((f"{NETWORK}-swim-key", "swim.key"), (f"{NETWORK}-ca", "ca.crt")):
        assert second.entry(NAMESPACE, name, key) == first.entry(NAMESPACE, name, key)
    ca = x509.load_pem_x509_certificate(second.entry(NAMESPACE, f"{NETWORK}-ca", "ca.crt"))
    west = x509.load_pem_x509_certificate(second.entry(NAMESPACE, f"{NETWORK}-site-tls", "tls.crt"))
    west.verify_directly_issued_by(ca)
    names = west.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName) == ["west-edge"]
    assert second.fingerprint != first.fingerprint
    assert second.entry(NAMESPACE, f"{NETWORK}-site-tls", "tls.key") != first.entry(
        NAMESPACE, f"{NETWORK}-site-tls", "tls.key"
    )
    assert "minted" not in second.stderr and "minted" in first.stderr


def test_the_swim_key_comes_from_the_key_secret_when_the_yaml_holds_it(
    call: Call, first: Run
) -> None:
    # After a key rotation the clusters' key Secret holds a keyring; it wins over the copy
    # in the signing Secret.
    ring = b"\n".join(base64.b64encode(bytes([n]) * 32) for n in (7, 9)) + b"\n"
    key_secret = first.secrets[(NAMESPACE, f"{NETWORK}-swim-key")]
    rotated = {**key_secret, "data": {"swim.key": base64.b64encode(ring).decode()}}
    signing = first.secrets[(SIGNING_NAMESPACE, f"{NETWORK}-ca-signing")]
    listing = {"apiVersion": "v1", "kind": "List", "items": [signing, rotated]}
    run = call(*site_args("east-core", "--from-secrets", "-"), stdin=yaml.safe_dump(listing))
    assert run.returncode == 0, run.stderr
    assert run.entry(NAMESPACE, f"{NETWORK}-swim-key", "swim.key") == ring


def test_without_a_site_only_the_signing_secret_is_printed(sandbox: Sandbox) -> None:
    run = sandbox.run("--network", NETWORK, "--signing-namespace", "grid-admin")
    assert run.returncode == 0, run.stderr
    assert entries_of(run.secrets) == {
        ("grid-admin", f"{NETWORK}-ca-signing", key) for key in ("ca.crt", "ca.key", "swim.key")
    }
    assert FINGERPRINT_LINE.search(run.stderr) is None


def test_names_and_options_are_honoured(call: Call, first: Run) -> None:
    signing = yaml.safe_dump(first.secrets[(SIGNING_NAMESPACE, f"{NETWORK}-ca-signing")])
    run = call(
        "--network", NETWORK, "--namespace", "mesh", "--site", "east-edge",
        "--key-secret", "k", "--ca-secret", "c", "--site-secret", "s",
        "--dns-name", "east-edge.glb-demo.example", "--ip-address", "10.0.0.7",
        "--days", "30", "--from-secrets", "-",
        stdin=signing,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert set(run.secrets) == {("mesh", "k"), ("mesh", "c"), ("mesh", "s")}
    site = x509.load_pem_x509_certificate(run.entry("mesh", "s", "tls.crt"))
    names = site.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName) == ["east-edge", "east-edge.glb-demo.example"]
    assert [str(ip) for ip in names.get_values_for_type(x509.IPAddress)] == ["10.0.0.7"]
    lifetime = site.not_valid_after_utc - datetime.now(UTC)
    assert 29 < lifetime.total_seconds() / 86400 <= 30


# --- the operator takes them, SWIM runs on them ------------------------------------------------


class SecretsFromYaml:
    """A SecretSource over the printed Secrets, as the API server would return them."""

    def __init__(self, *runs: Run) -> None:
        self.objects: dict[tuple[str, str], dict[str, str]] = {}
        for run in runs:
            for key, secret in run.secrets.items():
                self.objects[key] = dict(secret["data"])

    async def read_secret(self, namespace: str, name: str) -> Mapping[str, str] | None:
        return self.objects.get((namespace, name))


def wait_for(predicate: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


async def test_the_operator_loads_them_and_two_sites_form_a_mesh(first: Run, second: Run) -> None:
    tls = network_tls()
    now = datetime.now(UTC)
    east = await load_trust_material(SecretsFromYaml(first), tls, now)
    west = await load_trust_material(SecretsFromYaml(second), tls, now)
    assert east.certificate_fingerprint == first.fingerprint
    assert west.certificate_fingerprint == second.fingerprint
    assert east.keyring == west.keyring and len(east.keyring.primary) == 32
    assert east.credentials.trust_anchors == west.credentials.trust_anchors != ()
    # What the operator hands the node is what swim_credentials makes of the same PEM.
    assert east.certificate_pem and east.private_key_pem
    assert swim_credentials(east.certificate_pem, east.private_key_pem, east.ca_pem) == (
        east.credentials
    )
    nodes = [
        SwimNode(
            "127.0.0.1:0", site, None, material.keyring.keys, FAST, credentials=material.credentials
        )
        for site, material in (("east-edge", east), ("west-edge", west))
    ]
    try:
        for n in nodes:
            n.start()
        nodes[1].join([nodes[0].address])

        def hear_each_other() -> bool:
            return all(
                any(m.site == other.site and m.state == "alive" for m in n.members())
                for n, other in (nodes, nodes[::-1])
            )

        wait_for(hear_each_other)
    finally:
        for n in nodes:
            n.close()


def test_a_node_cannot_take_another_sites_name_with_these_secrets(first: Run) -> None:
    from grid.errors import SiteCredentialsError

    credentials = swim_credentials(
        first.entry(NAMESPACE, f"{NETWORK}-site-tls", "tls.crt").decode(),
        first.entry(NAMESPACE, f"{NETWORK}-site-tls", "tls.key").decode(),
        first.entry(NAMESPACE, f"{NETWORK}-ca", "ca.crt").decode(),
    )
    key = first.entry(NAMESPACE, f"{NETWORK}-swim-key", "swim.key")
    SwimNode("127.0.0.1:0", "east-edge", None, [key], credentials=credentials).close()
    with pytest.raises(SiteCredentialsError):
        SwimNode("127.0.0.1:0", "west-edge", None, [key], credentials=credentials)


# --- bad input ----------------------------------------------------------------------------------


def other_ca_key() -> str:
    ca = CertificateAuthority.generate("another CA", now=datetime.now(UTC))
    return base64.b64encode(ca.private_key_pem()).decode()


def edited_signing(first: Run, edit: Callable[[dict[str, Any]], None]) -> str:
    signing = yaml.safe_load(
        yaml.safe_dump(first.secrets[(SIGNING_NAMESPACE, f"{NETWORK}-ca-signing")])
    )
    edit(signing)
    return yaml.safe_dump(signing)


def _drop_ca_key(s: dict[str, Any]) -> None:
    del s["data"]["ca.key"]
    s["metadata"]["name"] = "something-else"


def _swap_ca_key(s: dict[str, Any]) -> None:
    s["data"]["ca.key"] = other_ca_key()


def _short_swim_key(s: dict[str, Any]) -> None:
    s["data"]["swim.key"] = base64.b64encode(b"x" * 16).decode()


def _other_network(s: dict[str, Any]) -> None:
    s["metadata"]["labels"]["grid.praxis-proxy.io/network"] = "another-mesh"


def _ca_key_garbage(s: dict[str, Any]) -> None:
    s["data"]["ca.key"] = base64.b64encode(b"-----BEGIN PRIVATE KEY-----\nnope\n").decode()


BAD_USAGE: list[tuple[list[str], str]] = [
    ([], "--network is required"),
    (["--network", NETWORK, "--site", "east-edge"], "--namespace is required"),
    (["--network", "Glb_Demo"], "--network 'Glb_Demo' is not a DNS name"),
    (site_args("East_Edge"), "--site 'East_Edge' is not a DNS name"),
    (site_args("e" * 65), "--site"),
    (
        site_args("east-edge", "--signing-namespace", NAMESPACE),
        "the signing Secret holds the CA key",
    ),
    (["--network", NETWORK, "--from-secrets", "-"], "give --site"),
    (["--network", NETWORK, "--namespace", NAMESPACE], "give --site"),
    (site_args("east-edge", "--ca-secret", "x", "--site-secret", "x"), "three different names"),
    (site_args("east-edge", "--ip-address", "not-an-ip"), "is not an IP address"),
    (site_args("east-edge", "--days", "0"), "--days must be between"),
    (site_args("east-edge", "--from-secrets", "no-such-file.yaml"), "cannot read"),
]


@pytest.mark.parametrize(("args", "message"), BAD_USAGE, ids=lambda v: str(v)[:50])
def test_bad_usage_is_one_line_and_status_2(call: Call, args: list[str], message: str) -> None:
    run = call(*args)
    assert run.returncode == 2
    assert run.stdout == ""
    assert run.stderr.count("\n") == 1 and run.stderr.startswith("grid secrets: ")
    assert message in run.stderr


BAD_SIGNING: list[tuple[Callable[[dict[str, Any]], None], str]] = [
    (_drop_ca_key, "holds no signing Secret"),
    (_swap_ca_key, "ca.key is not the private key of the first certificate in ca.crt"),
    (_short_swim_key, "a SWIM key is 32 bytes"),
    (_other_network, "is the signing Secret of network another-mesh, not glb-demo"),
    (_ca_key_garbage, "ca.key is not an unencrypted PEM private key"),
]


@pytest.mark.parametrize(("edit", "message"), BAD_SIGNING, ids=lambda v: getattr(v, "__name__", v))
def test_an_unusable_signing_secret_is_one_line_and_status_2(
    call: Call, first: Run, edit: Callable[[dict[str, Any]], None], message: str
) -> None:
    run = call(*site_args("west-edge", "--from-secrets", "-"), stdin=edited_signing(first, edit))
    assert run.returncode == 2
    assert run.stdout == ""
    assert run.stderr.count("\n") == 1 and run.stderr.startswith("grid secrets: ")
    assert message in run.stderr


def test_broken_yaml_is_refused_without_quoting_it(sandbox: Sandbox, first: Run) -> None:
    # The YAML parser's own message would quote the line around the error: a key.
    text = first.stdout.replace("  ca.key: ", "  ca.key: [", 1)
    run = sandbox.run(*site_args("west-edge", "--from-secrets", "-"), stdin=text)
    assert run.returncode == 2
    assert re.fullmatch(
        r"grid secrets: --from-secrets \(standard input\) is not YAML \(line \d+\)\n", run.stderr
    )


def test_standard_output_is_never_a_terminal(sandbox: Sandbox) -> None:
    controller, terminal = pty.openpty()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "grid.cli", "secrets", *site_args("east-edge")],
            stdin=subprocess.DEVNULL,
            stdout=terminal,
            stderr=subprocess.PIPE,
            text=True,
            cwd=sandbox.work,
            timeout=60,
            check=False,
        )
        os.close(terminal)
        terminal = -1
        shown = b""
        while True:
            try:
                chunk = os.read(controller, 4096)
            except OSError:
                break
            if not chunk:
                break
            shown += chunk
    finally:
        os.close(controller)
        if terminal != -1:
            os.close(terminal)
    sandbox.stderrs.append(done.stderr)
    assert done.returncode == 2
    assert "standard output is a terminal" in done.stderr
    assert shown == b""


# --- README, docs/install.md and examples agree -------------------------------------------------


def install_block() -> list[str]:
    """The commands of the README's "Install in a cluster" block, continuation lines
    joined."""
    text = README.read_text()
    section = text[text.index("## Install in a cluster") :]
    block = section[section.index("```sh\n") + 6 : section.index("\n```", section.index("```sh"))]
    return block.replace("\\\n", " ").splitlines()


def readme_grid_secrets() -> list[str]:
    (command,) = [c for c in install_block() if c.startswith("grid secrets ")]
    grid_part, kubectl_part = command.split("|")
    assert shlex.split(kubectl_part) == ["kubectl", "apply", "-f", "-"]
    return shlex.split(grid_part)[2:]


def option(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


@pytest.fixture(scope="module")
def readme_run(sandbox: Sandbox) -> Run:
    run = sandbox.run(*readme_grid_secrets())
    assert run.returncode == 0, run.stderr
    return run


def test_the_readme_creates_exactly_the_secrets_the_examples_refer_to(readme_run: Run) -> None:
    args = readme_grid_secrets()
    run = readme_run
    tls = network_tls()
    printed = entries_of(run.secrets)
    assert printed == referenced_entries(tls) | SIGNING_ENTRIES
    (network,) = load_resources_from_dir(MESH).networks
    assert option(args, "--network") == network.metadata.name
    site_names = {s.metadata.name for s in load_resources_from_dir(MESH).sites}
    assert option(args, "--site") in site_names


def test_the_readme_makes_the_namespaces_and_binds_only_the_site_namespace() -> None:
    commands = [shlex.split(c) for c in install_block()]
    created = {c[3] for c in commands if c[:3] == ["kubectl", "create", "namespace"]}
    tls = network_tls()
    assert tls.swim_key_ref and tls.ca_secret_ref and tls.site_cert_secret_ref
    site_namespaces = {
        ref.namespace for ref in (tls.swim_key_ref, tls.ca_secret_ref, tls.site_cert_secret_ref)
    }
    assert created == site_namespaces | {SIGNING_NAMESPACE}
    overlay = yaml.safe_load(OVERLAY.read_text())
    bindings = [c for c in commands if c[:1] == ["kubectl"] and "rolebinding" in c]
    assert len(bindings) == 1
    (binding,) = bindings
    assert option(binding, "-n") in site_namespaces and SIGNING_NAMESPACE not in binding
    assert "--clusterrole=grid-operator-namespaced" in binding
    assert f"--serviceaccount={overlay['namespace']}:grid-operator" in binding
    rollout = next(c for c in commands if "rollout" in c)
    assert option(rollout, "-n") == overlay["namespace"]
    assert ["kubectl", "apply", "-f", "examples/mesh/"] in commands


def test_the_readme_pins_the_certificate_it_made(readme_run: Run) -> None:
    """The README reads the fingerprint back from the site Secret and patches the GridSite
    of the site ``grid secrets`` issued for; the pipeline gives the fingerprint printed."""
    args = readme_grid_secrets()
    block = install_block()
    (reading,) = [c for c in block if c.startswith("fingerprint=$(")]
    match = re.fullmatch(r"fingerprint=\$\((?P<get>kubectl[^|]*)\|(?P<rest>.*)\)", reading)
    assert match is not None
    get = shlex.split(match["get"])
    tls = network_tls()
    site_ref = tls.site_cert_secret_ref
    assert site_ref is not None
    assert get == [
        "kubectl", "-n", site_ref.namespace, "get", "secret", site_ref.name,
        "-o", "jsonpath={.data.tls\\.crt}",
    ]  # fmt: skip
    (patch,) = [shlex.split(c) for c in block if c.startswith("kubectl patch gridsite")]
    assert patch[:6] == ["kubectl", "patch", "gridsite", option(args, "--site"), "--type", "merge"]
    run = readme_run
    certificate = run.secrets[(site_ref.namespace, site_ref.name)]["data"]["tls.crt"]
    if shutil.which("openssl") is None or shutil.which("base64") is None:
        pytest.skip("openssl is not installed")
    read_back = subprocess.run(
        ["bash", "-c", f"printf %s {shlex.quote(certificate)} | {match['rest']}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert normalize_fingerprint(read_back) == run.fingerprint
    body = patch[patch.index("-p") + 1].replace("$fingerprint", read_back)
    pin = yaml.safe_load(body)["spec"]["trust"]["certFingerprint"]
    assert pinned_site(option(args, "--site"), pin).spec.trust.cert_fingerprint == run.fingerprint


def test_install_guide_and_examples_run_grid_secrets_as_the_readme_does() -> None:
    readme = next(c for c in install_block() if c.startswith("grid secrets "))
    assert readme in INSTALL.read_text()
    assert readme in (EXAMPLES / "README.md").read_text()
    assert readme.split(" | ")[0] in (EXAMPLES / "secrets" / "swim-key.yaml").read_text()
    # Another cluster's command in the guide reads the signing Secret from where it went.
    guide = " ".join(INSTALL.read_text().replace("\\\n", " ").split())
    assert (
        f"kubectl -n {SIGNING_NAMESPACE} get secret {NETWORK}-ca-signing -o yaml "
        f"| grid secrets --network {NETWORK} --namespace {NAMESPACE} --site west-edge "
        "--from-secrets -"
    ) in guide


# --- no key material anywhere but standard output -------------------------------------------


def windows(text: str, width: int = 8) -> Iterator[str]:
    return (text[i : i + width] for i in range(len(text) - width + 1))


def key_forms(pem: bytes) -> list[str]:
    """A private key as it could leak: its PEM body (base64 of the DER, lines joined), the
    base64 of the whole PEM (a Secret's data), the DER in hex."""
    body = "".join(line for line in pem.decode().splitlines() if not line.startswith("-----"))
    der = base64.b64decode(body)
    return [body, base64.b64encode(pem).decode(), der.hex()]


def test_no_piece_of_a_private_key_reaches_standard_error_or_a_file(
    sandbox: Sandbox, first: Run, second: Run
) -> None:
    """Every run of this module (in order, the canary last) and two error paths that handle
    the same keys: no 8-character piece of a private key on standard error, no file."""
    sandbox.run(
        *site_args("west-edge", "--from-secrets", "-"),
        stdin=first.stdout.replace("  ca.key: ", "  ca.key: [", 1),
    )
    sandbox.run(
        *site_args("west-edge", "--from-secrets", "-"),
        stdin=edited_signing(first, _swap_ca_key),
    )
    keys = [
        first.entry(SIGNING_NAMESPACE, f"{NETWORK}-ca-signing", "ca.key"),
        first.entry(NAMESPACE, f"{NETWORK}-site-tls", "tls.key"),
        second.entry(NAMESPACE, f"{NETWORK}-site-tls", "tls.key"),
    ]
    pieces = {w for key in keys for form in key_forms(key) for w in windows(form)}
    assert len(pieces) > 1000
    for stderr in sandbox.stderrs:
        assert not [w for w in windows(stderr) if w in pieces]
    # Nothing was written: not in the working directory, the home or the temporary one.
    assert sandbox.files() == []


def test_yaml_aliases_in_the_secrets_given_are_refused(sandbox: Sandbox) -> None:
    bomb = 'a: &a ["x","x"]\nb: &b [*a,*a]\nc: &c [*b,*b]\nd: [*c,*c]\n'
    run = sandbox.run(*site_args("west-edge", "--from-secrets", "-"), stdin=bomb)
    assert run.returncode == 2
    assert re.fullmatch(
        r"grid secrets: --from-secrets \(standard input\) is not YAML \(line \d+\)\n", run.stderr
    )
