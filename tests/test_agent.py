"""The standalone agent on one site, in process: real files, a real SWIM node on 127.0.0.1,
a real provider endpoint and real HTTP endpoints. Bad input (YAML, resources, key files)
is reported with its file and reason while the last good state keeps serving."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import secrets
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from grid.agent import Agent, AgentOptions, PerNetwork, read_key_file
from grid.agent.keys import merge_keys
from grid.agent.network import credential_state
from grid.agent.options import parse_key_files
from grid.cli import main
from grid.demo import DemoProvider
from grid.errors import AgentConfigError, ConfigError, KeyFileError
from grid.models.phases import CredentialState
from grid.render.validate import ExpectedScope, validate_overlay
from grid.trust import IssuedCertificate
from support.swim import site_certificate
from support.swim import test_ca as swim_ca

NETWORK = "lab"
SITE = "site-a"
GATEWAY = ("grid-system", "edge-gateway")
OVERLAY = Path("overlays") / NETWORK / GATEWAY[0] / GATEWAY[1] / "grid-config.json"


def network_yaml(probe: str = "200ms", render_interval: str | None = None) -> str:
    rendering = "" if render_interval is None else f"  renderInterval: {render_interval}\n"
    return f"""\
apiVersion: grid.praxis-proxy.io/v1alpha1
kind: GridNetwork
metadata: {{name: {NETWORK}}}
spec:
  gridId: lab-grid
  gatewayRefs: [{{name: {GATEWAY[1]}, namespace: {GATEWAY[0]}}}]
  swim: {{probeInterval: {probe}, suspicionTimeout: 1s}}
{rendering}"""


SITE_YAML = f"""\
apiVersion: grid.praxis-proxy.io/v1alpha1
kind: GridSite
metadata:
  name: {SITE}
  labels: {{grid.praxis-proxy.io/site: {SITE}}}
spec:
  gridNetworkRef: {NETWORK}
  region: us-east
  zone: us-east-1a
"""


def provider_yaml(name: str, url: str, model: str = "llama") -> str:
    return f"""\
apiVersion: grid.praxis-proxy.io/v1alpha1
kind: InferenceProvider
metadata: {{name: {name}}}
spec:
  gridNetworkRef: {NETWORK}
  backendKind: local
  providerKind: self_hosted
  models: [{{name: {model}}}]
  endpoint: {url}
  siteSelector: {{matchLabels: {{grid.praxis-proxy.io/site: {SITE}}}}}
  healthCheck: {{path: /health, interval: 1s, timeout: 500ms, healthyThreshold: 1}}
"""


async def eventually(what: str, predicate: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout}s")
        await asyncio.sleep(0.05)


def write_tls(directory: Path, issued: IssuedCertificate) -> Path:
    """``tls.crt``, ``tls.key`` and the test CA's ``ca.crt`` in ``directory``."""
    issued.write(directory, "tls")
    (directory / "ca.crt").write_text(swim_ca().certificate_pem)
    return directory


class Lab:
    """One site's directories, key file and TLS files."""

    def __init__(self, root: Path) -> None:
        self.resources = root / "resources"
        self.state = root / "state"
        self.key = root / "swim.key"
        self.tls = write_tls(root / "tls", site_certificate(SITE))
        self.resources.mkdir()
        self.key.write_bytes(secrets.token_bytes(32))
        self.key.chmod(0o600)

    def options(self, **overrides: Any) -> AgentOptions:
        settings: dict[str, Any] = {
            "resources": self.resources,
            "state_dir": self.state,
            "bind": PerNetwork("127.0.0.1:0"),
            "key_files": {None: (self.key,)},
            "tls_dir": self.tls,
            "http": "127.0.0.1:0",
            "reload_interval_s": 0.1,
            "tick_s": 0.1,
        }
        settings.update(overrides)
        return AgentOptions(**settings)

    def write(self, name: str, text: str) -> None:
        path = self.resources / name
        path.write_text(text)
        # Make sure the change is seen even within one mtime tick.
        stamp = time.time_ns() + 10_000_000
        os.utime(path, ns=(stamp, stamp))

    @property
    def overlay(self) -> Path:
        return self.state / OVERLAY

    def overlay_names(self) -> list[str]:
        if not self.overlay.exists():
            return []
        document = json.loads(self.overlay.read_text())
        return [c["name"] for c in document["overlay"]["candidates"]]


def agent_args(lab: Lab, *extra: str, key: bool = True, tls: bool = True) -> list[str]:
    """``grid agent`` arguments for ``lab`` that start; ``extra`` adds or overrides (a
    later ``--bind`` is refused as given twice, so ``--bind`` is only added when absent)."""
    args = ["agent", "--resources", str(lab.resources), "--state-dir", str(lab.state)]
    if key:
        args += ["--key-file", str(lab.key)]
    if tls:
        args += ["--tls-dir", str(lab.tls)]
    if "--bind" not in extra:
        args += ["--bind", "127.0.0.1:0"]
    return [*args, *extra]


@pytest.fixture
async def provider() -> AsyncIterator[DemoProvider]:
    endpoint = DemoProvider(
        queue_depth=1, kv_cache_utilization=0.1, prefix_cache_hit_ratio=0.5, p99_latency_s=0.2
    )
    await endpoint.start()
    yield endpoint
    await endpoint.stop()


@pytest.fixture
def lab(tmp_path: Path) -> Lab:
    return Lab(tmp_path)


async def fetch(agent: Agent, path: str) -> tuple[int, str]:
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://{agent.http_address}{path}") as response,
    ):
        return response.status, await response.text()


# --- serving -----------------------------------------------------------------------------


async def test_the_agent_writes_overlays_and_status_and_serves_http(
    lab: Lab, provider: DemoProvider
) -> None:
    lab.write("00-network.yaml", network_yaml())
    lab.write("10-site.yaml", SITE_YAML)
    lab.write("20-llama.yaml", provider_yaml("llama-a", provider.url))
    agent = Agent(lab.options())
    await agent.start()
    try:
        await eventually("overlay written", lambda: lab.overlay_names() == ["llama"])
        verdict = validate_overlay(
            lab.overlay.read_bytes(), ExpectedScope(network=NETWORK, local_site=SITE)
        )
        assert verdict.accepted, verdict.detail
        status_file = lab.state / "status" / "InferenceProvider" / "llama-a.json"
        await eventually(
            "provider Available",
            lambda: (
                status_file.exists()
                and json.loads(status_file.read_text())["status"]["phase"] == "Available"
            ),
        )
        assert (lab.state / "status" / "GridNetwork" / f"{NETWORK}.json").exists()
        assert (lab.state / "status" / "GridSite" / f"{SITE}.json").exists()

        assert await fetch(agent, "/healthz") == (200, "ok\n")
        status, body = await fetch(agent, "/status")
        document = json.loads(body)
        assert status == 200 and document["site"] == SITE
        lab_status = document["networks"][NETWORK]
        assert lab_status["membership"]["running"] is True
        assert lab_status["overlays"][0]["candidates"][0]["name"] == "llama"
        assert lab_status["leftOut"] == [] and lab_status["notOffered"] == []
        status, metrics = await fetch(agent, "/metrics")
        assert status == 200
        assert (
            'grid_overlay_candidates{gateway="edge-gateway",gateway_namespace="grid-system",network="lab"} 1.0'
            in metrics
        )
        assert "grid_swim" in metrics
        assert (await fetch(agent, "/nothing-here"))[0] == 404
    finally:
        await agent.stop()
    assert not any(p.name.endswith(".tmp") for p in lab.state.rglob("*"))


async def test_an_unchanged_revision_is_not_written_again(lab: Lab, provider: DemoProvider) -> None:
    lab.write("00-network.yaml", network_yaml())
    lab.write("10-site.yaml", SITE_YAML)
    lab.write("20-llama.yaml", provider_yaml("llama-a", provider.url))
    # The provider's status, whose health-check count says how many checks passed, is
    # rewritten every second instead of every 5 s: the checks come a second apart.
    agent = Agent(lab.options(status_interval_s=1.0))
    await agent.start()
    try:
        await eventually("overlay written", lambda: lab.overlay_names() == ["llama"])
        status_file = lab.state / "status" / "InferenceProvider" / "llama-a.json"

        def health_checks_passed() -> int:
            if not status_file.exists():
                return 0
            status = json.loads(status_file.read_text())["status"]
            return int((status.get("lastHealthCheck") or {}).get("consecutiveSuccesses", 0))

        # A second passed health check comes after the pass that settled freshness; two more
        # checks (a second apart) span several refreshes, none of which may rewrite it.
        await eventually("two health checks passed", lambda: health_checks_passed() >= 2)
        settled = health_checks_passed()
        before = lab.overlay.stat()
        await eventually("two more health checks", lambda: health_checks_passed() >= settled + 2)
        after = lab.overlay.stat()
        assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
        assert agent.networks[NETWORK].overlay_writes[GATEWAY] >= 1
    finally:
        await agent.stop()


async def test_graceful_stop_leaves_the_mesh_and_flushes(lab: Lab) -> None:
    lab.write("00-network.yaml", network_yaml())
    lab.write("10-site.yaml", SITE_YAML)
    agent = Agent(lab.options())
    await agent.start()
    node = agent.networks[NETWORK].node
    assert node is not None and node.running
    await agent.stop()
    assert not node.running
    status = json.loads((lab.state / "status" / "GridNetwork" / f"{NETWORK}.json").read_text())
    membership = next(c for c in status["status"]["conditions"] if c["type"] == "MembershipReady")
    assert membership["status"] == "False"


# --- bad input ---------------------------------------------------------------------------


async def test_invalid_yaml_is_reported_and_the_last_good_state_keeps_serving(
    lab: Lab, provider: DemoProvider
) -> None:
    lab.write("00-network.yaml", network_yaml())
    lab.write("10-site.yaml", SITE_YAML)
    lab.write("20-llama.yaml", provider_yaml("llama-a", provider.url))
    agent = Agent(lab.options())
    await agent.start()
    try:
        await eventually("overlay written", lambda: lab.overlay_names() == ["llama"])
        revision = json.loads(lab.overlay.read_text())["revision"]["value"]
        lab.write("20-llama.yaml", "kind: InferenceProvider\nspec: [unclosed\n")
        await eventually("reload refused", lambda: not agent.report.applied)
        (error,) = agent.report.errors
        assert error.file is not None and error.file.endswith("20-llama.yaml")
        assert "YAML error at line" in error.reason
        network_status = lab.state / "status" / "GridNetwork" / f"{NETWORK}.json"
        await eventually(
            "network degraded",
            lambda: json.loads(network_status.read_text())["status"]["phase"] == "Degraded",
        )
        assert json.loads(lab.overlay.read_text())["revision"]["value"] == revision
        assert agent.networks[NETWORK].engine.overlays[GATEWAY].overlay is not None
        status = json.loads((await fetch(agent, "/status"))[1])
        assert status["resources"]["applied"] is False
        assert status["resources"]["errors"][0]["file"].endswith("20-llama.yaml")

        lab.write("20-llama.yaml", provider_yaml("llama-a", provider.url, model="llama-2"))
        await eventually("reload applied", lambda: lab.overlay_names() == ["llama-2"])
        assert agent.report.applied and not agent.report.errors
    finally:
        await agent.stop()


async def test_a_bad_resource_is_named_by_file_field_and_reason(
    lab: Lab, provider: DemoProvider
) -> None:
    lab.write("00-network.yaml", network_yaml())
    lab.write("10-site.yaml", SITE_YAML)
    lab.write("20-llama.yaml", provider_yaml("llama-a", provider.url))
    bad = provider_yaml("qwen-a", provider.url, model="qwen").replace(
        "interval: 1s", "interval: soon"
    )
    lab.write("30-qwen.yaml", bad)
    agent = Agent(lab.options())
    await agent.start()  # at start, the valid resources are used and the rest reported
    try:
        (error,) = agent.report.errors
        assert (error.path, error.name) == ("spec.healthCheck.interval", "qwen-a")
        assert error.file is not None and error.file.endswith("30-qwen.yaml")
        assert "duration" in error.reason
        await eventually("valid provider served", lambda: lab.overlay_names() == ["llama"])
    finally:
        await agent.stop()


async def test_an_unreadable_key_file_is_reported_and_local_overlays_still_flow(
    lab: Lab, provider: DemoProvider
) -> None:
    lab.write("00-network.yaml", network_yaml())
    lab.write("10-site.yaml", SITE_YAML)
    lab.write("20-llama.yaml", provider_yaml("llama-a", provider.url))
    missing = lab.key.with_name("missing.key")
    agent = Agent(lab.options(key_files={None: (missing,)}))
    await agent.start()
    try:
        runtime = agent.networks[NETWORK]
        assert runtime.node is None
        assert runtime.swim_error is not None and "missing.key" in runtime.swim_error
        await eventually("local overlay", lambda: lab.overlay_names() == ["llama"])
        assert (await fetch(agent, "/healthz"))[0] == 503
        status = json.loads((await fetch(agent, "/status"))[1])
        assert "missing.key" in status["networks"][NETWORK]["membership"]["swimError"]

        missing.write_bytes(secrets.token_bytes(32))
        await eventually("SWIM started", lambda: runtime.node is not None and runtime.node.running)
        assert (await fetch(agent, "/healthz"))[0] == 200
    finally:
        await agent.stop()


async def test_editing_the_key_file_rotates_the_keyring(lab: Lab) -> None:
    lab.write("00-network.yaml", network_yaml())
    lab.write("10-site.yaml", SITE_YAML)
    old, new = secrets.token_bytes(32), secrets.token_bytes(32)
    encode = lambda key: base64.b64encode(key).decode()  # noqa: E731
    lab.key.write_text(f"{encode(old)}\n")
    agent = Agent(lab.options())
    await agent.start()
    try:
        node = agent.networks[NETWORK].node
        assert node is not None
        (first,) = node.key_ids()
        for text in (f"{encode(old)}\n{encode(new)}\n", f"{encode(new)}\n{encode(old)}\n"):
            lab.key.write_text(text)
            os.utime(lab.key, ns=(time.time_ns() + 10**7,) * 2)
            await eventually("keys installed", lambda: len(node.key_ids()) == 2)
        await eventually("new key seals", lambda: node.key_ids()[0] != first)
        second = node.key_ids()[0]
        lab.key.write_text("not base64 at all!\n")
        os.utime(lab.key, ns=(time.time_ns() + 2 * 10**7,) * 2)
        await eventually(
            "bad file reported", lambda: agent.networks[NETWORK].swim_error is not None
        )
        assert node.key_ids()[0] == second  # the keyring stays as it was
        lab.key.write_text(f"{encode(new)}\n")
        os.utime(lab.key, ns=(time.time_ns() + 3 * 10**7,) * 2)
        await eventually("old key forgotten", lambda: node.key_ids() == [second])
    finally:
        await agent.stop()


async def test_startup_refusals_say_what_is_missing(lab: Lab, tmp_path: Path) -> None:
    with pytest.raises(AgentConfigError, match="no GridNetwork"):
        lab.write("10-site.yaml", SITE_YAML)
        await Agent(lab.options()).start()
    lab.write("00-network.yaml", network_yaml())
    lab.write("11-other.yaml", SITE_YAML.replace(f"name: {SITE}", "name: site-b"))
    with pytest.raises(AgentConfigError, match=r"give --site \[lab=\]NAME"):
        await Agent(lab.options()).start()
    with pytest.raises(AgentConfigError, match="cannot read resource directory"):
        await Agent(lab.options(resources=tmp_path / "nowhere")).start()


async def test_swim_credentials_are_required_and_checked_at_start(lab: Lab, tmp_path: Path) -> None:
    lab.write("00-network.yaml", network_yaml())
    lab.write("10-site.yaml", SITE_YAML)
    with pytest.raises(AgentConfigError) as missing:
        await Agent(lab.options(tls_dir=None)).start()
    assert str(missing.value) == (
        "SWIM needs the site certificate and key: put tls.crt and tls.key in --tls-dir"
    )
    empty = tmp_path / "empty-tls"
    empty.mkdir()
    with pytest.raises(AgentConfigError, match=f"put tls.crt and tls.key in {empty} "):
        await Agent(lab.options(tls_dir=empty)).start()
    # A certificate for another site: the node refuses it, and the agent does not start.
    other = write_tls(tmp_path / "other-tls", site_certificate("site-b"))
    with pytest.raises(AgentConfigError) as refused:
        await Agent(lab.options(tls_dir=other)).start()
    assert str(refused.value).startswith(f"network {NETWORK}: SWIM cannot start: ")
    assert f'does not name site "{SITE}"' in str(refused.value)
    # A key that is not a private key: named, never quoted.
    garbled = write_tls(tmp_path / "garbled-tls", site_certificate(SITE))
    (garbled / "tls.key").write_text("-----BEGIN PRIVATE KEY-----\nc2VjcmV0\n")
    with pytest.raises(AgentConfigError, match="not an unencrypted PEM private key") as bad:
        await Agent(lab.options(tls_dir=garbled)).start()
    assert "c2VjcmV0" not in str(bad.value)


def test_grid_agent_without_tls_files_exits_2_saying_what_to_put_where(lab: Lab) -> None:
    lab.write("00-network.yaml", network_yaml())
    lab.write("10-site.yaml", SITE_YAML)
    command = [sys.executable, "-m", "grid.cli", *agent_args(lab, tls=False)]
    finished = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert finished.returncode == 2, finished.stderr
    assert finished.stderr.strip().splitlines()[-1] == (
        "grid agent: SWIM needs the site certificate and key: put tls.crt and tls.key in --tls-dir"
    )


def test_the_command_refuses_bad_options_with_exit_2(
    lab: Lab, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        [
            "agent",
            "--resources",
            str(lab.resources),
            "--state-dir",
            str(lab.state),
            "--bind",
            "127.0.0.1:0",
            "--bind",
            "127.0.0.1:1",
        ]
    )
    assert code == 2
    assert "--bind is given twice" in capsys.readouterr().err


# --- pieces --------------------------------------------------------------------------------


def test_key_files_raw_or_base64_and_never_quoted(tmp_path: Path) -> None:
    raw = tmp_path / "raw.key"
    raw.write_bytes(b"k" * 32)
    assert read_key_file(raw).keys == (b"k" * 32,)
    lines = tmp_path / "lines.key"
    a, b = secrets.token_bytes(32), secrets.token_bytes(32)
    lines.write_text(
        f"# rotation\n{base64.b64encode(a).decode()}\n\n{base64.b64encode(b).decode()}\n"
    )
    loaded = read_key_file(lines)
    assert loaded.keys == (a, b)
    assert repr(loaded) == f"KeyFile(path={str(lines)!r}, keys=2)"
    assert merge_keys([loaded, read_key_file(raw)]) == (a, b, b"k" * 32)
    short = tmp_path / "short.key"
    short.write_text(base64.b64encode(b"secret-material-16").decode())
    with pytest.raises(KeyFileError, match="line 1: decodes to 18 bytes") as caught:
        read_key_file(short)
    assert "secret-material" not in str(caught.value)
    with pytest.raises(KeyFileError, match="cannot read"):
        read_key_file(tmp_path / "absent.key")
    binary = tmp_path / "binary.key"
    binary.write_bytes(b"\xff" * 40)
    with pytest.raises(KeyFileError, match="neither 32 raw bytes nor base64"):
        read_key_file(binary)


def test_key_file_options_group_by_network() -> None:
    grouped = parse_key_files(["a.key", "lab=/keys/lab.key", "lab=/keys/next.key"])
    assert grouped == {
        None: (Path("a.key"),),
        "lab": (Path("/keys/lab.key"), Path("/keys/next.key")),
    }
    with pytest.raises(ConfigError):
        PerNetwork.parse(["lab=1.2.3.4:1", "lab=1.2.3.4:2"], "--bind")


def test_credentials_are_judged_by_presence_and_size_only(tmp_path: Path) -> None:
    secret = tmp_path / "grid" / "token"
    assert credential_state(tmp_path, "grid", "token", "value") is CredentialState.SECRET_NOT_FOUND
    secret.mkdir(parents=True)
    assert credential_state(tmp_path, "grid", "token", "value") is CredentialState.KEY_NOT_FOUND
    (secret / "value").write_bytes(b"")
    assert credential_state(tmp_path, "grid", "token", "value") is CredentialState.EMPTY
    (secret / "value").write_bytes(b"x")
    (secret / "value").chmod(0)  # presence and size need no read permission
    assert credential_state(tmp_path, "grid", "token", "value") is CredentialState.VALID


async def test_two_networks_on_one_site_stay_separate(lab: Lab, provider: DemoProvider) -> None:
    lab.write("00-network.yaml", network_yaml())
    lab.write(
        "01-other.yaml",
        network_yaml()
        .replace(f"name: {NETWORK}", "name: other")
        .replace("gridId: lab-grid", "gridId: other-grid"),
    )
    lab.write(
        "10-site.yaml",
        SITE_YAML
        + "---\n"
        + SITE_YAML.replace(f"gridNetworkRef: {NETWORK}", "gridNetworkRef: other")
        .replace(f"name: {SITE}\n", "name: site-a-other\n")
        .replace(f"site: {SITE}}}", "site: site-a-other}"),
    )
    lab.write("20-llama.yaml", provider_yaml("llama-a", provider.url))
    lab.write(
        "21-qwen.yaml",
        provider_yaml("qwen-a", provider.url, model="qwen")
        .replace(f"gridNetworkRef: {NETWORK}", "gridNetworkRef: other")
        .replace(f"site: {SITE}}}", "site: site-a-other}"),
    )
    other_key = lab.key.with_name("other.key")
    other_key.write_bytes(secrets.token_bytes(32))
    other_key.chmod(0o600)
    sites = PerNetwork(SITE, {"other": "site-a-other"})
    both = swim_ca().issue(SITE, now=datetime.now(UTC), dns_names=("site-a-other",))
    agent = Agent(
        lab.options(
            site=sites,
            key_files={None: (lab.key,), "other": (other_key,)},
            tls_dir=write_tls(lab.tls.with_name("both"), both),
        )
    )
    await agent.start()
    try:
        lab_net, other_net = agent.networks[NETWORK], agent.networks["other"]
        assert lab_net.node is not None and other_net.node is not None
        assert lab_net.node.address != other_net.node.address
        assert lab_net.node.key_ids() != other_net.node.key_ids()
        other_overlay = (
            lab.state / "overlays" / "other" / GATEWAY[0] / GATEWAY[1] / "grid-config.json"
        )
        await eventually(
            "both overlays", lambda: lab.overlay_names() == ["llama"] and other_overlay.exists()
        )
        other_document = json.loads(other_overlay.read_text())
        assert [c["name"] for c in other_document["overlay"]["candidates"]] == ["qwen"]
        assert other_document["scope"]["network"] == "other"
        assert lab_net.engine.state is not other_net.engine.state
    finally:
        await agent.stop()


async def test_a_rotated_site_certificate_is_advertised_and_presented(
    lab: Lab, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from grid.trust import CertificateAuthority, probe_site

    now = datetime.now(UTC)
    ca = CertificateAuthority.generate("lab CA", now=now)
    tls = tmp_path / "tls"
    first = ca.issue(SITE, now=now)
    first.write(tls, "tls")
    ca.write(tls, "ca")
    (tls / "ca.key").unlink()
    lab.write("00-network.yaml", network_yaml())
    lab.write("10-site.yaml", SITE_YAML)
    agent = Agent(lab.options(tls_dir=tls, egress_listen="127.0.0.1:0"))
    await agent.start()
    try:
        engine = agent.networks[NETWORK].engine
        address = agent.egress_address
        assert address is not None

        async def presented() -> str | None:
            result = await probe_site(
                address,
                ca_pem=ca.certificate_pem,
                client_cert=tls / "tls.crt",
                client_key=tls / "tls.key",
            )
            return result.fingerprint if result.ok else None

        assert await presented() == first.fingerprint
        await eventually("advertised", lambda: engine.state.cert_pem(SITE) == first.certificate_pem)
        runtime = agent.networks[NETWORK]
        first_node = runtime.node
        assert first_node is not None and first_node.running

        second = ca.issue(SITE, now=now)
        second.write(tls, "tls")
        await eventually(
            "new one advertised", lambda: engine.state.cert_pem(SITE) == second.certificate_pem
        )
        assert await presented() == second.fingerprint
        # SWIM signs with the new certificate, renewed in place: the same node, no restart.
        await eventually("SWIM renewed", lambda: first_node.stats()["renewals"] == 1)
        assert runtime.node is first_node and first_node.running
        assert runtime.swim_error is None
        signing_node = first_node

        (tls / "tls.crt").write_text(second.certificate_pem + second.private_key_pem().decode())
        await eventually(
            "the bad files refused",
            lambda: any("new TLS files not used" in r.getMessage() for r in caplog.records),
        )
        assert engine.state.cert_pem(SITE) == second.certificate_pem
        assert await presented() == second.fingerprint
        assert runtime.node is signing_node and signing_node.running

        # Readable files holding another site's certificate: the node refuses them and
        # keeps signing with the current one, and that one stays advertised.
        ca.issue("another-site", now=now).write(tls, "tls")
        await eventually(
            "the other site's certificate refused",
            lambda: "does not name site" in (runtime.swim_error or ""),
        )
        assert runtime.node is signing_node and signing_node.running
        engine.refresh(datetime.now(UTC))
        assert engine.state.cert_pem(SITE) == second.certificate_pem
        # The egress listener keeps presenting the certificate the node signs with.
        assert await presented() == second.fingerprint
    finally:
        await agent.stop()


async def test_changed_swim_settings_restart_the_node(lab: Lab, provider: DemoProvider) -> None:
    lab.write("00-network.yaml", network_yaml(probe="200ms"))
    lab.write("10-site.yaml", SITE_YAML)
    lab.write("20-llama.yaml", provider_yaml("llama-a", provider.url))
    agent = Agent(lab.options())
    await agent.start()
    try:
        runtime = agent.networks[NETWORK]
        first = runtime.node
        assert first is not None
        await eventually("overlay written", lambda: lab.overlay_names() == ["llama"])
        before = {i.key: i.version for i in runtime.engine.state.all_items()}
        lab.write("00-network.yaml", network_yaml(probe="300ms"))
        await eventually("new node", lambda: runtime.node is not None and runtime.node is not first)
        assert not first.running
        await eventually(
            "records written again above the old versions",
            lambda: (
                all(i.version > before.get(i.key, -1) for i in runtime.engine.state.all_items())
                and len(runtime.engine.state.all_items()) == len(before)
            ),
        )
    finally:
        await agent.stop()
