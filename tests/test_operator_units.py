"""The operator's plain functions, one by one: keyrings from Secrets, the trust material and
the Kubernetes client against a real (emulated) API, ConfigMap building and the write
decision, status patches and their timing, site identity and discovery, validation of
received resources, the settings from the environment, and the command's refusals."""

from __future__ import annotations

import base64
import secrets
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography.hazmat.primitives.serialization import Encoding
from kubernetes import client as k8s

from grid.cli import main
from grid.crdt.state import GridState
from grid.engine import GatewayOverlay
from grid.engine.budgets import budget_statuses
from grid.engine.windows import budget_window
from grid.errors import KubernetesApiError, OperatorConfigError, SecretMaterialError
from grid.models.common import BackendKind
from grid.models.crd import crd_for_kind
from grid.models.meta import ObjectMeta
from grid.models.network import (
    GatewayRef,
    GridNetwork,
    GridNetworkSpec,
    TenantBudget,
)
from grid.models.phases import CredentialState
from grid.models.resources import load_resource
from grid.models.schema import validate_custom_resource
from grid.models.site import AUTO_DISCOVER_LABEL
from grid.oauth.rotation import OPERATOR_SETTLE, Settle
from grid.operator.cache import ResourceCache
from grid.operator.configmaps import (
    DIGEST_ANNOTATION,
    Role,
    desired_configmaps,
    is_managed,
    label_value,
    matches,
    spec_targets,
)
from grid.operator.kube import KubeApi
from grid.operator.options import OperatorOptions
from grid.operator.secrets import credential_state_of, load_trust_material, pem_paths
from grid.operator.secrets import secret_keyring as parse_keyring
from grid.operator.sites import discovered_site_manifest, resolve_local_site
from grid.operator.status import (
    GatewayOutcome,
    NetworkReport,
    SeedReport,
    StatusMemory,
    dump_status,
    merge_patch,
    network_status,
    with_spec_condition,
)
from grid.operator.validation import check_manifest
from grid.render.overlay import OverlayScope, OverlaySource, render_overlay
from grid.runtime.keyring import KEY_BYTES
from grid.scoring.inputs import CandidateInput, ConsumingSite
from grid.scoring.ranking import rank_candidates
from k8s.cluster import Cluster
from k8s.emulator import GRID_API_VERSION, GRID_NETWORKS
from k8s.operator_support import (
    NAMESPACE,
    b64,
    keyring_text,
    network_body,
    prepare_namespaces,
    put_secret,
    site_body,
)
from k8s.rbac import served_requests
from support.pki import make_pki

pytestmark = [pytest.mark.timeout(30), pytest.mark.real_server]

NOW = datetime(2026, 7, 29, 12, 0, tzinfo=UTC)
WHERE = "Secret grid-system/swim-key, key swim.key"
DER = Encoding.DER


# --- keyrings ----------------------------------------------------------------------------------


def test_a_keyring_is_raw_bytes_or_base64_lines_primary_first() -> None:
    first, second = secrets.token_bytes(32), secrets.token_bytes(32)
    assert parse_keyring(first, WHERE).keys == (first,)
    text = b"# rotation in progress\n" + keyring_text(second, first)
    ring = parse_keyring(text, WHERE)
    assert ring.keys == (second, first) and ring.primary == second
    assert repr(ring) == "Keyring(keys=2)"


@pytest.mark.parametrize(
    ("entry", "problem"),
    [
        (b"", "is empty"),
        (bytes(range(16)), "holds 16 bytes that are not text"),
        (secrets.token_bytes(31) + b"\xff\xfe", "holds 33 bytes that are not text"),
        (base64.b64encode(b"k" * 16) + b"\n", "line 1: decodes to 16 bytes; a SWIM key is 32"),
        (b"!!!!\n", "line 1: not base64"),
        (b"# only a comment\n", "holds no key"),
        (keyring_text(b"k" * 32, b"k" * 32), "line 2: the same key twice"),
        (keyring_text(*(bytes([n]) * 32 for n in range(9))), "more than 8 keys"),
        (b"a" * 5000, "larger than 4096 bytes"),
    ],
)
def test_an_unusable_keyring_is_refused_without_quoting_it(entry: bytes, problem: str) -> None:
    with pytest.raises(SecretMaterialError) as raised:
        parse_keyring(entry, WHERE)
    message = str(raised.value)
    assert message.startswith(WHERE) and problem in message
    for line in entry.splitlines():
        if len(line) > 8:
            assert line.decode(errors="replace") not in message


def test_credentials_are_judged_by_presence_alone() -> None:
    assert credential_state_of(None, "token") is CredentialState.SECRET_NOT_FOUND
    assert credential_state_of({"other": "eA=="}, "token") is CredentialState.KEY_NOT_FOUND
    assert credential_state_of({"token": ""}, "token") is CredentialState.EMPTY
    assert credential_state_of({"token": "eA=="}, "token") is CredentialState.VALID


def test_pem_paths_are_readable_while_open_and_gone_after() -> None:
    with pem_paths("first", "second") as (one, two):
        assert one.read_text() == "first" and two.read_text() == "second"
    assert not one.exists()


# --- trust material and the client, against the API --------------------------------------------


@pytest.fixture
async def kube(cluster: Cluster) -> Any:
    api = KubeApi(cluster.configuration())
    await api.start()
    yield api
    await api.close()


def tls_settings(**refs: Any) -> Any:
    return load_network(tls=refs).spec.tls


def load_network(**spec: Any) -> GridNetwork:
    body = network_body("mesh", port=7946, **spec)
    resource = load_resource(body)
    assert isinstance(resource, GridNetwork)
    return resource


KEY_REF = {"name": "swim-key", "namespace": NAMESPACE, "key": "swim.key"}
CA_REF = {"name": "ca", "namespace": NAMESPACE, "key": "ca.crt"}
SITE_REF = {"name": "site-tls", "namespace": NAMESPACE}


async def test_trust_material_is_read_whole_or_refused(
    cluster: Cluster, kube: KubeApi, tmp_path: Path
) -> None:
    now = datetime.now(UTC)
    await prepare_namespaces(cluster)
    pki = make_pki(tmp_path, ("site-a", "site-b"))
    key = secrets.token_bytes(KEY_BYTES)
    await put_secret(cluster, "swim-key", {"swim.key": key})
    await put_secret(cluster, "ca", {"ca.crt": pki.ca_pem.encode()})
    site = pki["site-a"].issued
    await put_secret(
        cluster,
        "site-tls",
        {"tls.crt": site.certificate_pem.encode(), "tls.key": site.private_key_pem()},
    )
    material = await load_trust_material(
        kube, tls_settings(swimKeyRef=KEY_REF, caSecretRef=CA_REF, siteCertSecretRef=SITE_REF), now
    )
    assert material.keyring.keys == (key,)
    assert material.certificate_fingerprint == pki["site-a"].fingerprint
    assert "BEGIN" not in repr(material) and key.hex() not in repr(material)
    # What SWIM signs with and trusts comes from the same Secrets.
    assert material.credentials.certificate_chain == (site.certificate.public_bytes(DER),)
    assert material.credentials.trust_anchors == (pki.ca.certificate.public_bytes(DER),)

    async def refused(**refs: Any) -> str:
        with pytest.raises(SecretMaterialError) as raised:
            await load_trust_material(kube, tls_settings(**refs), now)
        return str(raised.value)

    with pytest.raises(SecretMaterialError, match=r"spec.tls.swimKeyRef is not set"):
        await load_trust_material(kube, None, now)
    # SWIM signs every message with the site certificate: it is required.
    assert (await refused(swimKeyRef=KEY_REF, caSecretRef=CA_REF)).startswith(
        "spec.tls.siteCertSecretRef is not set: every SWIM message is signed with the site "
        "certificate"
    )
    assert "does not exist" in await refused(swimKeyRef={**KEY_REF, "name": "nope"})
    # A private key where the CA should be is refused (it would travel as a certificate).
    await put_secret(cluster, "ca", {"ca.crt": site.private_key_pem()})
    message = await refused(swimKeyRef=KEY_REF, caSecretRef=CA_REF)
    assert "Secret grid-system/ca, key ca.crt (spec.tls.caSecretRef)" in message
    # A certificate with someone else's key.
    other = pki["site-b"].issued
    await put_secret(
        cluster,
        "site-tls",
        {"tls.crt": site.certificate_pem.encode(), "tls.key": other.private_key_pem()},
    )
    message = await refused(swimKeyRef=KEY_REF, siteCertSecretRef=SITE_REF)
    assert "tls.key is not the private key of tls.crt" in message
    await put_secret(cluster, "site-tls", {"tls.crt": site.certificate_pem.encode()})
    assert "has no key tls.key (keys present: tls.crt)" in await refused(
        swimKeyRef=KEY_REF, siteCertSecretRef=SITE_REF
    )


async def test_the_client_reads_writes_and_names_failures_without_bodies(
    cluster: Cluster, kube: KubeApi
) -> None:
    await prepare_namespaces(cluster)
    await put_secret(cluster, "token", {"token": b"grid-canary-client"})
    assert await kube.read_secret(NAMESPACE, "missing") is None
    data = await kube.read_secret(NAMESPACE, "token")
    assert data == {"token": b64("grid-canary-client")}

    body = {"metadata": {"name": "cm", "labels": {"a": "b"}}, "data": {"k": "v"}}
    created = await kube.create_configmap(NAMESPACE, body)
    version = created["metadata"]["resourceVersion"]
    patched = await kube.patch_configmap(NAMESPACE, "cm", {"data": {"k": None, "x": "y"}})
    assert patched["data"] == {"x": "y"}
    with pytest.raises(KubernetesApiError) as raised:
        await kube.delete_configmap(NAMESPACE, "cm", resource_version=version)
    assert raised.value.status == 409
    assert str(raised.value) == "cannot delete configmaps grid-system/cm: 409 Conflict"
    assert await kube.delete_configmap(NAMESPACE, "cm")
    assert not await kube.delete_configmap(NAMESPACE, "cm")

    with pytest.raises(KubernetesApiError) as raised:
        await kube.create_configmap("no-such-namespace", body)
    assert str(raised.value) == "cannot create configmap no-such-namespace/cm: 404 NotFound"

    assert await kube.patch_status("GridNetwork", "absent", {"phase": "Active"}) is None
    await cluster.create(GRID_NETWORKS, network_body("mesh", port=7946))
    answer = await kube.patch_status("GridNetwork", "mesh", {"phase": "Active"})
    assert answer is not None and answer["status"]["phase"] == "Active"
    # A real server fills in the status schema's defaults too (kmock stores the patch as is).
    assert set(answer["status"]) - {"phase"} <= {"connectedSites", "providerCount"}
    site = discovered_site_manifest("mesh", "site-b")
    assert site is not None
    assert await kube.create_site(site) is not None
    assert await kube.create_site(site) is None, "an existing site is not an error"


async def test_an_unreachable_api_is_named_not_dumped() -> None:
    api = KubeApi(k8s.Configuration(host="http://127.0.0.1:9"))
    await api.start()
    try:
        with pytest.raises(KubernetesApiError) as raised:
            await api.read_secret(NAMESPACE, "token")
    finally:
        await api.close()
    assert str(raised.value).startswith("cannot read secrets grid-system/token:")
    assert raised.value.status == 0


# --- ConfigMaps ---------------------------------------------------------------------------------


def rendered_overlay(gateway: GatewayRef) -> GatewayOverlay:
    candidate = CandidateInput(
        provider="llama-a",
        model="llama",
        site="site-a",
        cluster="llama-a",
        backend_kind=BackendKind.LOCAL,
    )
    ranking = rank_candidates(
        [candidate], ConsumingSite(name="site-a"), load_network().spec.scoring, NOW
    )
    scope = OverlayScope(
        network="mesh", gateway=gateway.name, namespace=gateway.namespace, local_site="site-a"
    )
    overlay = render_overlay(
        ranking, scope, OverlaySource(name="mesh", uid="uid-1", generation=1), NOW
    )
    return GatewayOverlay(gateway, scope, overlay, "listeners: []\n", NOW)


OWNER = {"metadata": {"name": "mesh", "uid": "uid-1"}}


def test_a_gateway_gets_its_overlay_and_optionally_its_configuration() -> None:
    plain = GatewayRef(name="edge", namespace="gateways")
    (overlay,) = desired_configmaps("mesh", rendered_overlay(plain))
    assert overlay.target == ("gateways", "edge-grid-config") and overlay.role is Role.OVERLAY
    manifest = overlay.manifest(OWNER)
    assert manifest["data"] == {"grid-config.json": overlay.text}
    assert manifest["metadata"]["ownerReferences"] == [
        {"apiVersion": GRID_API_VERSION, "kind": "GridNetwork", "name": "mesh", "uid": "uid-1"}
    ]
    assert is_managed(manifest, "mesh") and not is_managed(manifest, "other")
    assert matches(manifest, overlay, "uid-1") and not matches(manifest, overlay, "uid-2")

    full = GatewayRef.model_validate(
        {
            "name": "next",
            "namespace": "gateways",
            "configMapKey": "routing-overlay.json",
            "consumerConfig": {"enabled": True, "configMapName": "next-gw"},
        }
    )
    found = desired_configmaps("mesh", rendered_overlay(full))
    assert [(c.name, c.key, c.role) for c in found] == [
        ("next-grid-config", "routing-overlay.json", Role.OVERLAY),
        ("next-gw", "praxis.yaml", Role.CONSUMER_CONFIG),
    ]
    spec = GridNetworkSpec(gateway_refs=[plain, full])
    assert spec_targets(spec) == {
        ("gateways", "edge-grid-config"),
        ("gateways", "next-grid-config"),
        ("gateways", "next-gw"),
    }
    empty = GatewayOverlay(plain, rendered_overlay(plain).scope)
    assert desired_configmaps("mesh", empty) == [], "no overlay is written before the first"


def test_a_patch_moves_the_content_and_keeps_other_owners() -> None:
    gateway = GatewayRef(name="edge", namespace="gateways", config_map_key="routing-overlay.json")
    (overlay,) = desired_configmaps("mesh", rendered_overlay(gateway))
    existing = {
        "metadata": {
            "labels": {"app.kubernetes.io/managed-by": "grid"},
            "annotations": {DIGEST_ANNOTATION: "grid-config.json:old"},
            "ownerReferences": [{"uid": "someone-else"}, {"uid": "uid-1"}],
        },
        "data": {"grid-config.json": "{}"},
    }
    assert not matches(existing, overlay, "uid-1")
    patch = overlay.patch(existing, OWNER)
    assert patch["data"] == {"grid-config.json": None, "routing-overlay.json": overlay.text}
    assert [ref["uid"] for ref in patch["metadata"]["ownerReferences"]] == ["someone-else", "uid-1"]


def test_long_names_become_valid_label_values() -> None:
    name = "a" * 60 + ".b" * 40
    value = label_value(name)
    assert len(value) <= 63 and value != label_value(name + "c")
    assert label_value("mesh") == "mesh"


# --- statuses -----------------------------------------------------------------------------------


def test_a_merge_patch_removes_what_is_gone_and_keeps_what_is_equal() -> None:
    old = {"phase": "Active", "lastProbe": {"at": "t1", "message": "x"}, "kopf": {"progress": {}}}
    new = {"phase": "Active", "lastProbe": {"at": "t2"}, "conditions": []}
    assert merge_patch(old, new) == {
        "kopf": None,
        "lastProbe": {"at": "t2", "message": None},
        "conditions": [],
    }
    assert merge_patch(new, new) == {}


def test_volatile_status_changes_are_written_at_most_once_per_interval() -> None:
    memory = StatusMemory(interval_s=10.0)
    first = {"phase": "Active", "lastProbe": {"at": "t1"}}
    patch = memory.due("GridSite", "a", first, {}, now=0.0)
    assert patch == first
    memory.wrote("GridSite", "a", first, now=0.0)
    probed = {"phase": "Active", "lastProbe": {"at": "t2"}}
    assert memory.due("GridSite", "a", probed, first, now=5.0) is None
    assert memory.due("GridSite", "a", probed, first, now=11.0) == {"lastProbe": {"at": "t2"}}
    changed = {"phase": "Unreachable", "lastProbe": {"at": "t3"}}
    assert memory.due("GridSite", "a", changed, first, now=5.0) is not None
    # What the API already holds is not written again...
    assert memory.due("GridSite", "b", first, first, now=0.0) is None
    # ...unless someone else changed it since (and the watch had time to show it).
    memory.wrote("GridSite", "c", first, now=0.0)
    edited = {"phase": "Pending"}
    assert memory.due("GridSite", "c", first, edited, now=1.0) is None
    assert memory.due("GridSite", "c", first, edited, now=20.0) == merge_patch(edited, first)
    memory.keep_only({("GridSite", "a")})
    assert memory.last("GridSite", "c") is None and memory.last("GridSite", "a") == first


def test_the_spec_condition_keeps_its_transition_time() -> None:
    conditions = with_spec_condition([], ["spec.x: bad"], 2, NOW)
    (refused,) = conditions
    assert (refused.status.value, refused.reason) == ("False", "SpecRejected")
    later = with_spec_condition(conditions, ["spec.x: bad"], 2, NOW + timedelta(minutes=5))
    assert later[0].last_transition_time == refused.last_transition_time
    fixed = with_spec_condition(later, [], 3, NOW + timedelta(minutes=6))
    assert (
        fixed[0].status.value == "True"
        and fixed[0].last_transition_time > refused.last_transition_time
    )


def test_a_network_is_degraded_while_an_overlay_cannot_be_written() -> None:
    network = load_network()
    report = NetworkReport(
        membership_running=True,
        grid_id="grid-1",
        gateways=(
            GatewayOutcome("edge", "gateways", revision="a" * 64, write_message="forbidden"),
        ),
        seeds=SeedReport(configured=("10.0.0.1:7946",), peers_known=1),
    )
    status, events = network_status(network, None, report, NOW)
    assert status.phase.value == "Degraded"
    assert [event.reason for event in events] == ["ConfigAccepted", "DegradationDetected"]
    assert status.gateways[0].message == "forbidden"
    written = {c.type: c for c in status.conditions}
    assert written["OverlaysWritten"].status.value == "False"
    assert written["SeedsReachable"].reason == "PeersKnown"

    healthy = NetworkReport(membership_running=True, grid_id="grid-1")
    recovered, events = network_status(network, status, healthy, NOW + timedelta(seconds=5))
    assert recovered.phase.value == "Active" and [e.reason for e in events] == ["Recovered"]


@pytest.mark.parametrize(
    ("seeds", "reason", "status"),
    [
        (SeedReport(), "NoSeeds", "True"),
        (SeedReport(configured=("a:1",), joining=True), "Joining", "Unknown"),
        (SeedReport(configured=("a:1",)), "NoSeedAnswered", "False"),
        (
            SeedReport(configured=("a:1", "b:1"), unresolved=("b:1 (no)",), peers_known=2),
            "PeersKnown",
            "True",
        ),
    ],
)
def test_the_seeds_condition(seeds: SeedReport, reason: str, status: str) -> None:
    report = NetworkReport(membership_running=True, grid_id="g", seeds=seeds)
    result, _ = network_status(load_network(), None, report, NOW)
    (found,) = [c for c in result.conditions if c.type == "SeedsReachable"]
    assert (found.reason, found.status.value) == (reason, status)


def _caught_up(report: NetworkReport, previous: Any = None, at: datetime = NOW) -> Any:
    status, _ = network_status(load_network(), previous, report, at)
    (found,) = [c for c in status.conditions if c.type == "CaughtUp"]
    return status, found


def test_caught_up_says_the_site_s_view_is_complete() -> None:
    report = NetworkReport(
        membership_running=True, grid_id="g", caught_up=True, seeds=SeedReport(peers_known=2)
    )
    status, found = _caught_up(report)
    assert (found.status.value, found.reason) == ("True", "CaughtUp")
    assert "view of the mesh is complete" in found.message
    assert status.items_waiting == 0
    assert dump_status(status)["itemsWaiting"] == 0
    assert status.phase.value == "Active"


def test_caught_up_says_a_site_still_walking_its_peers_stores_is_partial() -> None:
    walking = NetworkReport(membership_running=True, grid_id="g", seeds=SeedReport(peers_known=1))
    status, found = _caught_up(walking)
    assert (found.status.value, found.reason) == ("False", "CatchingUp")
    assert found.message.startswith("walking peers' stores: this site's view of the mesh is")
    assert status.items_waiting == 0
    # Catching up is no degradation: the site routes on what it holds.
    assert status.phase.value == "Active"
    alone = NetworkReport(membership_running=True, grid_id="g")
    _, found = _caught_up(alone)
    assert (found.status.value, found.reason) == ("False", "CatchingUp")
    assert found.message.startswith("no peer known yet")


@pytest.mark.parametrize(
    ("waiting", "message"),
    [
        (1, "1 item waits for its origin's certificate: this site's view of the mesh is partial"),
        (
            12,
            "12 items wait for their origin's certificate: this site's view of the mesh is partial",
        ),
    ],
)
def test_caught_up_counts_the_items_waiting_for_their_origin_s_certificate(
    waiting: int, message: str
) -> None:
    report = NetworkReport(
        membership_running=True,
        grid_id="g",
        items_waiting=waiting,
        seeds=SeedReport(peers_known=1),
    )
    status, found = _caught_up(report)
    assert (found.status.value, found.reason, found.message) == ("False", "ItemsWaiting", message)
    assert status.items_waiting == waiting
    assert dump_status(status)["itemsWaiting"] == waiting


def test_caught_up_is_false_while_the_node_does_not_run() -> None:
    stopped = NetworkReport(membership_running=False, grid_id="g", items_waiting=3)
    status, found = _caught_up(stopped)
    assert (found.status.value, found.reason) == ("False", "NotRunning")
    assert found.message == "the SWIM node does not run (see MembershipReady)"
    # No count from a node that does not run: the field is left out.
    assert status.items_waiting is None
    assert "itemsWaiting" not in dump_status(status)
    rejected, _ = network_status(
        load_network(), None, NetworkReport(config_error="the spec was refused: x"), NOW
    )
    (found,) = [c for c in rejected.conditions if c.type == "CaughtUp"]
    assert (found.status.value, found.reason) == ("False", "NotRunning")


def test_caught_up_turns_true_and_keeps_its_transition_time_while_it_holds() -> None:
    catching = NetworkReport(membership_running=True, grid_id="g", seeds=SeedReport(peers_known=1))
    before, was = _caught_up(catching)
    waiting = NetworkReport(
        membership_running=True, grid_id="g", items_waiting=4, seeds=SeedReport(peers_known=1)
    )
    middle, still = _caught_up(waiting, before, NOW + timedelta(seconds=5))
    assert still.reason == "ItemsWaiting"
    assert still.last_transition_time == was.last_transition_time  # still False
    done = NetworkReport(
        membership_running=True, grid_id="g", caught_up=True, seeds=SeedReport(peers_known=1)
    )
    after, now_true = _caught_up(done, middle, NOW + timedelta(seconds=10))
    assert now_true.status.value == "True"
    assert now_true.last_transition_time == NOW + timedelta(seconds=10)
    _, held = _caught_up(done, after, NOW + timedelta(seconds=20))
    assert held.last_transition_time == now_true.last_transition_time


def test_a_changing_count_of_items_waiting_is_written_at_most_once_per_interval() -> None:
    """The count (``itemsWaiting`` and ``CaughtUp``'s message) may change at every pass
    while a site catches up: written at most once per status interval; the condition's
    status or reason at once."""
    network = load_network()
    memory = StatusMemory(interval_s=10.0)

    def document(report: NetworkReport, previous: Any = None) -> tuple[Any, dict[str, Any]]:
        status, _ = network_status(network, previous, report, NOW)
        return status, dump_status(status)

    def report(waiting: int = 0, *, caught_up: bool = False) -> NetworkReport:
        return NetworkReport(
            membership_running=True,
            grid_id="g",
            caught_up=caught_up,
            items_waiting=waiting,
            seeds=SeedReport(peers_known=1),
        )

    status, first = document(report(12))
    assert memory.due("GridNetwork", "mesh", first, {}, now=0.0) == first
    memory.wrote("GridNetwork", "mesh", first, now=0.0)
    status, fewer = document(report(7), status)
    assert fewer != first
    assert memory.due("GridNetwork", "mesh", fewer, first, now=1.0) is None
    patch = memory.due("GridNetwork", "mesh", fewer, first, now=10.0)
    assert patch is not None and patch["itemsWaiting"] == 7
    # Another reason, or the condition turning True, is written at once.
    status, walking = document(report(0), status)
    assert memory.due("GridNetwork", "mesh", walking, first, now=1.0) is not None
    status, done = document(report(caught_up=True), status)
    patch = memory.due("GridNetwork", "mesh", done, first, now=1.0)
    assert patch is not None
    (written,) = [c for c in patch["conditions"] if c["type"] == "CaughtUp"]
    assert (written["status"], written["reason"]) == ("True", "CaughtUp")


def test_a_node_that_gave_way_to_an_older_one_of_its_site_says_so_in_membership_ready() -> None:
    network = load_network()
    running = NetworkReport(membership_running=True, grid_id="g")
    active, _ = network_status(network, None, running, NOW)
    conflict = (
        "site site-a is already held by a live node at 10.0.0.7:7946 (started earlier); "
        "this node stopped"
    )
    stopped = NetworkReport(membership_running=False, grid_id="g", name_conflict=conflict)
    status, events = network_status(network, active, stopped, NOW + timedelta(seconds=1))
    written = {c.type: c for c in status.conditions}
    membership = written["MembershipReady"]
    assert (membership.status.value, membership.reason) == ("False", "SiteNameConflict")
    assert membership.message == conflict
    assert written["ConfigValid"].status.value == "True"  # not a setting
    assert status.phase.value == "Initializing"
    assert [event.reason for event in events] == ["MembershipStopped"]
    # Once the node runs again, the condition says so.
    again, _ = network_status(network, status, running, NOW + timedelta(seconds=2))
    membership = {c.type: c for c in again.conditions}["MembershipReady"]
    assert (membership.status.value, membership.reason) == ("True", "MembershipRunning")


def test_budget_windows_are_aligned_for_every_site() -> None:
    budget = TenantBudget.model_validate({"tenant": "acme", "cap": 100, "window": "1h"})
    window = budget_window(budget, NOW + timedelta(minutes=17))
    label, start = window.counting, window.start
    assert start == NOW and label == f"w3600-{int(NOW.timestamp())}"
    state = GridState("site-a")
    state.add_spend("acme", label, 150, NOW.timestamp())
    (status,) = budget_statuses([budget], state, NOW + timedelta(minutes=30), unheard={})
    assert (status.used, status.cap, status.exhausted) == (150, 100, True)


# --- identity, discovery, validation ------------------------------------------------------------


def sites(*bodies: dict[str, Any]) -> list[Any]:
    return [load_resource(body) for body in bodies]


def test_this_cluster_s_site_is_given_pinned_or_the_only_declared_one() -> None:
    fingerprint = "ab" * 32
    pinned = site_body("site-b", "mesh", fingerprint=fingerprint)
    plain = site_body("site-a", "mesh")
    assert resolve_local_site("site-x", "mesh", [], None).name == "site-x"
    assert resolve_local_site(None, "mesh", sites(plain, pinned), fingerprint).name == "site-b"
    assert resolve_local_site(None, "mesh", sites(plain), None).name == "site-a"
    discovered = site_body("site-c", "mesh")
    discovered["metadata"]["labels"][AUTO_DISCOVER_LABEL] = "true"
    assert resolve_local_site(None, "mesh", sites(plain, discovered), None).name == "site-a"
    unknown = resolve_local_site(None, "mesh", sites(plain, pinned), None)
    assert unknown.name is None and "--site NAME" in unknown.how


def test_discovered_sites_follow_swim_and_need_a_valid_name() -> None:
    manifest = discovered_site_manifest("mesh", "site-b")
    assert manifest is not None
    site = load_resource(manifest)
    assert site.auto_discover  # type: ignore[union-attr]
    assert discovered_site_manifest("mesh", "Not_A_Name") is None


def test_received_resources_are_checked_as_the_api_server_would_and_by_the_models() -> None:
    crd = crd_for_kind("GridNetwork")
    bad_schema = network_body("mesh", port=7946)
    bad_schema["spec"]["swim"]["port"] = 70000
    # The API server's layer refuses it...
    assert [str(v) for v in validate_custom_resource(bad_schema, crd)] == [
        "spec.swim.port: must be at most 65535"
    ]
    # ...and so does the operator, seeing it anyway.
    assert check_manifest(bad_schema).problems == (
        "spec.swim.port: must be at most 65535 (CRD schema)",
    )
    # Only the models know this rule; the schema lets it through.
    bad_model = network_body("mesh", port=7946)
    bad_model["spec"]["swim"]["suspicionTimeout"] = "100ms"
    assert validate_custom_resource(bad_model, crd) == []
    (problem,) = check_manifest(bad_model).problems
    assert problem.startswith("spec.swim: suspicionTimeout must be at least probeInterval")
    # Grid's own status is not part of the check.
    with_status = {**network_body("mesh", port=7946), "status": {"phase": "Whatever"}}
    assert check_manifest(with_status).resource is not None


def test_the_cache_keeps_the_last_valid_version_and_ignores_status_only_changes() -> None:
    cache = ResourceCache()
    body = network_body("mesh", port=7946)
    body["metadata"]["generation"] = 1
    assert cache.apply(body) is not None
    assert cache.apply({**body, "status": {"phase": "Active"}}) is None
    broken = network_body("mesh", port=7946)
    broken["metadata"]["generation"] = 2
    broken["spec"]["swim"]["probeInterval"] = "often"
    entry = cache.apply(broken)
    assert entry is not None and entry.problems and entry.resource is not None
    assert entry.resource.spec.swim.probe_interval.text == "200ms"


# --- settings and the command -------------------------------------------------------------------


def test_settings_come_from_the_deployment_s_environment() -> None:
    options = OperatorOptions.from_environment(
        {
            "GRID_SWIM_ADVERTISE_ADDRESS": "10.1.2.3",
            "GRID_SWIM_PORT": "7950",
            "GRID_METRICS_PORT": "9090",
            "GRID_HEALTH_PORT": "8080",
            "POD_NAMESPACE": "grid-example",
            "POD_NAME": "grid-operator-abc",
        },
        site="east",
    )
    assert options.namespace == "grid-example" and options.site == "east"
    assert options.swim_bind(7950) == "0.0.0.0:7950"
    assert options.swim_advertise(7950) == "10.1.2.3:7950"
    assert (options.metrics_address, options.health_address) == ("0.0.0.0:9090", "0.0.0.0:8080")
    v6 = OperatorOptions.from_environment({"GRID_SWIM_ADVERTISE_ADDRESS": "fd00::5"})
    assert v6.swim_advertise(7946) == "[fd00::5]:7946" and v6.swim_bind(7946) == "[::]:7946"
    alone = OperatorOptions.from_environment({})
    assert alone.swim_bind(7946) == "127.0.0.1:7946" and alone.namespace == "grid-system"
    assert alone.token_settle == OPERATOR_SETTLE
    slow = OperatorOptions.from_environment({"GRID_TOKEN_SETTLE_SECONDS": "300"})
    assert slow.token_settle == Settle(timedelta(minutes=5), timedelta(minutes=5))
    for unusable in ("0", "1.5", "3601", "soon"):
        with pytest.raises(OperatorConfigError, match="GRID_TOKEN_SETTLE_SECONDS must be"):
            OperatorOptions.from_environment({"GRID_TOKEN_SETTLE_SECONDS": unusable})
    assert (alone.secret_refresh_s, alone.probe_interval_s) == (30.0, 10.0)
    quick = OperatorOptions.from_environment(
        {"GRID_SECRET_REFRESH_SECONDS": "2", "GRID_PROBE_INTERVAL_SECONDS": "0.5"}
    )
    assert (quick.secret_refresh_s, quick.probe_interval_s) == (2.0, 0.5)
    for name in ("GRID_SECRET_REFRESH_SECONDS", "GRID_PROBE_INTERVAL_SECONDS"):
        for unusable in ("0", "-1", "3601", "nan", "inf", "soon"):
            with pytest.raises(OperatorConfigError, match=f"{name} must be"):
                OperatorOptions.from_environment({name: unusable})
    with pytest.raises(OperatorConfigError, match="GRID_SWIM_PORT must be a port number"):
        OperatorOptions.from_environment({"GRID_SWIM_PORT": "lots"})
    with pytest.raises(OperatorConfigError, match="no port"):
        OperatorOptions.from_environment({"GRID_SWIM_ADVERTISE_ADDRESS": "pod:7946"})
    with pytest.raises(OperatorConfigError, match="tick_s"):
        OperatorOptions(tick_s=0)


def test_the_command_refuses_unusable_settings_with_exit_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from kubernetes.config import kube_config

    monkeypatch.setenv("GRID_METRICS_PORT", "99999")
    assert main(["operator"]) == 2
    assert "GRID_METRICS_PORT must be a port number" in capsys.readouterr().err
    monkeypatch.delenv("GRID_METRICS_PORT")
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(tmp_path / "missing"))
    assert main(["operator", "--namespace", "grid-example"]) == 2
    assert "no Kubernetes credentials" in capsys.readouterr().err


def test_metadata_of_a_rejected_network_is_enough_for_its_status() -> None:
    from grid.operator.status import rejected_network

    network = rejected_network("broken", 4)
    assert network.metadata == ObjectMeta(name="broken", generation=4)


@pytest.mark.kmock_only(reason="reads the token the request carried from kmock's request log")
async def test_outside_a_pod_the_kubeconfig_authenticates_kopf_and_the_client(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import logging

    import kopf
    from kubernetes.config import kube_config

    from grid.operator.handlers import connection_info
    from grid.operator.kube import configuration_from_environment

    token = "grid-test-bearer"
    kubeconfig = tmp_path / "config"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "lab", "cluster": {"server": cluster.url}}],
                "users": [{"name": "grid", "user": {"token": token}}],
                "contexts": [{"name": "lab", "context": {"cluster": "lab", "user": "grid"}}],
                "current-context": "lab",
            }
        )
    )
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(kubeconfig))
    info = connection_info(
        "grid-example", logger=logging.getLogger("test"), settings=kopf.OperatorSettings()
    )
    assert info is not None
    assert (info.server, info.token, info.default_namespace) == (cluster.url, token, "grid-example")

    await prepare_namespaces(cluster)
    api = KubeApi(configuration_from_environment())
    await api.start()
    try:
        assert await api.read_secret(NAMESPACE, "missing") is None
    finally:
        await api.close()
    (request,) = [r for r in served_requests(cluster.emulator) if r.name == "missing"]
    assert request.headers["Authorization"] == f"Bearer {token}"


def test_the_command_stops_with_exit_2_when_its_health_port_is_taken(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    import socket

    from kubernetes.config import kube_config

    kubeconfig = tmp_path / "config"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "lab", "cluster": {"server": "http://127.0.0.1:9"}}],
                "users": [{"name": "grid", "user": {"token": "t"}}],
                "contexts": [{"name": "lab", "context": {"cluster": "lab", "user": "grid"}}],
                "current-context": "lab",
            }
        )
    )
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(kubeconfig))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        monkeypatch.setenv("GRID_HEALTH_PORT", str(port))
        monkeypatch.setenv("GRID_METRICS_PORT", str(port))
        assert main(["operator", "--log-level", "ERROR"]) == 2
    assert f"cannot listen on 0.0.0.0:{port}" in capsys.readouterr().err


def test_a_peer_refused_for_its_protocol_versions_shows_in_peers_compatible() -> None:
    network = load_network()
    refused = (
        "refused site future-site at 10.0.0.9:7946: it speaks SWIM protocol versions 9..9, "
        "this node speaks 1..2; a mesh may only mix releases next to each other "
        "(docs/upgrading.md)"
    )
    clean = NetworkReport(membership_running=True, grid_id="g")
    compatible, _ = network_status(network, None, clean, NOW)
    (before,) = [c for c in compatible.conditions if c.type == "PeersCompatible"]
    assert (before.status.value, before.reason) == ("True", "NoPeerRefused")
    report = NetworkReport(membership_running=True, grid_id="g", refused_versions=(refused,))
    status, _ = network_status(network, compatible, report, NOW + timedelta(seconds=1))
    (after,) = [c for c in status.conditions if c.type == "PeersCompatible"]
    assert (after.status.value, after.reason, after.message) == (
        "False",
        "ProtocolVersionRefused",
        refused,
    )
    # A peer of another release is the peer's problem, not this site's: still Active.
    assert status.phase.value == compatible.phase.value
