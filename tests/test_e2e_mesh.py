"""Whole meshes on 127.0.0.1: agents with real SWIM over encrypted UDP, real TLS probes of
each site's egress listener, real provider endpoints serving health and Prometheus metrics.

A site killed with SIGKILL runs as its own ``grid agent`` process."""

from __future__ import annotations

import asyncio
import json
import signal
import socket

import pytest

from grid.demo import LocalMesh, MeshSettings
from grid.demo.mesh import free_port
from grid.engine import SiteEngine
from grid.membership import SwimConfig
from support.agents import QWEN, THREE_SITES, AgentMesh, AgentMeshes, AgentProcess, site_agent_args

FAST = SwimConfig(probe_interval=0.5, suspicion_timeout=1.5, push_pull_interval=3.0)


def sites_in(mesh: LocalMesh, site: str) -> set[str]:
    return {c["site"] for c in mesh.candidates(site)}


@pytest.fixture
async def mesh(agent_mesh: AgentMeshes, request: pytest.FixtureRequest) -> AgentMesh:
    return await agent_mesh(THREE_SITES, getattr(request, "param", MeshSettings()))


async def test_a_metric_change_at_one_site_appears_in_another_sites_overlay(
    mesh: AgentMesh,
) -> None:
    await mesh.start()
    await mesh.converge()

    def qwen_at(site: str) -> dict[str, object]:
        return next(c for c in mesh.candidates(site) if c["site"] == "site-b" and c["name"] == QWEN)

    before = qwen_at("site-a")
    assert before["admission_state"] == "new_and_existing"
    mesh.sites["site-b"].providers["qwen-b"].set_load(queue_depth=60, kv_cache_utilization=0.97)
    seconds = await mesh.wait_for(
        "load seen at site-a",
        lambda: qwen_at("site-a")["admission_state"] == "existing_only",
        15,
    )
    after = qwen_at("site-a")
    assert after["score"] < before["score"]  # type: ignore[operator]
    assert seconds < 10
    # What the gateway reads is the file, and it says the same.
    document = json.loads(mesh.overlay_file("site-a").read_text())
    on_disk = next(
        c for c in document["overlay"]["candidates"] if c["site"] == "site-b" and c["name"] == QWEN
    )
    assert on_disk["admission_state"] == "existing_only"
    assert on_disk["score"] == after["score"]
    assert [c["site"] for c in document["overlay"]["candidates"]][-2:] == ["site-b", "site-b"]


async def test_a_killed_site_leaves_every_survivors_overlay(mesh: AgentMesh) -> None:
    victim = mesh.spawn("site-c")
    await mesh.start(["site-a", "site-b"])
    everyone = set(mesh.sites)
    survivors = ["site-a", "site-b"]
    await victim.until(
        "convergence", lambda: all(sites_in(mesh, s) == everyone for s in survivors), 30
    )
    victim.process.send_signal(signal.SIGKILL)
    victim.process.wait(timeout=10)
    removed = await mesh.wait_for(
        "site-c removed", lambda: all("site-c" not in sites_in(mesh, s) for s in survivors), 15
    )
    down = await mesh.wait_for(
        "site-c declared down",
        lambda: all(mesh.view_of(s, "site-c")[0] == "down" for s in survivors),
        15,
    )
    assert removed < 10
    assert down < FAST.detection_bound(3) + 2  # scheduling slack on a loaded machine
    for site in survivors:
        document = json.loads(mesh.overlay_file(site).read_text())
        assert "site-c" not in {c["site"] for c in document["overlay"]["candidates"]}


def _with_option(args: list[str], option: str, value: str) -> list[str]:
    changed = list(args)
    changed[changed.index(option) + 1] = value
    return changed


async def test_a_second_agent_for_a_running_site_exits_and_the_first_keeps_serving(
    mesh: AgentMesh,
) -> None:
    await mesh.start()
    await mesh.converge()
    everyone = set(mesh.sites)
    network = mesh.settings.network
    original = mesh.sites["site-c"].agent
    assert original is not None
    holder = original.networks[network]
    assert holder.node is not None
    held_at = holder.node.address
    # A typo'd deployment: site-c's name and certificate once more, on other ports.
    args = site_agent_args(mesh, "site-c")
    args = _with_option(args, "--bind", f"127.0.0.1:{free_port(socket.SOCK_DGRAM)}")
    args = _with_option(args, "--egress-listen", f"127.0.0.1:{free_port(socket.SOCK_STREAM)}")
    args = _with_option(args, "--state-dir", str(mesh.root / "site-c-again"))
    with AgentProcess(args, mesh.root / "site-c-again.log") as duplicate:
        code = await asyncio.to_thread(duplicate.process.wait, 30)
    lines = duplicate.log.read_text().strip().splitlines()
    assert code == 3, "\n".join(lines[-20:])
    assert lines[-1] == (
        f"grid agent: site site-c is already held by a live node at {held_at} (started "
        "earlier); this node stopped"
    )
    # The first one refused it and serves on; the other sites route to it as before.
    await mesh.wait_for("the claim refused", lambda: holder.swim.name_conflicts["refused"] >= 1, 10)
    assert holder.swim.running and holder.node.address == held_at
    assert holder.swim.conflict is None and holder.swim_error is None
    assert original.conflict is None
    await mesh.wait_for(
        "everyone still routes to site-c",
        lambda: all(
            sites_in(mesh, s) == everyone and mesh.view_of(s, "site-c") == ("alive", "Active")
            for s in ("site-a", "site-b")
        ),
        15,
    )
    for site in ("site-a", "site-b"):
        agent = mesh.sites[site].agent
        assert agent is not None
        assert agent.networks[network].engine.members["site-c"].address == held_at


async def test_a_site_whose_swim_stops_is_dropped_even_while_its_egress_answers(
    mesh: AgentMesh,
) -> None:
    await mesh.start()
    await mesh.converge()
    agent = mesh.sites["site-c"].agent
    assert agent is not None
    node = agent.networks[mesh.settings.network].node
    assert node is not None
    node.close()  # SWIM goes silent; the egress listener keeps answering probes
    survivors = ["site-a", "site-b"]
    await mesh.wait_for(
        "site-c dropped", lambda: all("site-c" not in sites_in(mesh, s) for s in survivors), 15
    )
    for site in survivors:
        assert mesh.view_of(site, "site-c") == ("down", "Active")


@pytest.mark.parametrize(
    "mesh", [MeshSettings(wrong_key_sites=frozenset({"site-c"}))], indirect=True
)
async def test_a_site_with_the_wrong_key_never_appears(mesh: AgentMesh) -> None:
    await mesh.start()
    peers = {"site-a", "site-b"}
    await mesh.converge(peers)
    network = mesh.settings.network

    def refused() -> int:
        nodes = [mesh.sites[s].agent.networks[network].node for s in peers]  # type: ignore[union-attr]
        return sum(node.stats()["dropped_auth_failed"] for node in nodes if node is not None)

    # site-c keeps trying to join: wait until it has been refused again and again.
    await mesh.wait_for("site-c refused repeatedly", lambda: refused() >= 10, 20)
    for site in peers:
        agent = mesh.sites[site].agent
        assert agent is not None
        runtime = agent.networks[network]
        assert "site-c" not in runtime.engine.members
        assert "site-c" not in runtime.engine.state.sites()
        assert "site-c" not in sites_in(mesh, site)
    stats = [mesh.sites[s].agent.networks[network].node.stats() for s in peers]  # type: ignore[union-attr]
    assert sum(s["dropped_auth_failed"] for s in stats) > 0  # it did try, and was refused
    outsider = mesh.sites["site-c"].agent
    assert outsider is not None
    assert outsider.networks[network].engine.members == {}
    assert sites_in(mesh, "site-c") == {"site-c"}


@pytest.mark.parametrize(
    "mesh", [MeshSettings(mispinned_sites=frozenset({"site-c"}))], indirect=True
)
async def test_a_site_whose_certificate_does_not_match_its_pin_is_never_heard(
    mesh: AgentMesh,
) -> None:
    await mesh.start()
    peers = {"site-a", "site-b"}
    network = mesh.settings.network

    def engine_of(site: str) -> SiteEngine:
        agent = mesh.sites[site].agent
        assert agent is not None
        return agent.networks[network].engine

    def refused_by_swim(site: str) -> bool:
        node = mesh.sites[site].agent.networks[network].node  # type: ignore[union-attr]
        return node is not None and node.stats().get("dropped_untrusted_certificate", 0) > 0

    def mismatch_probed(site: str) -> bool:
        status = engine_of(site).statuses()[("GridSite", "site-c")]
        trusted = next((c for c in status.conditions if c.type == "Trusted"), None)
        return trusted is not None and trusted.reason == "FingerprintMismatch"

    await mesh.converge(peers)
    await mesh.wait_for(
        "site-c refused by SWIM and by the probes at a and b",
        lambda: all(refused_by_swim(s) and mismatch_probed(s) for s in peers),
        20,
    )
    for site in peers:
        engine = engine_of(site)
        member = engine.members.get("site-c")
        assert member is None or member.state.value != "alive"
        assert not engine.state.providers("site-c")  # none of its records got in
        status = engine.statuses()[("GridSite", "site-c")]
        assert str(status.phase) != "Active"
        trusted = next(c for c in status.conditions if c.type == "Trusted")
        assert trusted.status == "False"
        assert "site-c" not in engine.trusted_sites
        assert "site-c" not in sites_in(mesh, site)


async def test_a_failing_health_check_takes_a_provider_out_everywhere_and_back(
    mesh: AgentMesh,
) -> None:
    await mesh.start(["site-a", "site-b"])
    pair = {"site-a", "site-b"}
    await mesh.converge(pair)
    endpoint = mesh.sites["site-b"].providers["qwen-b"]
    endpoint.healthy = False
    await mesh.wait_for(
        "qwen-b excluded", lambda: all(sites_in(mesh, s) == {"site-a"} for s in pair), 15
    )
    agent = mesh.sites["site-b"].agent
    assert agent is not None
    status = agent.networks[mesh.settings.network].engine.statuses()[
        ("InferenceProvider", "qwen-b")
    ]
    assert str(status.phase) == "Unavailable"
    assert "HTTP status 503" in status.last_health_check.message  # type: ignore[union-attr]
    endpoint.healthy = True
    await mesh.converge(pair, 15)  # qwen-b back everywhere
