"""The budget document: rendered from the network's status, content-addressed (the revision
is the digest of its budgets member), judged by ``grid budget verify`` (schema, digest,
scope; each refusal named), written by the agent's writer beside the overlay when its
revision changes, and read by the example gate in examples/budget-gate, which denies
exhausted tenants and keeps its last good document when a torn or edited one appears."""

from __future__ import annotations

import hashlib
import json
import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.error import HTTPError
from urllib.request import Request, urlopen

import pytest

from grid.agent.outputs import OutputWriter
from grid.cli import main
from grid.demo.mesh import free_port
from grid.models.budgets import (
    BudgetEnforcement,
    BudgetState,
    TenantBudget,
    TenantBudgetStatus,
    UnheardSite,
)
from grid.models.network import GatewayRef, GridNetworkStatus
from grid.render.budgets import (
    BudgetScope,
    content_revision,
    render_budget_document,
    verify_budget_document,
)
from test_engine import T0

REPO = Path(__file__).resolve().parent.parent
GATE = REPO / "examples" / "budget-gate" / "budget_gate.py"
SCOPE = BudgetScope("prod", "edge", "grid-system", "site-a")
BUDGETS = [
    TenantBudget.model_validate({"tenant": t, "cap": 1000, "window": "24h"})
    for t in ("acme", "globex", "initech")
]


def status(*states: tuple[str, int], unheard: bool = False) -> GridNetworkStatus:
    def one(tenant: str, used: int) -> TenantBudgetStatus:
        state = (
            BudgetState.EXHAUSTED
            if used >= 1000
            else BudgetState.WARN
            if used >= 800
            else BudgetState.OK
        )
        return TenantBudgetStatus(
            tenant=tenant,
            used=used,
            cap=1000,
            state=state,
            window_start=T0,
            window_end=T0 + timedelta(days=1),
        )

    return GridNetworkStatus(
        budgets=[one(t, used) for t, used in states],
        unheard_sites=[UnheardSite(site="site-b", since=T0)] if unheard else [],
    )


FIGURES = status(("acme", 10), ("globex", 850), ("initech", 1200), unheard=True)


def rendered(figures: GridNetworkStatus = FIGURES, at: timedelta = timedelta()) -> Any:
    return render_budget_document(SCOPE, BUDGETS, figures, T0 + at)


def test_the_document_carries_each_tenant_and_its_revision_is_the_budgets_digest() -> None:
    document = json.loads(rendered().text)
    assert document["scope"] == {
        "network": "prod",
        "gateway": "edge",
        "namespace": "grid-system",
        "local_site": "site-a",
    }
    budgets = document["budgets"]
    assert (budgets["complete"], budgets["unheard_sites"]) == (
        False,
        [{"site": "site-b", "since": "2026-07-01T12:00:00Z"}],
    )
    assert budgets["tenants"][1] == {
        "tenant": "globex",
        "unit": "tokens",
        "state": "warn",
        "used": 850,
        "cap": 1000,
        "remaining": 150,
        "window_start": "2026-07-01T12:00:00Z",
        "window_end": "2026-07-02T12:00:00Z",
    }
    assert document["revision"]["value"] == content_revision(budgets) == rendered().revision


def test_the_revision_moves_with_the_figures_and_not_with_the_time() -> None:
    assert rendered(at=timedelta(seconds=5)).revision == rendered().revision
    assert rendered(at=timedelta(seconds=5)).text != rendered().text  # generated_at
    moved = status(("acme", 11), ("globex", 850), ("initech", 1200), unheard=True)
    assert rendered(moved).revision != rendered().revision


def test_figures_past_the_exact_range_of_json_are_written_as_its_top() -> None:
    # A cap may be 2**53 and a sum of slots more: RFC 8785 (and JSON readers) are exact
    # to 2**53 - 1 only.
    budget = TenantBudget.model_validate({"tenant": "huge", "cap": 2**53, "window": "24h"})
    figures = GridNetworkStatus(
        budgets=[
            TenantBudgetStatus(tenant="huge", used=2**54, cap=2**53, state=BudgetState.EXHAUSTED)
        ]
    )
    document = render_budget_document(SCOPE, [budget], figures, T0)
    (tenant,) = json.loads(document.text)["budgets"]["tenants"]
    assert (tenant["used"], tenant["cap"], tenant["remaining"]) == (2**53 - 1, 2**53 - 1, 0)
    assert verify_budget_document(document.text.encode()).tenants == (("huge", "exhausted"),)


def edited(change: Any) -> bytes:
    document = json.loads(rendered().text)
    change(document)
    return json.dumps(document).encode()


@pytest.mark.parametrize(
    ("data", "reason", "detail"),
    [
        (b"{", "not_json", "Expecting property name"),
        (b"[]", "schema", "document: Input should be"),
        (edited(lambda d: d.update(schema_version=2)), "schema", "schema_version"),
        (
            edited(lambda d: d["budgets"]["tenants"][0].update(state="blocked")),
            "schema",
            "budgets.tenants.0.state",
        ),
        (
            edited(lambda d: d["budgets"]["tenants"][2].update(state="ok")),
            "digest_mismatch",
            "the budgets' digest",
        ),
        (edited(lambda d: d["budgets"].update(network="dev")), "scope_mismatch", "different"),
        (b" " * (1024 * 1024 + 1), "too_large", "over 1048576 bytes"),
    ],
)
def test_a_document_that_is_not_whole_and_grids_is_refused_saying_why(
    data: bytes, reason: str, detail: str
) -> None:
    verdict = verify_budget_document(data)
    assert (verdict.accepted, verdict.reason) == (False, reason)
    assert detail in verdict.detail


def test_grid_budget_verify_says_accept_and_each_state_or_reject_and_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "budgets.json"
    path.write_text(rendered().text)
    assert main(["budget", "verify", str(path), "--network", "prod", "--gateway", "edge"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        f"accept {rendered().revision}",
        "acme ok",
        "globex warn",
        "initech exhausted",
    ]
    assert main(["budget", "verify", str(path), "--gateway", "west", "--json"]) == 1
    out, err = capsys.readouterr()
    verdict = json.loads(out)
    assert (verdict["accepted"], verdict["reason"]) == (False, "scope_mismatch")
    assert "scope.gateway is 'edge', not 'west'" in err
    assert main(["budget", "verify", str(tmp_path / "missing.json")]) == 2


def test_the_agent_writes_it_beside_the_overlay_when_its_revision_changes(tmp_path: Path) -> None:
    writer = OutputWriter(tmp_path, status_interval_s=5)
    gateway = GatewayRef(name="edge", namespace="grid-system")
    path = writer.write_budgets("prod", gateway, rendered())
    assert path == tmp_path / "overlays" / "prod" / "grid-system" / "edge" / "budgets.json"
    assert verify_budget_document(path.read_bytes()).accepted
    assert writer.write_budgets("prod", gateway, rendered(at=timedelta(seconds=1))) is None
    moved = rendered(status(("acme", 1000)))
    assert writer.write_budgets("prod", gateway, moved) == path
    assert verify_budget_document(path.read_bytes()).tenants == (("acme", "exhausted"),)


# -- the example gate ------------------------------------------------------------------------


@pytest.fixture
def gate(tmp_path: Path) -> Iterator[tuple[Path, str, subprocess.Popen[str]]]:
    document = tmp_path / "budgets.json"
    document.write_text(rendered().text)
    port = free_port(socket.SOCK_STREAM)
    args = ["--network", "prod", "--gateway", "edge", "--namespace", "grid-system"]
    process = subprocess.Popen(
        [sys.executable, str(GATE), str(document), *args, "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        assert re.match(r"budget-gate: listening on 127\.0\.0\.1:\d+", process.stdout.readline())
        yield document, f"http://127.0.0.1:{port}/", process
    finally:
        process.terminate()
        process.wait(timeout=10)


def answer(url: str, tenant: str | None) -> int:
    request = Request(url, headers={} if tenant is None else {"x-tenant": tenant})
    try:
        with urlopen(request, timeout=5) as response:
            return int(response.status)
    except HTTPError as error:
        return error.code


def test_the_example_gate_denies_exhausted_tenants_and_keeps_its_last_good_document(
    gate: tuple[Path, str, subprocess.Popen[str]],
) -> None:
    document, url, process = gate
    assert [answer(url, t) for t in ("acme", "globex", "initech", "nobody", None)] == [
        200,
        200,
        403,
        200,
        200,
    ]
    # Grid writes a new revision (another size: the gate sees the file changed and reads
    # it on the next request): acme exhausted, initech back to ok in a new window.
    document.write_text(rendered(status(("acme", 1000), ("initech", 0))).text)
    assert [answer(url, t) for t in ("acme", "initech")] == [403, 200]
    # An edited document (acme's state changed by hand) is not taken.
    tampered = json.loads(rendered(status(("acme", 1000), ("initech", 0))).text)
    tampered["budgets"]["tenants"][0]["state"] = "ok"
    document.write_text(json.dumps(tampered))
    assert [answer(url, t) for t in ("acme", "initech")] == [403, 200]
    process.terminate()
    _, err = process.communicate(timeout=10)
    assert "keeping the last document: the revision is not the digest" in err


def escrowed(allowance: int, site_used: int, start: datetime = T0) -> str:
    """A document of one escrowed tenant, acme, with this site's figures."""
    figures = GridNetworkStatus(
        budgets=[
            TenantBudgetStatus(
                tenant="acme",
                used=site_used,
                cap=1000,
                state=BudgetState.OK,
                window_start=start,
                window_end=start + timedelta(days=1),
                enforcement=BudgetEnforcement.ESCROW,
                allowance=allowance,
                site_used=site_used,
            )
        ]
    )
    return str(render_budget_document(SCOPE, BUDGETS, figures, T0).text)


def replace(document: Path, text: str) -> None:
    """Write ``document`` as the agent does: a new file moved over the old one."""
    fresh = document.with_suffix(".new")
    fresh.write_text(text)
    fresh.replace(document)


def costing(url: str, tenant: str, cost: str | None) -> int:
    headers = {"x-tenant": tenant, **({} if cost is None else {"x-grid-cost": cost})}
    try:
        with urlopen(Request(url, headers=headers), timeout=5) as response:
            return int(response.status)
    except HTTPError as error:
        return error.code


def test_the_example_gate_keeps_an_escrowed_tenant_within_this_sites_allowance(
    gate: tuple[Path, str, subprocess.Popen[str]],
) -> None:
    document, url, _ = gate
    replace(document, escrowed(allowance=100, site_used=20))
    # Room is the allowance less the larger of what it admitted and what Grid counted here.
    assert [costing(url, "acme", "30") for _ in range(3)] == [200, 200, 200]  # 90 admitted
    assert costing(url, "acme", "30") == 403  # 120 would pass 100
    assert costing(url, "acme", "10") == 200  # exactly 100
    assert costing(url, "acme", None) == 403  # 1 more would pass it
    assert costing(url, "acme", "0") == 200
    for bad in ("-1", "x", "1.5", "9" * 16):
        assert costing(url, "acme", bad) == 400
    # More allowance released: Grid counted 90 of what it admitted (the rest not scraped).
    replace(document, escrowed(allowance=250, site_used=90))
    assert costing(url, "acme", "150") == 200  # 100 admitted + 150 = 250
    assert costing(url, "acme", "1") == 403
    # Spend it did not admit (another gate of this site) counts as soon as Grid counted it.
    replace(document, escrowed(allowance=400, site_used=390))
    assert costing(url, "acme", "20") == 403
    assert costing(url, "acme", "10") == 200
    # A new window starts from what the new document says.
    replace(document, escrowed(allowance=50, site_used=0, start=T0 + timedelta(days=1)))
    assert costing(url, "acme", "50") == 200
    assert costing(url, "acme", "1") == 403


def test_an_escrowed_tenant_without_its_allowance_is_not_taken(
    gate: tuple[Path, str, subprocess.Popen[str]],
) -> None:
    document, url, process = gate
    broken = json.loads(escrowed(allowance=100, site_used=0))
    tenant = broken["budgets"]["tenants"][0]
    del tenant["allowance"]
    broken["revision"]["value"] = hashlib.sha256(
        json.dumps(broken["budgets"], sort_keys=True, separators=(",", ":")).encode()
    ).hexdigest()
    document.write_text(json.dumps(broken))
    assert answer(url, "initech") == 403  # the last good document still holds
    process.terminate()
    _, err = process.communicate(timeout=10)
    assert "keeping the last document: tenant 'acme' is escrowed without its allowance" in err
