"""The operator and budgets, on kmock and on a real API server: a tenant whose budget is
exhausted (a cap of 0) makes the network's BudgetsWithinLimits False with BudgetExhausted
and posts a BudgetExhausted Warning Event; each gateway gets its budget document in a
ConfigMap of its own, which ``grid budget verify``'s rules accept; a cap raised past the
tenant's spend turns the condition True and rewrites the document; the ConfigMap goes
when the network has no budgets left."""

from __future__ import annotations

import json
from typing import Any

import pytest

from grid.render.budgets import verify_budget_document
from k8s.cluster import Cluster
from k8s.emulator import GRID_NETWORKS, GRID_SITES
from k8s.operator_support import (
    configmap_exists,
    event_reasons,
    network_body,
    operator_for,
    prepare_namespaces,
    put_trust,
    read_configmap,
    site_body,
    wait_condition,
)
from k8s.waiting import eventually

pytestmark = [pytest.mark.timeout(60), pytest.mark.real_server]

NETWORK = "mesh"
SITE = "site-a"
BUDGET_MAP = "edge-grid-budget"


async def document_states(cluster: Cluster) -> dict[str, str] | None:
    """The tenants' states in the edge gateway's budget document, once a whole one is
    there."""
    configmap = await read_configmap(cluster, BUDGET_MAP)
    verdict = verify_budget_document(
        configmap.data["budgets.json"].encode(), {"network": NETWORK, "gateway": "edge"}
    )
    return dict(verdict.tenants) if verdict.accepted else None


async def patch_budgets(cluster: Cluster, budgets: list[dict[str, Any]]) -> None:
    await cluster.patch(GRID_NETWORKS, NETWORK, {"spec": {"budgets": budgets}})


async def test_an_exhausted_budget_is_a_condition_an_event_and_a_document(
    cluster: Cluster,
) -> None:
    await prepare_namespaces(cluster)
    await put_trust(cluster, SITE)
    budgets = [
        {"tenant": "acme", "cap": 0, "window": "24h"},
        {"tenant": "globex", "cap": 10, "window": "24h"},
    ]
    async with operator_for(cluster, SITE) as running:
        body = network_body(NETWORK, port=running.swim_port, budgets=budgets)
        await cluster.create(GRID_NETWORKS, body)
        await cluster.create(GRID_SITES, site_body(SITE, NETWORK))

        found = await wait_condition(
            cluster, GRID_NETWORKS, NETWORK, "BudgetsWithinLimits", "False", "BudgetExhausted"
        )
        assert found["message"] == "exhausted: acme"
        await eventually(
            lambda: _has(event_reasons(cluster, NETWORK), "BudgetExhausted"),
            what="the BudgetExhausted Event",
        )
        states = await eventually(lambda: document_states(cluster), what="the budget document")
        assert states == {"acme": "exhausted", "globex": "ok"}
        configmap = await read_configmap(cluster, BUDGET_MAP)
        document = json.loads(configmap.data["budgets.json"])
        assert (
            configmap.metadata.annotations["grid.praxis-proxy.io/revision"]
            == (document["revision"]["value"])
        )
        assert document["budgets"]["complete"] is True  # the only site of the mesh

        # The cap raised: within limits again, and the document says so.
        await patch_budgets(cluster, [{"tenant": "acme", "cap": 5, "window": "24h"}])
        await wait_condition(
            cluster, GRID_NETWORKS, NETWORK, "BudgetsWithinLimits", "True", "WithinLimits"
        )
        await eventually(
            lambda: _equal(document_states(cluster), {"acme": "ok"}), what="the new document"
        )

        # No budget left: no condition, no document.
        await patch_budgets(cluster, [])
        await eventually(
            lambda: _gone(configmap_exists(cluster, BUDGET_MAP)), what="the ConfigMap removed"
        )


async def _has(found: Any, reason: str) -> bool:
    return reason in await found


async def _equal(found: Any, expected: object) -> bool:
    return await found == expected


async def _gone(exists: Any) -> bool:
    return not await exists
