"""``/metrics`` follows Prometheus conventions (issue 15), checked on a live agent's
exposition: ``promtool check metrics`` passes, every counter ends ``_total``, no metric name
is a label value, durations and sizes are in seconds and bytes, every family is in the
catalog with its type, every SWIM node statistic lands in a family, the agent and the
operator name the same quantity the same way, and the endpoint negotiates OpenMetrics and
gzip.

The agent runs once for the module (a real SWIM node on 127.0.0.1, a real provider with
health checks and scrapes, a peer site whose probe is refused) and every check reads what
it served.
"""

from __future__ import annotations

import asyncio
import gzip
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import aiohttp
import pytest
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as openmetrics_families,
)
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from grid.agent import Agent, PerNetwork
from grid.agent.http import AGENT_FAMILIES
from grid.demo import DemoProvider
from grid.engine import SiteEngine
from grid.membership import MemberEvent
from grid.models import GridNetwork, load_resource
from grid.operator.metrics import OperatorMetrics
from grid.runtime.metrics import FAMILIES, SWIM_STATS, Kind
from grid.runtime.notices import Notices
from grid.runtime.swim import SwimDriver
from test_agent import NETWORK, SITE, SITE_YAML, Lab, network_yaml

PEER = "site-b"
OPENMETRICS = "application/openmetrics-text; version=1.0.0; charset=utf-8"

PROVIDER_YAML = """\
apiVersion: grid.praxis-proxy.io/v1alpha1
kind: InferenceProvider
metadata: {{name: llama-a}}
spec:
  gridNetworkRef: {network}
  backendKind: local
  providerKind: self_hosted
  models: [{{name: llama}}]
  endpoint: {url}
  siteSelector: {{matchLabels: {{grid.praxis-proxy.io/site: {site}}}}}
  healthCheck: {{path: /health, interval: 1s, timeout: 500ms, healthyThreshold: 1}}
  metricsConfig:
    port: {port}
    path: /metrics
    interval: 1s
    timeout: 500ms
    signals: {{queueDepth: {{metric: "vllm:num_requests_waiting"}}}}
"""

PEER_YAML = """\
apiVersion: grid.praxis-proxy.io/v1alpha1
kind: GridSite
metadata:
  name: {peer}
  labels: {{grid.praxis-proxy.io/site: {peer}}}
spec:
  gridNetworkRef: {network}
  region: us-east
  zone: us-east-1b
  egress: {{address: "127.0.0.1:{port}", tlsMode: tls, serverName: {peer}.test}}
  trust: {{certFingerprint: "{pin}"}}
"""


@dataclass(frozen=True)
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes

    @property
    def text(self) -> str:
        return self.body.decode("utf-8")


@dataclass(frozen=True)
class Served:
    """What the live agent served, and its node's statistics."""

    plain: Reply
    openmetrics: Reply
    gzipped: Reply
    filtered: Reply
    stats: dict[str, int]


def _closed_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def _get(session: aiohttp.ClientSession, url: str, **headers: str) -> Reply:
    async with session.get(url, headers=headers) as response:
        return Reply(response.status, dict(response.headers), await response.read())


async def _serve(root: Path) -> Served:
    provider = DemoProvider(
        queue_depth=1, kv_cache_utilization=0.1, prefix_cache_hit_ratio=0.5, p99_latency_s=0.2
    )
    await provider.start()
    lab = Lab(root)
    lab.write("00-network.yaml", network_yaml())
    lab.write("10-site.yaml", SITE_YAML)
    lab.write(
        "11-peer.yaml",
        PEER_YAML.format(peer=PEER, network=NETWORK, port=_closed_port(), pin="ab" * 32),
    )
    lab.write(
        "20-llama.yaml",
        PROVIDER_YAML.format(network=NETWORK, url=provider.url, site=SITE, port=provider.port),
    )
    agent = Agent(lab.options(site=PerNetwork(SITE)))
    await agent.start()
    url = f"http://{agent.http_address}/metrics"
    wanted = (
        'grid_provider_health_check_duration_seconds_count{network="lab",outcome="ok",provider="llama-a"}',
        'grid_provider_scrape_duration_seconds_count{network="lab",outcome="ok",provider="llama-a"}',
        'grid_site_probe_duration_seconds_count{mode="tls",network="lab",outcome="failed"}',
        "grid_overlay_last_rendered_timestamp_seconds{",
    )
    try:
        async with aiohttp.ClientSession(auto_decompress=False) as session:
            deadline = asyncio.get_running_loop().time() + 20
            while True:
                plain = await _get(session, url, **{"Accept-Encoding": "identity"})
                if all(line in plain.text for line in wanted):
                    break
                if asyncio.get_running_loop().time() > deadline:
                    missing = [line for line in wanted if line not in plain.text]
                    raise AssertionError(f"not exposed within 20s: {missing}")
                await asyncio.sleep(0.1)
            openmetrics = await _get(
                session, url, Accept=OPENMETRICS, **{"Accept-Encoding": "identity"}
            )
            gzipped = await _get(session, url, **{"Accept-Encoding": "gzip"})
            filtered = await _get(
                session,
                url + "?name[]=grid_build_info&name[]=grid_swim_members",
                **{"Accept-Encoding": "identity"},
            )
        node = agent.networks[NETWORK].node
        assert node is not None
        stats = node.stats()
    finally:
        await agent.stop()
        await provider.stop()
    return Served(plain, openmetrics, gzipped, filtered, stats)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Served:
    return asyncio.run(_serve(tmp_path_factory.mktemp("agent")))


def families(text: str) -> dict[str, tuple[str, list[Sample]]]:
    """Family name (as exposed: counters with ``_total``) → (type, samples)."""
    found = {}
    for family in text_string_to_metric_families(text):
        name = family.name + "_total" if family.type == "counter" else family.name
        if family.type == "info":
            name += "_info"
        found[name] = (family.type, family.samples)
    return found


def operator_exposition() -> str:
    from prometheus_client import generate_latest

    metrics = OperatorMetrics()
    metrics.watch(lambda: [])
    return generate_latest(metrics.registry).decode()


# -- promtool -----------------------------------------------------------------------------


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        if os.environ.get("CI") == "true":
            pytest.fail("promtool is required under CI=true (Debian's prometheus package)")
        pytest.skip("promtool is not installed (apt-get install prometheus)")
    return found


def test_promtool_finds_no_problem_in_the_live_exposition(served: Served) -> None:
    result = subprocess.run(
        [promtool(), "check", "metrics"],
        input=served.plain.body,
        capture_output=True,
        timeout=60,
        check=False,
    )
    output = (result.stdout + result.stderr).decode()
    assert result.returncode == 0 and not output.strip(), output


def test_promtool_finds_no_problem_in_the_operator_exposition() -> None:
    result = subprocess.run(
        [promtool(), "check", "metrics"],
        input=operator_exposition().encode(),
        capture_output=True,
        timeout=60,
        check=False,
    )
    output = (result.stdout + result.stderr).decode()
    assert result.returncode == 0 and not output.strip(), output


# -- naming -------------------------------------------------------------------------------

CATALOG = {**FAMILIES, **{f.name: f for f in AGENT_FAMILIES}}
TYPES = {Kind.COUNTER: "counter", Kind.GAUGE: "gauge", Kind.HISTOGRAM: "histogram"}
# Words that mean a unit other than the base one, or a quantity without its unit.
NOT_BASE_UNITS = re.compile(
    r"_(milli|micro|nano|kilo|mega|giga)?(ms|us|ns|millis|milliseconds|microseconds|"
    r"minutes|hours|days|kb|mb|gb|kilobytes|megabytes|percent|ratio_percent)(_|$)"
)
TIME_WORDS = {"duration", "latency", "elapsed", "age", "time", "timestamp", "delay", "timeout"}


def test_every_family_is_in_the_catalog_with_its_type(served: Served) -> None:
    exposed = families(served.plain.text)
    assert set(exposed) == set(CATALOG)
    for name, (kind, _) in exposed.items():
        family = CATALOG[name]
        if family.kind is Kind.INFO:
            # The text format 0.0.4 has no info type: prometheus_client writes a gauge.
            assert kind == "gauge", name
        else:
            assert kind == TYPES[family.kind], name


def test_every_counter_ends_total_and_nothing_else_does(served: Served) -> None:
    for name, (kind, samples) in families(served.plain.text).items():
        if kind == "counter":
            assert name.endswith("_total"), name
            assert all(s.name.endswith(("_total", "_created")) for s in samples), name
        else:
            assert not name.endswith("_total"), f"{name} is a {kind} named like a counter"


def test_no_metric_name_is_a_label_value(served: Served) -> None:
    exposed = families(served.plain.text)
    names = set(exposed) | {s.name for _, samples in exposed.values() for s in samples}
    names |= {name.removesuffix("_total") for name in names}
    for name, (_, samples) in exposed.items():
        for sample in samples:
            for label, value in sample.labels.items():
                assert value not in names, f"{name}{{{label}={value!r}}} names a metric"
                assert not value.startswith("grid_"), f"{name}{{{label}={value!r}}}"


def test_units_are_base_units(served: Served) -> None:
    for name, (kind, _) in families(served.plain.text).items():
        assert not NOT_BASE_UNITS.search(name), f"{name}: not a base unit"
        base = name.removesuffix("_total")
        if TIME_WORDS & set(base.split("_")):
            assert base.endswith("_seconds"), f"{name}: a time not in seconds"
        if "byte" in base:
            assert base.endswith("_bytes"), f"{name}: a size not in bytes"
        if kind == "histogram":
            assert base.endswith(("_seconds", "_bytes")), f"{name}: a histogram without unit"


def test_labels_carry_no_secret_and_no_address(served: Served) -> None:
    forbidden = {"key", "token", "secret", "password", "address", "url", "endpoint", "ip"}
    address = re.compile(r"(\d{1,3}\.){3}\d{1,3}|:\d{2,5}$|://")
    for name, (_, samples) in families(served.plain.text).items():
        for sample in samples:
            assert not forbidden & set(sample.labels), f"{name}: {sorted(sample.labels)}"
            for value in sample.labels.values():
                assert not address.search(value), f"{name} has an address: {value!r}"


def test_every_swim_statistic_lands_in_one_family(served: Served) -> None:
    assert set(served.stats) <= set(SWIM_STATS), (
        "SWIM statistics without a family in grid.runtime.metrics.SWIM_STATS: "
        f"{sorted(set(served.stats) - set(SWIM_STATS))}"
    )
    targets = {target for target in SWIM_STATS.values() if target is not None}
    assert len(targets) == len([t for t in SWIM_STATS.values() if t is not None]), (
        "two statistics map to the same series"
    )
    exposed = families(served.plain.text)
    for family, labels in targets:
        assert family in FAMILIES
        assert len(FAMILIES[family].labels) == 1 + len(labels), family
        kind = FAMILIES[family].kind
        assert kind in (Kind.COUNTER, Kind.GAUGE)
        assert any(
            tuple(s.labels[k] for k in FAMILIES[family].labels[1:]) == labels
            for s in exposed[family][1]
            if s.name == family
        ), f"{family}{labels} not exposed"


def test_the_agent_serves_the_state_it_holds(served: Served) -> None:
    text = served.plain.text
    assert f'grid_swim_running{{network="{NETWORK}"}} 1.0' in text
    assert f'grid_swim_members{{network="{NETWORK}",state="alive"}} 0.0' in text
    assert f'grid_site_trusted{{network="{NETWORK}",site="{PEER}"}} 0.0' in text
    assert f'grid_swim_problem{{network="{NETWORK}",problem="key_file"}} 0.0' in text
    assert f'grid_swim_keys{{network="{NETWORK}"}} 1.0' in text
    assert (
        'grid_overlay_candidates{gateway="edge-gateway",gateway_namespace="grid-system",network="lab"} 1.0'
        in text
    )
    (info,) = families(text)["grid_build_info"][1]
    assert info.value == 1 and info.labels["shell"] == "agent"
    assert set(info.labels) == {"shell", "version", "native", "python"}
    rendered = next(
        s.value
        for s in families(text)["grid_overlay_last_rendered_timestamp_seconds"][1]
        if s.labels["gateway"] == "edge-gateway"
    )
    assert abs(rendered - datetime.now(UTC).timestamp()) < 300


def test_agent_and_operator_name_the_same_quantities_the_same_way(served: Served) -> None:
    agent = set(families(served.plain.text))
    operator = set(families(operator_exposition()))
    shared = {n for n in agent | operator if not n.startswith(("grid_agent_", "grid_operator_"))}
    assert shared <= agent and shared <= operator, sorted(shared - (agent & operator))
    assert shared == set(FAMILIES)
    own = {n for n in agent | operator if n not in shared}
    assert all(n.startswith("grid_agent_") for n in agent - shared)
    assert all(n.startswith("grid_operator_") for n in operator - shared)
    for name in own:
        rest = name.removeprefix("grid_agent_").removeprefix("grid_operator_")
        assert f"grid_{rest}" not in shared, f"{name} duplicates grid_{rest}"
        for prefix in ("grid_agent_", "grid_operator_"):
            assert prefix + rest == name or prefix + rest not in own, name
    (info,) = families(operator_exposition())["grid_build_info"][1]
    assert info.labels["shell"] == "operator"


# -- negotiation --------------------------------------------------------------------------


def test_the_text_format_by_default_and_openmetrics_when_asked(served: Served) -> None:
    assert served.plain.status == 200
    assert served.plain.headers["Content-Type"].startswith("text/plain; version=0.0.4")
    assert "Content-Encoding" not in served.plain.headers
    reply = served.openmetrics
    assert reply.headers["Content-Type"].startswith("application/openmetrics-text; version=1.0.0")
    assert reply.text.endswith("# EOF\n")
    parsed = {f.name: f for f in openmetrics_families(reply.text)}
    assert parsed["grid_build"].type == "info"
    assert parsed["grid_swim_sent_bytes"].type == "counter"
    assert parsed["grid_swim_sent_bytes"].unit == "bytes"
    assert parsed["grid_provider_health_check_duration_seconds"].unit == "seconds"


def test_gzip_when_accepted(served: Served) -> None:
    reply = served.gzipped
    assert reply.headers["Content-Encoding"] == "gzip"
    assert "Accept-Encoding" in reply.headers["Vary"]
    text = gzip.decompress(reply.body).decode()
    assert set(families(text)) == set(families(served.plain.text))
    assert len(reply.body) < len(served.plain.body) / 3


def test_name_filter_keeps_only_the_families_named(served: Served) -> None:
    assert set(families(served.filtered.text)) == {"grid_build_info", "grid_swim_members"}


# -- suspicion to down ----------------------------------------------------------------------

T0 = datetime(2026, 7, 1, 12, 0, tzinfo=UTC)


def _engine() -> SiteEngine:
    network = load_resource(
        {
            "apiVersion": "grid.praxis-proxy.io/v1alpha1",
            "kind": "GridNetwork",
            "metadata": {"name": NETWORK},
            "spec": {},
        }
    )
    assert isinstance(network, GridNetwork)
    return SiteEngine(network, SITE)


def _driver(engine: SiteEngine) -> SwimDriver:
    import logging

    log = logging.getLogger("test")
    return SwimDriver(Notices(log, "test"), log, lambda: engine, lambda: None)


def test_the_time_from_suspicion_to_down_is_observed() -> None:
    engine = _engine()
    driver = _driver(engine)
    engine.member_up(PEER, "127.0.0.1:1", 1, T0)
    engine.member_suspect(PEER, "127.0.0.1:1", 1, T0 + timedelta(seconds=1))
    driver._handle(
        engine, MemberEvent("member_down", PEER, "127.0.0.1:1", 1), T0 + timedelta(seconds=13)
    )
    ((labels, buckets, total),) = driver.suspicion_to_down.series()
    assert labels == () and total == 12.0
    assert dict(buckets)["10.0"] == 0 and dict(buckets)["15.0"] == 1
    assert dict(buckets)["+Inf"] == 1


def test_a_down_without_suspicion_seen_is_not_observed() -> None:
    engine = _engine()
    driver = _driver(engine)
    engine.member_up(PEER, "127.0.0.1:1", 1, T0)
    driver._handle(
        engine, MemberEvent("member_down", PEER, "127.0.0.1:1", 1), T0 + timedelta(seconds=13)
    )
    assert list(driver.suspicion_to_down.series()) == []


def test_docs_list_every_family() -> None:
    reference = (Path(__file__).resolve().parent.parent / "docs" / "observability.md").read_text()
    operator = {name for name in families(operator_exposition()) if "grid_operator_" in name}
    for name in [*CATALOG, *operator]:
        assert f"| `{name}` |" in reference, f"docs/observability.md does not list {name}"
