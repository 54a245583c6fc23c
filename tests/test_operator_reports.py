"""What ``grid operator`` reports when something is wrong, on kmock and on a real API
server: a malformed spec (which a real server refuses at admission, with the CRD's message,
and kmock stores for the operator to refuse), missing or wrong Secrets, a site held by
another node, seeds that do not answer, providers that cannot serve."""

from __future__ import annotations

from typing import Any

import pytest

from grid.membership import SwimConfig, SwimNode
from k8s.cluster import Cluster
from k8s.emulator import GRID_NETWORKS, GRID_SITES, INFERENCE_PROVIDERS
from k8s.operator_support import (
    CA_SECRET,
    KEY_ENTRY,
    KEY_SECRET,
    NAMESPACE,
    admission_refusal,
    all_in,
    condition,
    event_reasons,
    free_udp_port,
    network_body,
    new_key,
    operator_for,
    overlay_names,
    prepare_namespaces,
    provider_body,
    put_secret,
    put_site_tls,
    put_trust,
    site_body,
    status_of,
    wait_condition,
    wait_phase,
)
from k8s.waiting import eventually
from support.servers import ProviderEndpoint
from support.swim import credentials as swim_credentials
from support.swim import site_certificate
from support.swim import test_ca as swim_ca

pytestmark = [pytest.mark.timeout(60), pytest.mark.both_backends]

NETWORK = "mesh"
SITE = "site-a"


async def test_a_malformed_network_is_refused_and_what_belongs_to_it_says_why(
    cluster: Cluster,
) -> None:
    await prepare_namespaces(cluster)
    await put_trust(cluster, SITE)
    async with operator_for(cluster, SITE) as running:
        # No unit on the duration, and a field this release does not know (a newer
        # release's: ignored and said, never a reason to refuse).
        broken = network_body("broken", port=running.swim_port)
        broken["spec"]["swim"]["probeInterval"] = "5"
        broken["spec"]["colour"] = "blue"
        if cluster.backend == "real":
            # The CRD's schema refuses it, and the server warns of the field it would prune.
            refusal = await admission_refusal(cluster.create(GRID_NETWORKS, broken))
            assert "spec.swim.probeInterval in body should match" in refusal.message
            assert refusal.warnings == ('unknown field "spec.colour"',)
            network_problem = "NetworkNotFound"
        else:
            # kmock stores it, so the operator must say what is wrong.
            await cluster.create(GRID_NETWORKS, broken)
            refused = await wait_condition(cluster, GRID_NETWORKS, "broken", "ConfigValid", "False")
            assert "spec.swim.probeInterval" in refused["message"]
            assert "colour" not in refused["message"]
            assert (await status_of(cluster, GRID_NETWORKS, "broken"))["phase"] == "Pending"
            reasons = await eventually(
                lambda: all_in(event_reasons(cluster, "broken"), "SpecRejected", "FieldsIgnored"),
                what="SpecRejected and FieldsIgnored Events",
            )
            assert reasons.count("FieldsIgnored") == 1
            assert running.runtime("broken").node is None
            network_problem = "NetworkRejected"
        # What belongs to it says why nothing serves it.
        await cluster.create(GRID_SITES, site_body("site-z", "broken"))
        served = await wait_condition(cluster, GRID_SITES, "site-z", "Ready", "False")
        assert served["reason"] == network_problem


async def test_an_edit_the_models_refuse_leaves_the_last_good_spec_serving(
    cluster: Cluster, endpoint: ProviderEndpoint
) -> None:
    await prepare_namespaces(cluster)
    await put_trust(cluster, SITE)
    async with operator_for(cluster, SITE) as running:
        await cluster.create(GRID_NETWORKS, network_body(NETWORK, port=running.swim_port))
        await cluster.create(GRID_SITES, site_body(SITE, NETWORK))
        await cluster.create(
            INFERENCE_PROVIDERS,
            provider_body("llama-a", NETWORK, site=SITE, endpoint=endpoint.base_url),
        )
        await eventually(lambda: overlay_names(cluster), what="the overlay")
        await wait_phase(cluster, GRID_NETWORKS, NETWORK, "Active")
        node = running.runtime(NETWORK).node
        # Suspicion shorter than the probe interval.
        shorter = {"spec": {"swim": {"suspicionTimeout": "100ms"}}}
        if cluster.backend == "real":
            # The CRD's validation rule (the models' check) refuses the edit at admission:
            # the network never changes, and serves on at its first generation.
            refusal = await admission_refusal(cluster.patch(GRID_NETWORKS, NETWORK, shorter))
            assert "suspicionTimeout must be at least probeInterval" in refusal.message
            passes = running.runtime(NETWORK).passes
            await eventually(
                lambda: running.runtime(NETWORK).passes >= passes + 3, what="three more passes"
            )
            status = await status_of(cluster, GRID_NETWORKS, NETWORK)
            assert (status["phase"], status["observedGeneration"]) == ("Active", 1)
            fixed_generation = 2
        else:
            # kmock stores it: the operator refuses it and keeps the last valid spec.
            await cluster.patch(GRID_NETWORKS, NETWORK, shorter)
            refused = await wait_condition(cluster, GRID_NETWORKS, NETWORK, "ConfigValid", "False")
            assert "last valid one keeps serving" in refused["message"]
            assert "suspicionTimeout must be at least probeInterval" in refused["message"]
            await wait_phase(cluster, GRID_NETWORKS, NETWORK, "Degraded")
            fixed_generation = 3
        assert running.runtime(NETWORK).node is node, "SWIM keeps running on the last good spec"
        assert await overlay_names(cluster) == ["llama"]

        await cluster.patch(GRID_NETWORKS, NETWORK, {"spec": {"swim": {"suspicionTimeout": "2s"}}})

        async def fixed() -> bool:
            status = await status_of(cluster, GRID_NETWORKS, NETWORK)
            return status["phase"] == "Active" and status["observedGeneration"] == fixed_generation

        await eventually(fixed, what=f"Active at generation {fixed_generation}")


async def test_missing_secrets_and_a_key_of_the_wrong_length_are_reported_until_fixed(
    cluster: Cluster,
) -> None:
    await prepare_namespaces(cluster)
    async with operator_for(cluster, SITE) as running:
        await cluster.create(
            GRID_NETWORKS, network_body(NETWORK, port=running.swim_port, gateways=[])
        )
        await cluster.create(GRID_SITES, site_body(SITE, NETWORK))
        missing = await wait_condition(cluster, GRID_NETWORKS, NETWORK, "ConfigValid", "False")
        assert missing["message"] == (
            "Secret grid-system/swim-key (spec.tls.swimKeyRef) does not exist"
        )
        membership = condition(await status_of(cluster, GRID_NETWORKS, NETWORK), "MembershipReady")
        assert membership["status"] == "False"

        await put_secret(cluster, KEY_SECRET, {KEY_ENTRY: b"\x01\x02" * 8})
        wrong = await wait_condition(
            cluster, GRID_NETWORKS, NETWORK, "ConfigValid", "False", reason="ConfigRejected"
        )
        await eventually(
            lambda: _message_has(cluster, "holds 16 bytes that are not text"),
            what="the wrong key length named",
        )
        assert running.runtime(NETWORK).node is None, wrong

        await put_secret(cluster, KEY_SECRET, {"other": new_key()})
        await eventually(
            lambda: _message_has(cluster, "has no key swim.key (keys present: other)"),
            what="the missing key named",
        )

        await put_secret(cluster, KEY_SECRET, {KEY_ENTRY: new_key()})
        await put_secret(cluster, CA_SECRET, {"ca.crt": swim_ca().certificate_pem.encode()})
        # SWIM signs every message with the site certificate: without it, no node.
        await eventually(
            lambda: _message_has(
                cluster, "Secret grid-system/site-tls (spec.tls.siteCertSecretRef) does not exist"
            ),
            what="the missing site certificate named",
        )
        assert running.runtime(NETWORK).node is None and running.runtime(NETWORK).alive
        # Another site's certificate: the node refuses it and the network says so.
        await put_site_tls(cluster, site_certificate("site-b"))
        await eventually(
            lambda: _message_has(
                cluster,
                f'SWIM cannot start: site credentials: the certificate does not name site "{SITE}"',
            ),
            what="the certificate of another site refused",
        )
        assert running.runtime(NETWORK).node is None and running.runtime(NETWORK).alive

        await put_site_tls(cluster, site_certificate(SITE))
        await wait_phase(cluster, GRID_NETWORKS, NETWORK, "Active")
        assert running.runtime(NETWORK).node is not None

        # A bad edit of the key Secret later keeps the keys in use.
        node = running.runtime(NETWORK).node
        await put_secret(cluster, KEY_SECRET, {KEY_ENTRY: b"not base64 at all!"})
        await eventually(
            lambda: _message_has(cluster, "line 1: not base64"), what="the broken keyring named"
        )
        await wait_phase(cluster, GRID_NETWORKS, NETWORK, "Degraded")
        assert running.runtime(NETWORK).node is node and node.running


async def _message_has(cluster: Cluster, text: str) -> bool:
    status = await status_of(cluster, GRID_NETWORKS, NETWORK)
    return text in condition(status, "ConfigValid").get("message", "")


async def test_a_node_that_finds_its_site_already_held_stops_and_the_network_says_why(
    cluster: Cluster,
) -> None:
    await prepare_namespaces(cluster)
    key = new_key()
    await put_trust(cluster, SITE, key)
    # A live node of site-a with the same certificate, started before the operator's.
    config = SwimConfig(probe_interval=0.2, suspicion_timeout=1.0, push_pull_interval=1.0)
    with SwimNode(
        "127.0.0.1:0", SITE, None, [key], config, credentials=swim_credentials(SITE)
    ) as holder:
        async with operator_for(cluster, SITE) as running:
            body = network_body(NETWORK, port=running.swim_port, seeds=[holder.address])
            await cluster.create(GRID_NETWORKS, body)
            await cluster.create(GRID_SITES, site_body(SITE, NETWORK))
            stopped = await wait_condition(
                cluster,
                GRID_NETWORKS,
                NETWORK,
                "MembershipReady",
                "False",
                reason="SiteNameConflict",
            )
            message = (
                f"site {SITE} is already held by a live node at {holder.address} (started "
                "earlier); this node stopped"
            )
            assert stopped["message"] == message
            status = await status_of(cluster, GRID_NETWORKS, NETWORK)
            assert condition(status, "ConfigValid")["status"] == "True"
            events = await eventually(
                lambda: _events_with(cluster, "SiteNameConflict"),
                what="a SiteNameConflict Event about the network",
            )
            assert [(e.type, e.message) for e in events] == [("Warning", message)]
            # The operator keeps running; the node stays stopped, the other one serves on.
            runtime = running.runtime(NETWORK)
            assert runtime.alive and runtime.node is not None and not runtime.node.running
            assert running.operator.health()[0]
            assert holder.running


async def _events_with(cluster: Cluster, reason: str) -> list[Any]:
    return [e for e in await cluster.events_about(NETWORK, NAMESPACE) if e.reason == reason]


async def test_caught_up_turns_true_once_the_site_has_walked_a_peer_s_store(
    cluster: Cluster,
) -> None:
    await prepare_namespaces(cluster)
    key = new_key()
    await put_trust(cluster, SITE, key)
    async with operator_for(cluster, SITE) as running:
        body = network_body(NETWORK, port=running.swim_port, gateways=[])
        await cluster.create(GRID_NETWORKS, body)
        await cluster.create(GRID_SITES, site_body(SITE, NETWORK))
        # Alone, the node has walked no peer's store: its view may be partial.
        alone = await wait_condition(
            cluster, GRID_NETWORKS, NETWORK, "CaughtUp", "False", reason="CatchingUp"
        )
        assert alone["message"].startswith("no peer known yet"), alone
        status = await status_of(cluster, GRID_NETWORKS, NETWORK)
        # Written by this operator, its node running.
        membership = condition(status, "MembershipReady")
        assert (membership["status"], membership["reason"]) == ("True", "MembershipRunning")
        assert status["itemsWaiting"] == 0
        assert running.runtime(NETWORK).node.stats()["caught_up"] == 0

        # A peer joins: the node walks its store, and the status follows with no other edit.
        config = SwimConfig(probe_interval=0.2, suspicion_timeout=1.0, push_pull_interval=1.0)
        with SwimNode(
            "127.0.0.1:0", "site-b", None, [key], config, credentials=swim_credentials("site-b")
        ) as peer:
            peer.join([running.swim_address])
            caught = await wait_condition(
                cluster, GRID_NETWORKS, NETWORK, "CaughtUp", "True", reason="CaughtUp", timeout=20
            )
            assert "view of the mesh is complete" in caught["message"]
            assert caught["lastTransitionTime"] >= alone["lastTransitionTime"]
            status = await status_of(cluster, GRID_NETWORKS, NETWORK)
            assert status["itemsWaiting"] == 0
            assert condition(status, "SeedsReachable")["reason"] == "PeersKnown"
            assert running.runtime(NETWORK).node.stats()["caught_up"] == 1


async def test_unreachable_and_unresolvable_seeds_are_reported(cluster: Cluster) -> None:
    await prepare_namespaces(cluster)
    await put_trust(cluster, SITE)
    silent = f"127.0.0.1:{free_udp_port()}"
    async with operator_for(cluster, SITE) as running:
        body = network_body(NETWORK, port=running.swim_port, seeds=[silent, "nowhere.invalid:7946"])
        await cluster.create(GRID_NETWORKS, body)
        await cluster.create(GRID_SITES, site_body(SITE, NETWORK))
        seeds = await wait_condition(
            cluster, GRID_NETWORKS, NETWORK, "SeedsReachable", "False", reason="NoSeedAnswered"
        )
        assert f"no answer yet from {silent}" in seeds["message"]
        assert "nowhere.invalid:7946 (seed" in seeds["message"]
        # The site still runs its SWIM node, waiting to be joined or for a seed to come up.
        status = await status_of(cluster, GRID_NETWORKS, NETWORK)
        assert condition(status, "MembershipReady")["status"] == "True"
        assert running.runtime(NETWORK).node is not None


async def test_provider_problems_are_reported_on_the_provider(
    cluster: Cluster, endpoint: ProviderEndpoint
) -> None:
    await prepare_namespaces(cluster)
    await put_trust(cluster, SITE)
    async with operator_for(cluster, SITE) as running:
        # Before its network exists, a provider says so.
        await cluster.create(
            INFERENCE_PROVIDERS,
            provider_body(
                "keyed",
                NETWORK,
                site=SITE,
                endpoint=endpoint.base_url,
                secret=(NAMESPACE, "provider-token", "token"),
            ),
        )
        orphan = await wait_condition(cluster, INFERENCE_PROVIDERS, "keyed", "Ready", "False")
        assert orphan["reason"] == "NetworkNotFound"

        await cluster.create(GRID_NETWORKS, network_body(NETWORK, port=running.swim_port))
        await cluster.create(GRID_SITES, site_body(SITE, NETWORK))
        # Its credential Secret is missing: Unavailable, and why.
        credentials = await wait_condition(
            cluster, INFERENCE_PROVIDERS, "keyed", "CredentialsValid", "False"
        )
        assert credentials["reason"] == "SecretNotFound"
        await wait_phase(cluster, INFERENCE_PROVIDERS, "keyed", "Unavailable")
        await put_secret(cluster, "provider-token", {"token": b"grid-test-token"})
        await wait_phase(cluster, INFERENCE_PROVIDERS, "keyed", "Available")

        # BearerToken without a secretRef: the CRD's validation rule refuses it at
        # admission; kmock stores it, and the operator's models refuse it.
        bad = provider_body("no-secret", NETWORK, site=SITE, endpoint=endpoint.base_url)
        bad["spec"]["auth"] = {"strategy": "BearerToken"}
        if cluster.backend == "real":
            refusal = await admission_refusal(cluster.create(INFERENCE_PROVIDERS, bad))
            assert (
                "spec.auth.secretRef: Required value: strategy BearerToken needs secretRef"
                in refusal.message
            )
            assert not await cluster.exists(INFERENCE_PROVIDERS, "no-secret")
        else:
            await cluster.create(INFERENCE_PROVIDERS, bad)
            refused = await wait_condition(
                cluster, INFERENCE_PROVIDERS, "no-secret", "SpecValid", "False"
            )
            assert "spec.auth: strategy BearerToken needs secretRef" in refused["message"]
            assert "SpecRejected" in await eventually(
                lambda: event_reasons(cluster, "no-secret"), what="a SpecRejected Event"
            )
        valid = await status_of(cluster, INFERENCE_PROVIDERS, "keyed")
        assert condition(valid, "SpecValid")["status"] == "True"
