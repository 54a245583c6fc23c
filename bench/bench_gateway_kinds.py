"""What a render pass costs when a site's gateways differ in ``apiKeyCredentials``, at 100
peers x 10 providers (bench_engine's render_pass), side by side in one process.

Three engines of the same viewing site, each with two gateways and one provider of its own
whose key goes in ``x-api-key``:

- ``one_kind``: neither gateway takes ``apikey`` credentials: one ranking (the baseline);
- ``both_kinds``: the second gateway does: a ranking for each kind;
- ``both_kinds_no_header``: the same gateways, the site's own provider a bearer one: one
  ranking serves both kinds.

The cases take turns, round after round, so that load from other work on the machine falls
on all alike; figures are medians in milliseconds and ratios to ``one_kind``.

Run: ``.venv/bin/python bench/bench_gateway_kinds.py [--rounds N] [--peers N] [--json]``
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from bench_engine import cases, measure
from bench_metrics import GATEWAY, NETWORK, NOW, VIEWER, build_viewer, site
from grid.engine import SiteEngine
from grid.models.network import GridNetwork
from grid.models.provider import InferenceProvider
from grid.models.resources import load_resource

SECOND_GATEWAY = {"name": "edge-apikey", "namespace": GATEWAY[0]}


def network(api_key_credentials: bool) -> GridNetwork:
    refs: list[dict[str, Any]] = [
        {"name": GATEWAY[1], "namespace": GATEWAY[0]},
        {**SECOND_GATEWAY, "apiKeyCredentials": api_key_credentials},
    ]
    resource = load_resource(
        {
            "apiVersion": "grid.praxis-proxy.io/v1alpha1",
            "kind": "GridNetwork",
            "metadata": {"name": NETWORK},
            "spec": {"gridId": "bench", "gatewayRefs": refs, "staleCandidateTtlSeconds": 3600},
        }
    )
    assert isinstance(resource, GridNetwork)
    return resource


def own_provider(header_key: bool) -> InferenceProvider:
    auth = {"strategy": "ApiKey" if header_key else "BearerToken"}
    auth["secretRef"] = {"name": "own-key", "namespace": "grid-system", "key": "api-key"}
    resource = load_resource(
        {
            "apiVersion": "grid.praxis-proxy.io/v1alpha1",
            "kind": "InferenceProvider",
            "metadata": {"name": "own"},
            "spec": {
                "gridNetworkRef": NETWORK,
                "backendKind": "api_provider",
                "providerKind": "anthropic",
                "models": [{"name": "model-0"}],
                "endpoint": "https://own.bench",
                "auth": auth,
                "siteSelector": {"matchLabels": {"grid.praxis-proxy.io/site": VIEWER}},
            },
        }
    )
    assert isinstance(resource, InferenceProvider)
    return resource


def engine(peers: int, api_key_credentials: bool, header_key: bool) -> SiteEngine:
    viewer = build_viewer(peers)
    sites = [site(index) for index in range(peers + 1)]
    viewer.set_resources(network(api_key_credentials), sites, [own_provider(header_key)])
    viewer.refresh(NOW.replace(second=5), flush=True)
    return viewer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=41)
    parser.add_argument("--peers", type=int, default=100)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    engines = {
        "one_kind": engine(args.peers, api_key_credentials=False, header_key=True),
        "both_kinds": engine(args.peers, api_key_credentials=True, header_key=True),
        "both_kinds_no_header": engine(args.peers, api_key_credentials=True, header_key=False),
    }
    second = (SECOND_GATEWAY["namespace"], SECOND_GATEWAY["name"])
    for name, viewer in engines.items():
        overlay = viewer.overlays[second].overlay
        assert overlay is not None, viewer.overlays[second].message
        own = any(c["site"] == VIEWER for c in overlay.document["overlay"]["candidates"])
        assert own == (name != "one_kind"), name  # the own provider where it is offered
    figures = measure({name: cases(e)["render_pass"] for name, e in engines.items()}, args.rounds)
    ratios = {name: ms / figures["one_kind"] for name, ms in figures.items()}
    if args.json:
        print(json.dumps({"figures": figures, "ratios": ratios}))
        return
    print(f"render pass, {args.peers} peers, two gateways (median ms, ratio to one_kind):")
    for name, ms in figures.items():
        print(f"  {name:<22} {ms:8.3f} ms  {ratios[name]:.2f}x")


if __name__ == "__main__":
    main()
