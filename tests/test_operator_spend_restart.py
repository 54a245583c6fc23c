"""Spend through an operator restart, on kmock and on a real API server: a spend source served
over HTTP by a counter that rises; the operator counts it; the operator stops, the counter
rises while it is down, the operator starts again and the counter rises more: the
GridNetwork's status shows exactly what the counter grew since the operator first read it
(its checkpoint, ConfigMap ``grid-spend-<network>`` in the operator's namespace, carries
the counter readings and this site's budget slots over the restart, and goes with the
network). A checkpoint that
cannot be used is reported (a Warning Event, a log line) and spend counts on from the
first scrape."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from k8s.cluster import Cluster
from k8s.emulator import GRID_NETWORKS, GRID_SITES
from k8s.operator_support import (
    NAMESPACE,
    SITE_LABEL,
    captured_logs,
    configmap_exists,
    event_reasons,
    free_udp_port,
    network_body,
    operator_for,
    prepare_namespaces,
    put_trust,
    read_configmap,
    site_body,
    status_of,
)
from k8s.waiting import eventually
from support.servers import ProviderEndpoint

pytestmark = [pytest.mark.timeout(90), pytest.mark.real_server]

NETWORK = "mesh"
SITE = "site-a"
CHECKPOINT = f"grid-spend-{NETWORK}"
LITELLM = "litellm_total_tokens_metric_total"
WAIT_S = 20.0


@pytest_asyncio.fixture
async def exporter() -> AsyncIterator[ProviderEndpoint]:
    async with ProviderEndpoint() as server:
        yield server


def spend_network(port: int, exporter: ProviderEndpoint) -> dict[str, Any]:
    source = {
        "name": "litellm",
        "siteSelector": {"matchLabels": {SITE_LABEL: SITE}},
        "url": exporter.metrics_url,
        "interval": "1s",
        "timeout": "500ms",
        "metric": LITELLM,
        "tenantLabel": "team",
    }
    budgets = [{"tenant": "acme", "cap": 10**9, "window": "720h", "unit": "tokens"}]
    return network_body(NETWORK, port=port, budgets=budgets, spendSources=[source])


async def used(cluster: Cluster) -> int | None:
    """acme's spend in the network's status (None before it has a figure)."""
    status = await status_of(cluster, GRID_NETWORKS, NETWORK)
    for budget in status.get("budgets") or []:
        if budget.get("tenant") == "acme":
            return int(budget["used"])
    return None


async def wait_used(cluster: Cluster, expected: int, exporter: ProviderEndpoint) -> None:
    """acme's status shows ``expected``, and still does after two more scrapes and a status
    written after them (a figure passing through ``expected`` on its way up fails)."""

    async def shown() -> bool:
        found = await used(cluster)
        assert found == expected, f"the status shows {found}"
        return True

    await eventually(shown, timeout=WAIT_S, what=f"used {expected}")
    served = exporter.metrics_requests
    await eventually(
        lambda: exporter.metrics_requests >= served + 2, timeout=WAIT_S, what="two more scrapes"
    )
    scraped = await _last_scrape(cluster)
    await eventually(
        lambda: _after(_last_scrape(cluster), scraped), timeout=WAIT_S, what="a newer status"
    )
    assert await used(cluster) == expected


async def test_spend_survives_an_operator_restart_exactly(
    cluster: Cluster, exporter: ProviderEndpoint
) -> None:
    await prepare_namespaces(cluster)
    await put_trust(cluster, SITE)
    port = free_udp_port()
    # History before the operator first reads the counter is not this network's spend.
    exporter.set_counter(LITELLM, 1000, team="acme")
    async with operator_for(cluster, SITE, swim_port=port):
        await cluster.create(GRID_NETWORKS, spend_network(port, exporter))
        await cluster.create(GRID_SITES, site_body(SITE, NETWORK))
        await wait_used(cluster, 0, exporter)
        exporter.set_counter(LITELLM, 1500, team="acme")
        await wait_used(cluster, 500, exporter)

    # While the operator is down the counter rises: that is spend too.
    exporter.set_counter(LITELLM, 1800, team="acme")
    kept = await configmap_exists(cluster, CHECKPOINT, NAMESPACE)
    if kept:
        configmap = await read_configmap(cluster, CHECKPOINT, NAMESPACE)
        checkpoint = json.loads(configmap.data["spend.json"])

    async with operator_for(cluster, SITE, swim_port=port):
        await wait_used(cluster, 800, exporter)
        exporter.set_counter(LITELLM, 1900, team="acme")
        await wait_used(cluster, 900, exporter)
        # The checkpoint goes with its network.
        await cluster.delete(GRID_NETWORKS, NETWORK)
        await eventually(
            lambda: _gone(configmap_exists(cluster, CHECKPOINT, NAMESPACE)),
            timeout=WAIT_S,
            what="the checkpoint deleted with the network",
        )
    # What carried the spend over: the checkpoint written when the operator stopped.
    assert kept
    assert checkpoint["site"] == SITE
    assert [slot[0::2] for slot in checkpoint["slots"]] == [["acme", 500]]


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        ({"spend.json": "{not json"}, "not valid"),
        ({"spend.json": json.dumps({"format": 99})}, "not valid"),
        ({"other.json": "{}"}, "has no spend.json"),
    ],
    ids=["not-json", "wrong-shape", "no-key"],
)
async def test_an_unusable_checkpoint_is_reported_and_spend_counts_from_the_first_scrape(
    cluster: Cluster, exporter: ProviderEndpoint, data: dict[str, str], problem: str
) -> None:
    await prepare_namespaces(cluster)
    await put_trust(cluster, SITE)
    await cluster.call(
        cluster.core.create_namespaced_config_map,
        NAMESPACE,
        {
            "metadata": {
                "name": CHECKPOINT,
                "labels": {
                    "app.kubernetes.io/managed-by": "grid",
                    "grid.praxis-proxy.io/network": NETWORK,
                },
            },
            "data": data,
        },
    )
    exporter.set_counter(LITELLM, 1000, team="acme")
    port = free_udp_port()
    with captured_logs() as logs:
        async with operator_for(cluster, SITE, swim_port=port):
            await cluster.create(GRID_NETWORKS, spend_network(port, exporter))
            await cluster.create(GRID_SITES, site_body(SITE, NETWORK))
            await eventually(
                lambda: _has(event_reasons(cluster, NETWORK), "SpendCheckpointIgnored"),
                timeout=WAIT_S,
                what="the SpendCheckpointIgnored Event",
            )
            events = await cluster.events_about(NETWORK, NAMESPACE)
            message = next(e.message for e in events if e.reason == "SpendCheckpointIgnored")
            assert f"ConfigMap {NAMESPACE}/{CHECKPOINT}" in message and problem in message
            # Spend counts on: from the first scrape, and the checkpoint is replaced.
            await wait_used(cluster, 0, exporter)
            exporter.set_counter(LITELLM, 1250, team="acme")
            await wait_used(cluster, 250, exporter)
            await eventually(
                lambda: _checkpoint_holds(cluster, 250), timeout=WAIT_S, what="a new checkpoint"
            )
    assert any(problem in line and "SpendCheckpointIgnored" not in line for line in logs.lines)


async def test_a_checkpoint_not_written_by_grid_is_left_alone(
    cluster: Cluster, exporter: ProviderEndpoint
) -> None:
    await prepare_namespaces(cluster)
    await put_trust(cluster, SITE)
    foreign = {"metadata": {"name": CHECKPOINT}, "data": {"spend.json": "someone else's"}}
    await cluster.call(cluster.core.create_namespaced_config_map, NAMESPACE, foreign)
    exporter.set_counter(LITELLM, 1000, team="acme")
    port = free_udp_port()
    async with operator_for(cluster, SITE, swim_port=port):
        await cluster.create(GRID_NETWORKS, spend_network(port, exporter))
        await cluster.create(GRID_SITES, site_body(SITE, NETWORK))
        await eventually(
            lambda: _has(event_reasons(cluster, NETWORK), "SpendCheckpointIgnored"),
            timeout=WAIT_S,
            what="the SpendCheckpointIgnored Event",
        )
        await wait_used(cluster, 0, exporter)
        exporter.set_counter(LITELLM, 1100, team="acme")
        await wait_used(cluster, 100, exporter)
    kept = await read_configmap(cluster, CHECKPOINT, NAMESPACE)
    assert kept.data == {"spend.json": "someone else's"}


def escrow_network(port: int, exporter: ProviderEndpoint) -> dict[str, Any]:
    body = spend_network(port, exporter)
    body["spec"]["budgets"][0]["enforcement"] = "escrow"
    return body


async def _holder_epoch(cluster: Cluster) -> int | None:
    if not await configmap_exists(cluster, CHECKPOINT, NAMESPACE):
        return None
    configmap = await read_configmap(cluster, CHECKPOINT, NAMESPACE)
    text = (configmap.data or {}).get("escrow.json")
    return None if text is None else int(json.loads(text)["epoch"])


async def test_the_escrow_holder_survives_an_operator_restart(
    cluster: Cluster, exporter: ProviderEndpoint
) -> None:
    """The operator stores its escrow holder (escrow.json of the checkpoint ConfigMap)
    before it publishes anything of it, and a restarted operator goes on as that holder."""
    await prepare_namespaces(cluster)
    await put_trust(cluster, SITE)
    port = free_udp_port()
    exporter.set_counter(LITELLM, 1000, team="acme")
    async with operator_for(cluster, SITE, swim_port=port) as first:
        await cluster.create(GRID_NETWORKS, escrow_network(port, exporter))
        await cluster.create(GRID_SITES, site_body(SITE, NETWORK))
        # A life begun within the window holds nothing; once it spends, its holder
        # publishes its spend rate: a record to keep.
        await wait_used(cluster, 0, exporter)
        exporter.set_counter(LITELLM, 1100, team="acme")
        await eventually(
            lambda: _is_set(_holder_epoch(cluster)), timeout=WAIT_S, what="the holder stored"
        )
        epoch = await _holder_epoch(cluster)
        assert first.runtime(NETWORK).engine.state.escrow_epoch == epoch

    async with operator_for(cluster, SITE, swim_port=port) as second:

        def resumed() -> bool:
            engine = second.runtime(NETWORK).engine  # not there yet: asked again
            return engine is not None and engine.state.escrow_epoch == epoch

        await eventually(resumed, timeout=WAIT_S, what="the same holder again")
        assert await _holder_epoch(cluster) == epoch
        configmap = await read_configmap(cluster, CHECKPOINT, NAMESPACE)
        assert "spend.json" in configmap.data  # both kept side by side


async def _site_used(cluster: Cluster) -> int | None:
    """acme's site_used in the edge gateway's budget document (None before one is there)."""
    if not await configmap_exists(cluster, "edge-grid-budget"):
        return None
    configmap = await read_configmap(cluster, "edge-grid-budget")
    tenants = json.loads(configmap.data["budgets.json"])["budgets"]["tenants"]
    return next((int(t["site_used"]) for t in tenants if t["tenant"] == "acme"), None)


async def test_nothing_of_the_holder_goes_out_while_it_cannot_be_stored(
    cluster: Cluster, exporter: ProviderEndpoint
) -> None:
    """A ConfigMap of the checkpoint's name that is not Grid's: the holder cannot be
    stored, so the budget document stays as it was while the status moves on."""
    await prepare_namespaces(cluster)
    await put_trust(cluster, SITE)
    foreign = {"metadata": {"name": CHECKPOINT}, "data": {"spend.json": "someone else's"}}
    await cluster.call(cluster.core.create_namespaced_config_map, NAMESPACE, foreign)
    exporter.set_counter(LITELLM, 1000, team="acme")
    port = free_udp_port()
    with captured_logs() as logs:
        async with operator_for(cluster, SITE, swim_port=port) as running:
            await cluster.create(GRID_NETWORKS, escrow_network(port, exporter))
            await cluster.create(GRID_SITES, site_body(SITE, NETWORK))
            await eventually(
                lambda: _equal(_site_used(cluster), 0), timeout=WAIT_S, what="the document"
            )
            exporter.set_counter(LITELLM, 1200, team="acme")
            await wait_used(cluster, 200, exporter)
            engine = running.runtime(NETWORK).engine
            assert engine.state.own_escrow()  # a record to keep, which could not be kept
            assert await _site_used(cluster) == 0
    kept = await read_configmap(cluster, CHECKPOINT, NAMESPACE)
    assert kept.data == {"spend.json": "someone else's"}
    assert any("escrow holder" in line and "not written by Grid" in line for line in logs.lines)


async def _equal(found: Any, expected: object) -> bool:
    return await found == expected


async def _is_set(found: Any) -> bool:
    return await found is not None


async def _checkpoint_holds(cluster: Cluster, value: int) -> bool:
    configmap = await read_configmap(cluster, CHECKPOINT, NAMESPACE)
    document = json.loads(configmap.data["spend.json"])
    return [slot[2] for slot in document["slots"]] == [value]


async def _last_scrape(cluster: Cluster) -> str:
    status = await status_of(cluster, GRID_NETWORKS, NETWORK)
    sources = status.get("spendSources") or []
    return str(((sources[0].get("lastScrape") or {}) if sources else {}).get("at") or "")


async def _after(found: Any, moment: str) -> bool:
    return str(await found) > moment


async def _gone(exists: Any) -> bool:
    return not await exists


async def _has(found: Any, reason: str) -> bool:
    return reason in await found
