"""Rotating minted tokens so that the gateway, which reads a token file only when it builds
its pipeline, never holds a key it cannot read nor sends a lapsed token: each token under a
key of its own, listed in the gateway configuration once the write has settled, named in
the overlay once that configuration has, the previous one kept until the next refresh.
The clock is driven by the tests; tokens come from a real token endpoint."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml

from grid.agent.outputs import OutputWriter
from grid.engine.rendering import GatewayOverlay
from grid.models.oauth2 import OAuth2Settings
from grid.models.resources import LoadedResources, load_resource
from grid.oauth.rotation import (
    AGENT_SETTLE,
    OPERATOR_SETTLE,
    IssuedKey,
    Settle,
    TokenKeys,
    found_keys,
    kept_after,
    key_issued_at,
    next_change,
    token_key,
    token_keys,
)
from grid.render.consumer import consumer_config, consumer_config_yaml
from grid.render.overlay import render_overlay
from grid.render.whatif import FIRST_TOKEN_SETTLING, build_what_if, with_token_keys
from grid.runtime.tokens import MintingPlan, TokenMinter, oauth2_mint
from grid.scoring.ranking import rank_candidates
from support.token_server import TokenServer
from support.token_store import MemoryTokens

T0 = datetime(2026, 9, 1, 12, 0, tzinfo=UTC)
HOUR = timedelta(hours=1)
MINUTE = timedelta(minutes=1)
SECOND = timedelta(seconds=1)
CLIENT = "grid-app"
SECRET = "cs-rotation-secret"


def issued(at: datetime, life: timedelta = HOUR) -> IssuedKey:
    return IssuedKey(token_key(at), at, at + life)


def test_keys_name_the_moment_of_issue_and_read_back() -> None:
    at = datetime(2026, 9, 1, 12, 34, 56, 789000, tzinfo=UTC)
    assert token_key(at) == "token-20260901T123456Z"
    assert key_issued_at(token_key(at)) == at.replace(microsecond=0)
    assert key_issued_at("token") is not None  # the plain key: the oldest
    assert key_issued_at("token") < at  # type: ignore[operator]
    for other in ("ca.crt", "token-", "token-yesterday", "secret", ".token-1.tmp"):
        assert key_issued_at(other) is None
    found = found_keys(["secret", "token-20260901T120000Z", "token"])
    assert [k.key for k in found] == ["token", "token-20260901T120000Z"]
    assert all(k.found for k in found)


def test_the_operator_lists_a_new_key_then_names_it_each_after_the_settle_time() -> None:
    first = issued(T0)
    refresh = T0 + 48 * MINUTE
    second = issued(refresh)
    tokens = (first, second)
    assert token_keys((first,), T0 + 4 * MINUTE, OPERATOR_SETTLE) == TokenKeys(
        first.key, (first.key,)
    )
    # Written: not listed before the kubelet can have put it in the gateway's volume.
    at_write = token_keys(tokens, refresh, OPERATOR_SETTLE)
    assert at_write == TokenKeys(first.key, (first.key,))
    assert next_change(tokens, refresh, OPERATOR_SETTLE) == refresh + 2 * MINUTE
    # Listed beside the one in use: the gateway rebuilds, reading both files.
    listed = token_keys(tokens, refresh + 2 * MINUTE, OPERATOR_SETTLE)
    assert listed == TokenKeys(first.key, tuple(sorted((first.key, second.key))))
    assert token_keys(tokens, refresh + 4 * MINUTE - timedelta(seconds=1), OPERATOR_SETTLE) == (
        listed
    )
    # Named once that configuration has reached the gateway; then listed alone.
    assert next_change(tokens, refresh + 2 * MINUTE, OPERATOR_SETTLE) == refresh + 4 * MINUTE
    named = token_keys(tokens, refresh + 4 * MINUTE, OPERATOR_SETTLE)
    assert named == TokenKeys(second.key, (second.key,))
    # The first token was in use until then, and lasts past it.
    assert first.expires_at is not None and first.expires_at > refresh + 6 * MINUTE


@pytest.mark.parametrize(
    ("settle", "listed_at", "named_at"),
    [(OPERATOR_SETTLE, 2 * MINUTE, 4 * MINUTE), (AGENT_SETTLE, timedelta(0), 2 * SECOND)],
    ids=["operator", "agent"],
)
def test_a_first_token_is_named_only_once_the_gateway_can_read_it(
    settle: Settle, listed_at: timedelta, named_at: timedelta
) -> None:
    """No token reached the gateway before this one: listed once its file can be in the
    gateway's volume, named (the provider offered) once that configuration can have been
    read, never before; the minter's loop wakes at both moments."""
    first = issued(T0)
    waiting = TokenKeys(None, ())
    listed = TokenKeys(None, (first.key,))
    named = TokenKeys(first.key, (first.key,))
    if listed_at:
        assert token_keys((first,), T0, settle) == waiting
        assert token_keys((first,), T0 + listed_at - SECOND, settle) == waiting
        assert next_change((first,), T0, settle) == T0 + listed_at
    assert token_keys((first,), T0 + listed_at, settle) == listed
    assert token_keys((first,), T0 + named_at - SECOND, settle) == listed
    assert next_change((first,), T0 + listed_at, settle) == T0 + named_at
    assert token_keys((first,), T0 + named_at, settle) == named


def test_a_provider_whose_first_token_is_settling_is_not_offered_but_its_key_is_listed() -> None:
    resources = LoadedResources(
        resources=tuple(load_resource(doc) for doc in yaml.safe_load_all(MESH))
    )
    what_if = build_what_if(resources, site="east", gateway="edge", namespace="gateways")
    first = token_key(T0)
    waiting = with_token_keys(what_if, {"vertex": TokenKeys(None, (first,))})
    assert waiting.candidates == ()
    assert waiting.not_offered == (("vertex", FIRST_TOKEN_SETTLING),)
    assert [entry["secretRef"] for entry in waiting.plan.credentials] == [
        {"name": "grid-token-vertex", "namespace": "gateways", "key": first}
    ]


def test_the_agent_lists_a_new_file_at_once_and_names_it_after_the_gateway_reloaded() -> None:
    first, second = issued(T0), issued(T0 + 48 * MINUTE)
    now = T0 + 48 * MINUTE
    assert token_keys((first, second), now, AGENT_SETTLE) == TokenKeys(
        first.key, tuple(sorted((first.key, second.key)))
    )
    later = now + AGENT_SETTLE.reference_after
    assert token_keys((first, second), later, AGENT_SETTLE) == TokenKeys(second.key, (second.key,))


def test_a_token_that_would_lapse_before_the_switch_gives_way_to_the_newest_at_once() -> None:
    # 10-minute tokens refreshed at 80 %: 2 minutes left, less than the two settle times.
    life = 10 * MINUTE
    first = issued(T0, life)
    second = issued(T0 + 8 * MINUTE, life)
    now = T0 + 8 * MINUTE
    keys = token_keys((first, second), now, OPERATOR_SETTLE)
    assert keys is not None and keys.reference == second.key
    assert second.key in keys.declared
    # A refresh that failed until the token in place lapsed: the newest, never a lapsed one.
    late = issued(T0 + life + MINUTE)
    keys = token_keys((first, late), T0 + life + MINUTE, OPERATOR_SETTLE)
    assert keys is not None and keys.reference == late.key


def test_tokens_found_at_start_stay_named_until_the_first_new_one_has_settled() -> None:
    # A restarted shell finds what the gateway may use (here under the plain key).
    found = found_keys(["token"])
    now = T0
    new = issued(now)
    kept = kept_after(found, new, token_keys(found, now, OPERATOR_SETTLE))
    assert [k.key for k in kept] == ["token", new.key]
    assert token_keys(kept, now, OPERATOR_SETTLE) == TokenKeys("token", ("token",))
    assert token_keys(kept, now + 4 * MINUTE, OPERATOR_SETTLE) == TokenKeys(new.key, (new.key,))
    # The next token written removes the found one.
    after = issued(now + 48 * MINUTE)
    kept = kept_after(kept, after, token_keys(kept, after.issued_at, OPERATOR_SETTLE))
    assert [k.key for k in kept] == [new.key, after.key]


@pytest.fixture
async def server() -> AsyncIterator[TokenServer]:
    running = TokenServer(client_secrets={CLIENT: SECRET}, expires_in=3600)
    await running.start()
    yield running
    await running.stop()


def minter(server: TokenServer, output: MemoryTokens, settle: Settle) -> TokenMinter:
    settings = OAuth2Settings.model_validate(
        {"grant": "ClientCredentials", "tokenUrl": server.url, "clientId": CLIENT}
    )

    async def source() -> bytes:
        return SECRET.encode()

    return TokenMinter(
        "llama",
        MintingPlan(settings, ("grid", "idp", "secret"), ("grid", "grid-token-llama", "token")),
        oauth2_mint(settings, source),
        output,
        draw=lambda: 0.5,
        settle=settle,
    )


@pytest.mark.parametrize("settle", [OPERATOR_SETTLE, AGENT_SETTLE], ids=["operator", "agent"])
async def test_over_a_day_of_refreshes_the_gateway_is_never_told_of_a_missing_or_lapsed_token(
    server: TokenServer, settle: Settle
) -> None:
    """Every 10 s over 24 h of hourly tokens: what the overlay names and the configuration
    lists is held where the tokens are written, and what the overlay names outlives the
    time the change takes to reach the gateway; a gateway still on the configuration of the
    step before finds its files too; at most three tokens are kept."""
    output = MemoryTokens({"token": "written-before"})  # found at start, under the plain key
    made = minter(server, output, settle)
    moments = [T0 + timedelta(seconds=10 * step) for step in range(6 * 60 * 24)]
    before: TokenKeys | None = None
    switches, mints, written = [], [], []
    for now in moments:
        if made.health.due(now):
            await made.attempt(now)
            mints.append(now)
            # Written once the endpoint answered: a moment after `now`.
            written.append(max(k.issued_at for k in made.issued))
        keys = made.keys(now)
        assert keys is not None
        held = set(output.held)
        assert set(keys.declared) <= held and keys.reference in keys.declared
        if before is not None:
            assert set(before.declared) <= held, "a gateway one step behind lost a file"
            if keys.reference != before.reference:
                switches.append(now)
        assert len(held) <= 3
        named = next(k for k in made.issued if k.key == keys.reference)
        assert named.lasts_past(now + settle.reference_after)
        before = keys
    assert len(server.tokens) == len(mints) == 30  # at 0, then every 48 min
    assert "token" not in output.held
    # Each token is named at the first step after the two settle times since its write.
    assert len(switches) == len(mints)
    for minted, at, switched in zip(mints, written, switches, strict=True):
        assert timedelta(0) <= at - minted < timedelta(seconds=5)
        late = switched - (at + settle.declare_after + settle.reference_after)
        assert timedelta(0) <= late < timedelta(seconds=10)


MESH = """\
apiVersion: grid.praxis-proxy.io/v1alpha1
kind: GridNetwork
metadata: {name: mesh}
spec:
  gatewayRefs:
    - name: edge
      namespace: gateways
      consumerConfig: {enabled: true, credentialMountBase: /etc/grid/credentials}
---
apiVersion: grid.praxis-proxy.io/v1alpha1
kind: GridSite
metadata: {name: east, labels: {site: east}}
spec: {gridNetworkRef: mesh, region: us-east}
---
apiVersion: grid.praxis-proxy.io/v1alpha1
kind: InferenceProvider
metadata: {name: vertex}
spec:
  gridNetworkRef: mesh
  backendKind: api_provider
  providerKind: open_ai
  models: [{name: gemini}]
  endpoint: https://vertex.example/v1
  auth:
    strategy: Oauth2
    secretRef: {name: vertex-sa, namespace: gateways, key: key.json}
    oauth2: {grant: JwtBearer, tokenUrl: "https://oauth2.example/token"}
"""


def test_the_overlay_names_the_reference_and_the_configuration_lists_each_declared_file() -> None:
    resources = LoadedResources(
        resources=tuple(load_resource(doc) for doc in yaml.safe_load_all(MESH))
    )
    what_if = build_what_if(resources, site="east", gateway="edge", namespace="gateways")
    (candidate,) = what_if.candidates
    assert candidate.credential is not None and candidate.credential.key == "token"
    old, new = token_key(T0), token_key(T0 + 48 * MINUTE)
    moved = with_token_keys(what_if, {"vertex": TokenKeys(old, (new, old))})
    (candidate,) = moved.candidates
    assert candidate.credential is not None
    assert (candidate.credential.name, candidate.credential.key) == ("grid-token-vertex", old)
    settings = what_if.gateway.consumer_config
    assert settings is not None
    config = consumer_config(moved.plan, settings, overlay_key="grid-config.json")
    inject = next(f for f in config["filter_chains"][0]["filters"] if "credentials" in f)
    assert [entry["file"] for entry in inject["credentials"]] == [
        f"/etc/grid/credentials/grid-token-vertex/{old}",
        f"/etc/grid/credentials/grid-token-vertex/{new}",
    ]
    assert {entry["key"] for entry in inject["credentials"]} == {old, new}
    # A provider whose tokens are not minted here keeps its reference.
    assert with_token_keys(what_if, {"other": TokenKeys(old, (old,))}) == what_if


def test_the_agent_writes_a_configuration_that_changed_under_an_unchanged_overlay(
    tmp_path: Path,
) -> None:
    """Listing a new token changes the gateway configuration alone: the agent writes it,
    and writes the configuration before the overlay when both change."""
    resources = LoadedResources(
        resources=tuple(load_resource(doc) for doc in yaml.safe_load_all(MESH))
    )
    what_if = build_what_if(resources, site="east", gateway="edge", namespace="gateways")
    old, new = token_key(T0), token_key(T0 + 48 * MINUTE)
    settings = what_if.gateway.consumer_config
    assert settings is not None

    def rendered(keys: TokenKeys) -> GatewayOverlay:
        moved = with_token_keys(what_if, {"vertex": keys})
        ranking = rank_candidates(moved.candidates, moved.consumer, moved.network.spec.scoring, T0)
        overlay = render_overlay(ranking, moved.scope, moved.source, T0)
        config = consumer_config_yaml(moved.plan, settings, overlay_key="grid-config.json")
        return GatewayOverlay(what_if.gateway, moved.scope, overlay, config, T0)

    writer = OutputWriter(tmp_path, status_interval_s=5)
    in_use = rendered(TokenKeys(old, (old,)))
    path = writer.write_overlay("mesh", in_use)
    assert path is not None
    config_path = path.with_name("praxis.yaml")
    assert f"grid-token-vertex/{old}" in config_path.read_text()

    listed = rendered(TokenKeys(old, (new, old)))
    assert listed.revision == in_use.revision
    assert writer.write_overlay("mesh", listed) is None  # no new overlay
    assert f"grid-token-vertex/{new}" in config_path.read_text()

    named = rendered(TokenKeys(new, (new,)))
    assert named.revision != in_use.revision
    assert writer.write_overlay("mesh", named) == path
    assert f"grid-token-vertex/{old}" not in config_path.read_text()
    assert config_path.stat().st_mtime_ns <= path.stat().st_mtime_ns
    assert (
        json.loads(path.read_text())["overlay"]["candidates"][0]["credential"]["secretRef"]["key"]
        == new
    )
