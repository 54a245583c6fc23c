"""The live view's document, built from real engines that exchanged their items by hand (what
SWIM carries), with an explicit ``now``; and the served page and document of a real mesh
against a canary: no secret in either."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from grid.demo import MeshSettings
from grid.engine import SiteEngine
from grid.models import GridNetwork, GridSite, InferenceProvider, load_resource
from grid.models.phases import MemberState
from grid.observe.scrape import ScrapeResult
from grid.observe.tracker import HealthObservation
from grid.trust.site import ProbeResult
from grid.view import LiveView, MemberHistory, NetworkSource, NodeInfo, network_document
from grid.view.model import EXTERNAL, route_matrix
from support.agents import TOKEN_SITES, AgentMeshes, mount_token
from support.canary import Canaries, pem_body

T0 = datetime(2026, 7, 1, 12, 0, tzinfo=UTC)
API = "grid.praxis-proxy.io/v1alpha1"
NETWORK = "mesh"
GATEWAY = ("grid-system", "edge-gateway")
SITE_LABEL = "grid.praxis-proxy.io/site"
LLAMA, QWEN = "llama-3.1-8b", "qwen-2.5-72b"
PINS = {"site-a": "aa" * 32, "site-b": "bb" * 32, "site-c": "cc" * 32}
REGIONS = {
    "site-a": ("us-east", "us-east-1a"),
    "site-b": ("us-east", "us-east-1b"),
    "site-c": ("us-west", "us-west-2a"),
}
NODE = NodeInfo(True, "10.0.0.1:7946", 7, ("k-1",))


def _load(document: dict[str, Any]) -> Any:
    return load_resource(document)


def network() -> GridNetwork:
    resource = _load(
        {
            "apiVersion": API,
            "kind": "GridNetwork",
            "metadata": {"name": NETWORK},
            "spec": {
                "gridId": "view",
                "gatewayRefs": [{"name": GATEWAY[1], "namespace": GATEWAY[0]}],
                "staleCandidateTtlSeconds": 600,
                "renderInterval": "0s",
                "swim": {"probeInterval": "500ms", "suspicionTimeout": "1500ms"},
            },
        }
    )
    assert isinstance(resource, GridNetwork)
    return resource


def site(name: str) -> GridSite:
    region, zone = REGIONS[name]
    resource = _load(
        {
            "apiVersion": API,
            "kind": "GridSite",
            "metadata": {"name": name, "labels": {SITE_LABEL: name}},
            "spec": {
                "gridNetworkRef": NETWORK,
                "egress": {"address": f"{name}.test:8443", "tlsMode": "mutual_tls"},
                "region": region,
                "zone": zone,
                "trust": {"certFingerprint": PINS[name]},
            },
        }
    )
    assert isinstance(resource, GridSite)
    return resource


def provider(
    name: str,
    at: str | None,
    models: tuple[str, ...] = (LLAMA,),
    *,
    policy: dict[str, Any] | None = None,
    backend: str = "local",
    health: bool = False,
) -> InferenceProvider:
    spec: dict[str, Any] = {
        "gridNetworkRef": NETWORK,
        "backendKind": backend,
        "providerKind": "self_hosted" if backend == "local" else "open_ai",
        "models": [{"name": model} for model in models],
        "endpoint": f"http://{name}.test:8000",
        "cost": {"inputPerMillion": "0.10", "outputPerMillion": "0.20"},
        "metricsConfig": {
            "port": 9100,
            "interval": "1s",
            "timeout": "500ms",
            "signals": {"queueDepth": {"metric": "queue"}, "kvCacheUtilization": {"metric": "kv"}},
        },
    }
    if at is not None:
        spec["siteSelector"] = {"matchLabels": {SITE_LABEL: at}}
    if policy is not None:
        spec["accessPolicy"] = {"siteSelector": {"matchLabels": policy}}
    if health:
        spec["healthCheck"] = {
            "path": "/health",
            "interval": "1s",
            "timeout": "500ms",
            "healthyThreshold": 1,
            "unhealthyThreshold": 1,
        }
    resource = _load(
        {"apiVersion": API, "kind": "InferenceProvider", "metadata": {"name": name}, "spec": spec}
    )
    assert isinstance(resource, InferenceProvider)
    return resource


SITES = [site(name) for name in PINS]
PROVIDERS = [
    provider("llama-a", "site-a"),
    provider("qwen-b", "site-b", (QWEN, LLAMA)),
    provider("private-cloud", None, (QWEN,), policy={SITE_LABEL: "site-c"}, backend="api_provider"),
    provider("broken-b", "site-b", health=True),
    provider("llama-c", "site-c"),
    provider("cloud", None, (QWEN,), backend="api_provider"),
]
LOADS = {
    "llama-a": (3, 0.4),
    "qwen-b": (1, 0.2),
    "private-cloud": (0, 0.1),
    "broken-b": (0, 0.1),
    "llama-c": (8, 0.7),
    "cloud": (2, 0.5),
}


def scrape(queue: float, kv: float) -> ScrapeResult:
    return ScrapeResult(
        200, 0.001, text=f"# TYPE queue gauge\nqueue {queue}\n# TYPE kv gauge\nkv {kv}\n"
    )


def mesh(now: datetime = T0) -> dict[str, SiteEngine]:
    """Three engines that see each other alive and trusted, with each provider's load
    observed where it runs, after their items went everywhere."""
    engines = {}
    for name in PINS:
        engine = SiteEngine(network(), name, sites=SITES, providers=PROVIDERS)
        engine.set_membership_running(True)
        engines[name] = engine
    for name, engine in engines.items():
        for observed in engine.observation_targets():
            provider_name = observed.provider
            engine.observe_scrape(provider_name, scrape(*LOADS[provider_name]), now)
        if name == "site-b":
            engine.observe_health("broken-b", HealthObservation(False, 503, 0.001), now)
        for peer in engines:
            if peer != name:
                engine.member_up(peer, f"{peer}.test:7946", 1, now)
                engine.observe_probe(peer, ProbeResult(True, PINS[peer], None, 0.002), now)
    for _ in range(2):
        published = {name: engine.refresh(now).items for name, engine in engines.items()}
        for origin, items in published.items():
            for name, engine in engines.items():
                if name != origin:
                    for item in items:
                        engine.receive_item(
                            origin, item.lane, item.key, item.version, item.payload, now
                        )
    for engine in engines.values():
        engine.refresh(now)
    return engines


def document(engine: SiteEngine, history: MemberHistory | None = None) -> dict[str, Any]:
    history = history or MemberHistory()
    history.observe(engine.members)
    return network_document(NetworkSource(NETWORK, engine, NODE), history, T0)


# --- members and their history ----------------------------------------------------------


def test_members_show_this_site_first_then_every_peer_with_its_state() -> None:
    a = mesh()["site-a"]
    later = T0 + timedelta(seconds=3)
    a.member_suspect("site-c", "site-c.test:7946", 1, later)
    members = document(a)["members"]
    assert [(m["site"], m["state"], m["self"]) for m in members] == [
        ("site-a", "alive", True),
        ("site-b", "alive", False),
        ("site-c", "suspect", False),
    ]
    assert members[0]["address"] == NODE.address and members[0]["generation"] == NODE.generation
    assert members[2]["since"] == later.isoformat()
    stopped = network_document(
        NetworkSource(NETWORK, a, NodeInfo(False, None, None, ())), MemberHistory(), T0
    )
    assert stopped["members"][0]["state"] == "stopped"


def test_the_swim_part_says_whether_the_items_view_is_complete() -> None:
    a = mesh()["site-a"]
    partial = NodeInfo(True, "10.0.0.1:7946", 7, ("k-1",), caught_up=False, items_waiting=3)
    swim = network_document(NetworkSource(NETWORK, a, partial), MemberHistory(), T0)["swim"]
    assert (swim["caughtUp"], swim["itemsWaiting"]) == (False, 3)
    whole = NodeInfo(True, "10.0.0.1:7946", 7, ("k-1",), caught_up=True)
    swim = network_document(NetworkSource(NETWORK, a, whole), MemberHistory(), T0)["swim"]
    assert (swim["caughtUp"], swim["itemsWaiting"]) == (True, 0)
    absent = network_document(NetworkSource(NETWORK, a, None), MemberHistory(), T0)["swim"]
    assert (absent["caughtUp"], absent["itemsWaiting"]) == (False, 0)


def test_the_history_records_each_transition_at_the_time_the_engine_says() -> None:
    a = mesh()["site-a"]
    history = MemberHistory()
    history.observe(a.members)
    steps = [
        (a.member_suspect, 1, T0 + timedelta(seconds=1)),
        (a.member_down, 1, T0 + timedelta(seconds=3)),
        (a.member_up, 2, T0 + timedelta(seconds=9)),
    ]
    for step, generation, moment in steps:
        step("site-b", "site-b.test:7946", generation, moment)
        assert history.observe(a.members) == 1
    a.member_up("site-b", "site-b.test:7946", 2, T0 + timedelta(seconds=20))  # re-announced
    assert history.observe(a.members) == 0
    transitions = network_document(NetworkSource(NETWORK, a, NODE), history, T0)["history"]
    seen = [
        (t["site"], t["from"], t["to"], t["generation"], t["at"])
        for t in transitions["transitions"]
    ]
    assert seen == [
        ("site-b", None, "alive", 1, T0.isoformat()),
        ("site-c", None, "alive", 1, T0.isoformat()),
        ("site-b", "alive", "suspect", 1, (T0 + timedelta(seconds=1)).isoformat()),
        ("site-b", "suspect", "down", 1, (T0 + timedelta(seconds=3)).isoformat()),
        ("site-b", "down", "alive", 2, (T0 + timedelta(seconds=9)).isoformat()),
    ]
    assert (transitions["capacity"], transitions["dropped"]) == (500, 0)


def test_the_history_is_bounded_and_keeps_the_newest() -> None:
    a = mesh()["site-a"]
    history = MemberHistory(capacity=3)
    history.observe(a.members)
    for step in range(1, 6):
        moment = T0 + timedelta(seconds=step)
        if step % 2:
            a.member_suspect("site-c", "site-c.test:7946", 1, moment)
        else:
            a.member_up("site-c", "site-c.test:7946", 1, moment)
        history.observe(a.members)
    assert len(history) == 3 and history.dropped == 4
    assert [t.at for t in history] == [T0 + timedelta(seconds=s) for s in (3, 4, 5)]
    with pytest.raises(ValueError, match="at least one"):
        MemberHistory(capacity=0)


# --- trust --------------------------------------------------------------------------------


def test_trust_says_per_site_whether_its_pin_matched_and_why() -> None:
    a = mesh()["site-a"]
    a.observe_probe("site-b", ProbeResult(True, "ee" * 32, None, 0.002), T0)
    a.observe_probe("site-c", ProbeResult(False, None, "connection refused", 0.5), T0)
    a.refresh(T0)
    trust = {row["site"]: row for row in document(a)["trust"]}
    assert trust["site-a"]["self"] and trust["site-a"]["why"] == "this site"
    mismatch = trust["site-b"]
    assert not mismatch["trusted"] and mismatch["matchedPin"] is None
    assert mismatch["pins"] == [PINS["site-b"]] and mismatch["observedFingerprint"] == "ee" * 32
    assert mismatch["why"] == (
        "the presented certificate matches neither certFingerprint nor previousCertFingerprint"
    )
    assert mismatch["conditions"]["Trusted"]["reason"] == "FingerprintMismatch"
    unreachable = trust["site-c"]
    assert unreachable["why"] == "not reachable: connection refused"
    assert unreachable["lastProbe"]["reachable"] is False
    trusted = {row["site"]: row for row in document(mesh()["site-a"])["trust"]}["site-b"]
    assert trusted["trusted"] and trusted["matchedPin"] == "current"
    assert trusted["why"] == "certificate matches certFingerprint"


# --- the overlay, as grid explain says it ----------------------------------------------


def _write_mesh(directory: Path) -> None:
    directory.mkdir()
    documents = [network(), *SITES, *PROVIDERS]
    text = yaml.safe_dump_all(
        [r.model_dump(mode="json", by_alias=True, exclude_none=True) for r in documents]
    )
    (directory / "mesh.yaml").write_text(text)


def _metrics(a: SiteEngine) -> dict[str, Any]:
    """The load of every provider as the metrics file of ``grid explain`` spells it; a
    remote provider's values carry the time site-a received them."""
    providers: dict[str, Any] = {}
    for name, (queue, kv) in LOADS.items():
        providers[name] = {"queue_depth": queue, "kv_cache_utilization": kv}
    for entry in a.ranking.candidates if a.ranking else ():
        candidate = entry.candidate
        if candidate.updated_at is not None:
            providers[candidate.provider]["updated_at"] = candidate.updated_at.isoformat()
    providers["broken-b"]["healthy"] = False
    return {"providers": providers}


def test_each_gateway_lists_its_candidates_as_grid_explain_computes_them(tmp_path: Path) -> None:
    a = mesh()["site-a"]
    resources, metrics = tmp_path / "resources", tmp_path / "metrics.yaml"
    _write_mesh(resources)
    metrics.write_text(yaml.safe_dump(_metrics(a)))
    explained = subprocess.run(
        [
            sys.executable,
            "-m",
            "grid.cli",
            "explain",
            "--resources",
            str(resources),
            "--site",
            "site-a",
            "--gateway",
            GATEWAY[1],
            "--metrics",
            str(metrics),
            "--now",
            T0.isoformat(),
            "--json",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    expected = json.loads(explained.stdout)
    (gateway,) = document(a)["gateways"]
    assert (gateway["namespace"], gateway["name"]) == GATEWAY
    overlay = a.overlays[GATEWAY]
    assert gateway["revision"] == overlay.revision and gateway["renderedAt"] == T0.isoformat()
    assert gateway["message"] == ""

    def routes(candidates: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
        return [(c["provider"], c["model"], c["site"]) for c in candidates]

    assert routes(gateway["candidates"]) == routes(expected["candidates"])
    for shown, computed in zip(gateway["candidates"], expected["candidates"], strict=True):
        for key in ("rank", "admission", "group", "tier", "fresh", "score", "score_breakdown"):
            assert shown[key] == computed[key], (shown["provider"], key)
    assert [(o["decided_by"], o["why"]) for o in gateway["order"]] == [
        (o["decided_by"], o["why"]) for o in expected["order"]
    ]
    assert [c["provider"] for c in gateway["candidates"]][:1] == ["llama-a"]
    assert {c["site"] for c in gateway["candidates"]} == set(PINS)
    overlay_candidates = (
        overlay.overlay.document["overlay"]["candidates"] if overlay.overlay else []
    )
    assert [c["score_breakdown"] for c in overlay_candidates] == [
        c["score_breakdown"] for c in gateway["candidates"]
    ]


def test_a_gateway_held_back_says_why() -> None:
    a = mesh()["site-a"]
    for name in ("site-b", "site-c"):
        a.member_down(name, f"{name}.test:7946", 1, T0 + timedelta(seconds=1))
    a.set_resources(network(), SITES, [])  # and this site's own providers are gone
    a.refresh(T0 + timedelta(seconds=2))
    (gateway,) = document(a)["gateways"]
    assert gateway["message"].startswith("no candidate for site 'site-a'")
    assert gateway["revision"] == a.overlays[GATEWAY].revision  # the last good one serves
    source = NetworkSource(NETWORK, a, NODE, held_back=lambda overlay: "ConfigMap not written")
    (written,) = network_document(source, MemberHistory(), T0)["gateways"]
    assert written["message"] == "ConfigMap not written"


def test_providers_left_out_say_why() -> None:
    view = document(mesh()["site-a"])
    reasons = {(entry["provider"], entry["reason"]) for entry in view["leftOut"]}
    assert reasons == {("private-cloud", "access_denied"), ("broken-b", "unhealthy")}
    detail = next(e["detail"] for e in view["leftOut"] if e["provider"] == "private-cloud")
    assert detail


# --- who routes to whom -------------------------------------------------------------------


def _targets(engine: SiteEngine) -> dict[str, int]:
    """How many of ``engine``'s own candidates sit at each site."""
    assert engine.ranking is not None
    return dict(
        Counter(
            entry.candidate.site if entry.candidate.site_bound else EXTERNAL
            for entry in engine.ranking.candidates
        )
    )


def test_the_matrix_is_this_site_s_ranking_and_the_real_ranking_for_each_peer() -> None:
    engines = mesh()
    matrix = document(engines["site-a"])["matrix"]
    assert matrix["viewer"] == "site-a"
    assert matrix["columns"] == ["site-a", "site-b", "site-c", EXTERNAL]
    rows = {row["consumer"]: row for row in matrix["rows"]}
    assert [row["computed"] for row in matrix["rows"]] == [False, True, True]
    for consumer, engine in engines.items():
        # What site-a computes for a peer is what the peer ranks itself: they hold the
        # same state and trust each other.
        cells = {target: cell["candidates"] for target, cell in rows[consumer]["cells"].items()}
        assert cells == _targets(engine), consumer
    # Only site-c may use private-cloud, which each gateway reaches directly; every site's
    # own capacity is its first choice for what it runs.
    assert [rows[s]["cells"][EXTERNAL]["candidates"] for s in PINS] == [1, 1, 2]
    assert rows["site-a"]["cells"]["site-b"]["candidates"] == 2
    assert rows["site-a"]["cells"]["site-a"]["firstChoices"] == 1
    assert rows["site-b"]["cells"]["site-b"]["firstChoices"] == 2


def test_a_site_declared_down_has_no_row_and_no_column() -> None:
    a = mesh()["site-a"]
    a.member_down("site-c", "site-c.test:7946", 1, T0 + timedelta(seconds=5))
    a.refresh(T0 + timedelta(seconds=5))
    matrix = document(a)["matrix"]
    assert [row["consumer"] for row in matrix["rows"]] == ["site-a", "site-b"]
    assert "site-c" not in matrix["columns"]
    assert a.members["site-c"].state is MemberState.DOWN


def test_without_a_ranking_the_matrix_is_empty() -> None:
    assert route_matrix(None, {}, network(), T0)["rows"] == []


def test_an_operator_network_without_an_engine_says_why() -> None:
    view = network_document(
        NetworkSource(NETWORK, None, None, problem="this cluster's site is not known yet"),
        MemberHistory(),
        T0,
    )
    assert view["problem"] == "this cluster's site is not known yet"
    assert view["members"] == [] and view["gateways"] == [] and view["matrix"]["rows"] == []


async def test_the_served_document_is_the_model_s_and_is_cached_per_ranking() -> None:
    a = mesh()["site-a"]
    served = LiveView("agent", lambda: [NetworkSource(NETWORK, a, NODE)])
    first = await served.document(T0)
    (network_part,) = first["networks"]
    expected = network_document(NetworkSource(NETWORK, a, NODE), served.history(NETWORK), T0)
    assert network_part["matrix"].pop("computedAt") == T0.isoformat()
    assert network_part == expected
    again = await served.document(T0 + timedelta(seconds=1))
    assert again["networks"][0]["gateways"] is not None
    assert again["networks"][0]["matrix"]["computedAt"] == T0.isoformat()  # same ranking


# --- no secret, in the document or the page -------------------------------------------


async def test_the_view_and_its_page_carry_no_secret(
    tmp_path: Path, agent_mesh: AgentMeshes
) -> None:
    token = b"grid-canary-view-" + bytes.hex(b"0123456789abcdef").encode()
    secrets_dir = mount_token(tmp_path / "secrets", token)
    built = await agent_mesh(TOKEN_SITES, MeshSettings(http=True, secrets_dir=secrets_dir))
    await built.start()
    await built.converge(timeout=30)
    both = {"site-a", "site-b"}
    texts = []
    async with aiohttp.ClientSession() as session:
        for name in both:
            agent = built.sites[name].agent
            assert agent is not None and agent.http_address
            for path in ("/", "/view.json"):
                async with session.get(f"http://{agent.http_address}{path}") as response:
                    assert response.status == 200
                    texts.append(await response.text())
    view = json.loads(texts[1])
    own = view["networks"][0]["gateways"][0]["candidates"]
    assert {c["provider"] for c in own} == {"llama-a", "qwen-b"}
    secrets = [token, (built.root / "swim.key").read_bytes()]
    public: list[str | bytes] = []
    for name in both:
        tls = built.sites[name].tls_dir
        secrets.append(pem_body((tls / "tls.key").read_bytes()))
        public += [(tls / "tls.crt").read_text(), (tls / "ca.crt").read_text()]
    canaries = Canaries(secrets, public=public)
    for text in texts:
        canaries.assert_absent(text, "the live view")
