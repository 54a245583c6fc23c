"""The shell-neutral runtime on its own: keyring parsing, the TLS prober against real
servers with certificates minted here, the HTTP endpoint pieces on 127.0.0.1, the
observation loops against a real provider endpoint, and two real SWIM nodes driven into
two engines."""

from __future__ import annotations

import asyncio
import base64
import logging
import secrets
import socket
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import aiohttp
import pytest
from prometheus_client import CollectorRegistry, Gauge

from grid.agent.network import no_kubernetes
from grid.engine import ItemOutcome, ProbeTarget, SiteEngine, SourceRead
from grid.errors import ConfigError, KeyFileError, SecretMaterialError
from grid.membership import NameConflict, SwimConfig
from grid.models import InferenceProvider
from grid.models.egress_source import EgressSource
from grid.models.phases import MemberState
from grid.models.site import Egress, EgressTlsMode, GridSite
from grid.runtime.credentials import swim_credentials
from grid.runtime.http import Endpoint, health_handler, metrics_handler
from grid.runtime.keyring import KEY_BYTES, Keyring, parse_keyring
from grid.runtime.notices import Notices
from grid.runtime.observers import Observers
from grid.runtime.probes import SiteProber, tcp_probe
from grid.runtime.swim import SwimDriver, SwimPlan
from support.pki import make_pki
from support.servers import PlainTcpServer, ProviderEndpoint, TlsServer, closed_port
from support.swim import credentials, site_certificate
from support.swim import test_ca as swim_ca
from test_engine import network, provider, site

pytestmark = pytest.mark.timeout(30)

LABEL = "key file /etc/grid/swim.key"


async def eventually(what: str, check: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not check():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for: {what}")
        await asyncio.sleep(0.05)


# --- keyrings --------------------------------------------------------------------------------


def test_a_keyring_is_raw_bytes_or_base64_lines_under_the_shells_error() -> None:
    first, second = secrets.token_bytes(KEY_BYTES), secrets.token_bytes(KEY_BYTES)
    assert parse_keyring(first, LABEL, error=KeyFileError).keys == (first,)
    text = b"# next key first\n" + b"\n".join(base64.b64encode(k) for k in (second, first))
    ring = parse_keyring(text, LABEL, error=SecretMaterialError)
    assert ring.keys == (second, first) and ring.primary == second
    assert repr(ring) == "Keyring(keys=2)"


@pytest.mark.parametrize("error", [KeyFileError, SecretMaterialError])
def test_an_unusable_keyring_raises_the_given_error_naming_the_label_only(
    error: type[ConfigError],
) -> None:
    material = base64.b64encode(b"secret-material-16")
    with pytest.raises(error) as raised:
        parse_keyring(material, LABEL, error=error)
    message = str(raised.value)
    assert message.startswith(LABEL) and "line 1: decodes to 18 bytes" in message
    assert material.decode() not in message and "secret-material" not in message


# --- probes ----------------------------------------------------------------------------------


async def test_the_prober_built_from_pem_text_presents_this_sites_certificate(
    tmp_path: Path,
) -> None:
    pki = make_pki(tmp_path, ("site-a", "site-b"))
    own = pki["site-a"]
    prober = SiteProber.from_pem(
        pki.ca_pem, own.certificate_pem, own.issued.private_key_pem().decode("ascii")
    )
    assert repr(prober) == "SiteProber(mutual=True)"
    async with TlsServer(
        pki["site-b"].files, client_ca_file=pki.ca_file, require_client_cert=True
    ) as server:
        mutual = ProbeTarget("site-b", server.address, EgressTlsMode.MUTUAL_TLS, "site-b")
        result = await prober.probe(mutual)
        assert result.reachable, result.error
        assert result.fingerprint == pki["site-b"].fingerprint
        await eventually("the client seen", lambda: server.client_names == ["site-a"])
        # Without this site's certificate the server drops the session (TLS 1.3 says so
        # only after the handshake) and never accepts an anonymous client.
        anonymous = SiteProber.from_pem(pki.ca_pem)
        assert repr(anonymous) == "SiteProber(mutual=False)"
        refused = await anonymous.probe(mutual)
        assert refused.error is not None and "client certificate" in refused.error
        assert server.client_names == ["site-a"]


async def test_plaintext_egress_is_a_tcp_connect() -> None:
    prober = SiteProber.from_pem()
    async with PlainTcpServer(None) as server:
        opened = await prober.probe(ProbeTarget("p", server.address, EgressTlsMode.PLAINTEXT, None))
        assert opened.reachable and opened.fingerprint is None
    closed = await tcp_probe(f"127.0.0.1:{closed_port()}", 2.0)
    assert not closed.reachable and closed.error == "connection refused"
    malformed = await tcp_probe("no-port", 2.0)
    assert not malformed.reachable and malformed.error


# --- HTTP ------------------------------------------------------------------------------------


async def test_the_endpoint_serves_health_and_metrics_and_names_a_busy_address() -> None:
    registry = CollectorRegistry()
    Gauge("grid_test_value", "a value", registry=registry).set(7)
    healthy = [True]
    routes = {
        "/healthz": health_handler(lambda: (healthy[0], "ok" if healthy[0] else "SWIM down")),
        "/metrics": metrics_handler(registry),
    }
    endpoint = Endpoint("127.0.0.1", 0, routes, error=KeyFileError)
    await endpoint.start()
    try:
        base = f"http://{endpoint.address}"
        async with aiohttp.ClientSession() as session:
            async with session.get(f"{base}/healthz") as response:
                assert (response.status, await response.text()) == (200, "ok\n")
            healthy[0] = False
            async with session.get(f"{base}/healthz") as response:
                assert (response.status, await response.text()) == (503, "SWIM down\n")
            async with session.get(f"{base}/metrics") as response:
                assert "grid_test_value 7.0" in await response.text()
        port = int(endpoint.address.rpartition(":")[2])
        busy = Endpoint("127.0.0.1", port, routes, error=SecretMaterialError)
        with pytest.raises(SecretMaterialError, match=f"cannot listen on 127.0.0.1:{port}"):
            await busy.start()
    finally:
        await endpoint.stop()
    with pytest.raises(RuntimeError):
        _ = endpoint.address


# --- observations ----------------------------------------------------------------------------


async def test_observations_follow_the_engines_targets_and_reach_it() -> None:
    async with ProviderEndpoint() as served, aiohttp.ClientSession() as session:
        served.set_gauge("queue", 3)
        served.set_gauge("kv", 0.5)
        base = provider("vllm", "site-a", health=True, metrics=True).model_dump(
            mode="json", by_alias=True, exclude_none=True
        )
        base["spec"]["endpoint"] = served.base_url
        base["spec"]["healthCheck"]["path"] = "/healthz"
        base["spec"]["metricsConfig"]["port"] = int(served.base_url.rpartition(":")[2])
        watched = InferenceProvider.model_validate(base)
        engine = SiteEngine(network(), "site-a", sites=SITES, providers=[watched])
        woken: list[int] = []
        observers = Observers(
            session=session,
            prober=SiteProber.from_pem(),
            engine_of=lambda: engine,
            wake=lambda: woken.append(1),
            logger=logging.getLogger("grid.test"),
            prefix="site-a/mesh",
            egress_reader=no_kubernetes,
        )
        try:
            observers.follow(engine)
            await eventually(
                "health checked", lambda: any(p == "/healthz" for p, _ in served.requests)
            )
            await eventually(
                "metrics scraped", lambda: any(p == "/metrics" for p, _ in served.requests)
            )
            await eventually("the engine woken", lambda: len(woken) >= 2)
            # Following again with the same targets starts nothing new.
            observers.follow(engine)
            # The provider is replaced by another with the same 1 s loops, whose requests
            # show time passing: once it has had two rounds, the removed provider's loops
            # would have run again had they not stopped.
            async with ProviderEndpoint() as control:
                replacement = dict(base, metadata={"name": "control"})
                replacement["spec"] = dict(base["spec"], endpoint=control.base_url)
                replacement["spec"]["metricsConfig"] = dict(
                    base["spec"]["metricsConfig"], port=int(control.base_url.rpartition(":")[2])
                )
                engine.set_resources(
                    network(), SITES, [InferenceProvider.model_validate(replacement)]
                )
                observers.follow(engine)
                await eventually("the control's first round", lambda: len(control.requests) >= 2)
                seen = len(served.requests)
                await eventually("two more rounds", lambda: len(control.requests) >= 6)
                assert len(served.requests) == seen, "the loops of a removed provider stopped"
        finally:
            await observers.stop()


async def test_the_egress_source_is_read_until_the_gridsite_names_another() -> None:
    """The object site-a's egress is read from is read every probe interval and reaches
    the engine; a GridSite that names another object stops the first one's readings."""
    readings: list[EgressSource] = []

    async def reader(source: EgressSource) -> SourceRead:
        readings.append(source)
        assert source.service is not None
        found = {
            "spec": {"type": "LoadBalancer", "ports": [{"port": 443}]},
            "status": {"loadBalancer": {"ingress": [{"hostname": f"{source.service.name}.lb"}]}},
        }
        return SourceRead(source, found)

    def reading_from(name: str) -> list[GridSite]:
        local = SITES[0].model_copy(deep=True)
        local.spec.egress = Egress.model_validate(
            {"from": {"service": {"namespace": "edge", "name": name}}}
        )
        return [local, *SITES[1:]]

    async with aiohttp.ClientSession() as session:
        engine = SiteEngine(network(), "site-a", sites=reading_from("first"), probe_interval_s=0.05)
        observers = Observers(
            session=session,
            prober=SiteProber.from_pem(),
            engine_of=lambda: engine,
            wake=lambda: None,
            logger=logging.getLogger("grid.test"),
            prefix="site-a/mesh",
            egress_reader=reader,
        )

        def announced() -> str | None:
            engine.refresh(datetime.now(UTC))
            gateway = engine.state.gateway("site-a")
            return None if gateway is None else gateway.address

        try:
            observers.follow(engine)
            await eventually("the first object read", lambda: announced() == "first.lb:443")
            await eventually("read again", lambda: len(readings) >= 3)
            engine.set_resources(network(), reading_from("second"), [])
            observers.follow(engine)
            await eventually("the second object read", lambda: announced() == "second.lb:443")
            second = [source.service.name for source in readings if source.service]
            at_switch = second.index("second")
            await eventually("read again", lambda: len(readings) >= at_switch + 4)
            assert "first" not in [
                source.service.name for source in readings[at_switch:] if source.service
            ]
        finally:
            await observers.stop()


async def test_the_agent_says_it_reads_no_kubernetes_object() -> None:
    source = EgressSource.model_validate({"gateway": {"namespace": "edge", "name": "gw"}})
    read = await no_kubernetes(source)
    assert read.found is None and read.error is not None
    assert "Gateway edge/gw" in read.error and "spec.egress.address" in read.error


# --- SWIM ------------------------------------------------------------------------------------

# Each GridSite pins the certificate its site presents.
SITES = [site(name, pin=site_certificate(name).fingerprint) for name in ("site-a", "site-b")]


def _driver(
    engine: SiteEngine,
    woken: list[str],
    conflicts: list[tuple[NameConflict, str]] | None = None,
) -> SwimDriver:
    logger = logging.getLogger("grid.test")
    return SwimDriver(
        Notices(logger, engine.site),
        logger,
        lambda: engine,
        lambda: woken.append(engine.site),
        on_conflict=None if conflicts is None else lambda *heard: conflicts.append(heard),
    )


async def test_two_drivers_join_exchange_items_and_a_departed_peer_stays_gone() -> None:
    key = secrets.token_bytes(KEY_BYTES)
    keyring = Keyring((key,))
    config = SwimConfig(probe_interval=0.2, suspicion_timeout=1.0, push_pull_interval=0.5)
    a_engine = SiteEngine(network(), "site-a", sites=SITES, providers=[provider("m", "site-a")])
    b_engine = SiteEngine(network(), "site-b", sites=SITES, providers=[])
    woken: list[str] = []
    a, b = _driver(a_engine, woken), _driver(b_engine, woken)
    try:
        await a.ensure(
            a_engine, SwimPlan("127.0.0.1:0", None, config, ()), keyring, credentials("site-a")
        )
        assert a.node is not None and a.running and a.error is None
        # A seed that cannot be used is reported and skipped; the next one is still joined.
        seeds = ("127.0.0.1:0", a.node.address)
        await b.ensure(
            b_engine, SwimPlan("127.0.0.1:0", None, config, seeds), keyring, credentials("site-b")
        )
        assert len(b.unusable_seeds) == 1 and b.unusable_seeds[0].startswith("127.0.0.1:0 (")
        await eventually(
            "b up at a",
            lambda: (
                "site-b" in a_engine.members
                and a_engine.members["site-b"].state is MemberState.ALIVE
            ),
        )
        assert a.peers_known() == 1
        # a's items (its provider record among them) reach b's engine through the driver.
        for item in a_engine.refresh(a_engine.members["site-b"].since).items:
            a.publish(item)
        await eventually(
            "items applied at b", lambda: b.received[("state", ItemOutcome.APPLIED.value)] >= 1
        )
        assert a.published and not a.refused
        await b.stop(leave=True)
        await eventually(
            "b left at a", lambda: a_engine.members["site-b"].state is MemberState.LEFT
        )
        left = a_engine.members["site-b"]
        # The member list never brings an identity back that the engine saw leave.
        for _ in range(5):
            a.sync_members(a_engine, left.since)
            await asyncio.sleep(0.1)
        assert a_engine.members["site-b"].state is MemberState.LEFT
        assert "site-a" in woken
    finally:
        await b.stop(leave=False)
        await a.stop(leave=False)
    assert a.node is None and not a.running


async def test_a_node_that_cannot_bind_is_reported_and_retried() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as taken:
        taken.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{taken.getsockname()[1]}"
        engine = SiteEngine(network(), "site-a", sites=SITES, providers=[])
        driver = _driver(engine, [])
        keyring = parse_keyring(secrets.token_bytes(KEY_BYTES), LABEL, error=KeyFileError)
        plan = SwimPlan(address, None, SwimConfig(), ())
        await driver.ensure(engine, plan, keyring, credentials("site-a"))
        assert driver.node is None and driver.error is not None
        assert driver.error.startswith(f"SWIM cannot start on {address}")
        assert key_not_in(driver.error, keyring.primary)
        assert driver.credentials_error is None
    await driver.ensure(engine, plan, keyring, credentials("site-a"))
    try:
        assert driver.node is not None and driver.error is None
    finally:
        await driver.stop(leave=False)


def key_not_in(text: str, key: bytes) -> bool:
    return base64.b64encode(key).decode() not in text and key.hex() not in text


def _membership_ready(engine: SiteEngine) -> str:
    """The network's MembershipReady status after a refresh."""
    engine.refresh(datetime.now(UTC))
    status = engine.statuses()[("GridNetwork", engine.network.metadata.name)]
    return next(c.status.value for c in status.conditions if c.type == "MembershipReady")


FAST = SwimConfig(probe_interval=0.2, suspicion_timeout=1.0, push_pull_interval=0.5)


async def test_a_second_node_of_a_site_gives_way_to_the_first_which_refuses_it() -> None:
    keyring = Keyring((secrets.token_bytes(KEY_BYTES),))
    first_engine = SiteEngine(network(), "site-a", sites=SITES, providers=[])
    second_engine = SiteEngine(network(), "site-a", sites=SITES, providers=[])
    first_heard: list[tuple[NameConflict, str]] = []
    second_heard: list[tuple[NameConflict, str]] = []
    first = _driver(first_engine, [], first_heard)
    second = _driver(second_engine, [], second_heard)
    try:
        await first.ensure(
            first_engine, SwimPlan("127.0.0.1:0", None, FAST, ()), keyring, credentials("site-a")
        )
        assert first.node is not None
        older = first.node
        # Generations are wall-clock milliseconds: the second node must start in a later one.
        await eventually(
            "a later millisecond", lambda: time.time_ns() // 1_000_000 > older.generation
        )
        plan = SwimPlan("127.0.0.1:0", None, FAST, (older.address,))
        await second.ensure(second_engine, plan, keyring, credentials("site-a"))
        newer = second.node
        assert newer is not None
        await eventually("the second node gave way", lambda: second.conflict is not None)
        assert second.conflict == (
            f"site site-a is already held by a live node at {older.address} (started "
            "earlier); this node stopped"
        )
        assert second.error == second.conflict and second.setup_error is None
        await eventually("the second node stopped", lambda: not newer.running)
        assert not second.running and _membership_ready(second_engine) == "False"
        ((conflict, message),) = second_heard
        assert conflict.yielded and conflict.address == older.address
        assert message == second.conflict
        assert second.name_conflicts == {"yielded": 1}
        # The first node keeps the name, and says whom it refused.
        await eventually("the first node refused it", lambda: bool(first_heard))
        ((conflict, message),) = first_heard
        assert not conflict.yielded and conflict.address == newer.address
        assert message == (
            f"another node at {newer.address} also claims site site-a; it was refused"
        )
        assert first.running and first.error is None and first.conflict is None
        assert first.name_conflicts == {"refused": 1}
        # The node that gave way is not started again by the same settings.
        await second.ensure(second_engine, plan, keyring, credentials("site-a"))
        assert second.node is newer and not second.running
    finally:
        await second.stop(leave=False)
        await first.stop(leave=False)
    assert second.conflict is None


async def test_new_credentials_are_taken_in_place_unless_the_node_would_refuse_them() -> None:
    keyring = Keyring((secrets.token_bytes(KEY_BYTES),))
    engine = SiteEngine(network(), "site-a", sites=SITES, providers=[])
    driver = _driver(engine, [])
    plan = SwimPlan("127.0.0.1:0", None, FAST, ())
    await driver.ensure(engine, plan, keyring, credentials("site-a"))
    try:
        first = driver.node
        assert first is not None and first.running
        # Another site's certificate: the node would refuse it, the running one stays.
        await driver.ensure(engine, plan, keyring, credentials("site-b"))
        assert driver.node is first and first.running
        assert driver.error is not None and driver.error.startswith(
            "the new site certificate is not used, the node keeps the current one: "
        )
        assert 'does not name site "site-a"' in driver.error
        assert driver.credentials_error is None
        # A renewed certificate that the GridSite does not pin yet is refused too...
        renewed = swim_ca().issue("site-a", now=datetime.now(UTC))
        renewed_credentials = swim_credentials(
            renewed.certificate_pem,
            renewed.private_key_pem().decode("ascii"),
            swim_ca().certificate_pem,
        )
        await driver.ensure(engine, plan, keyring, renewed_credentials)
        assert driver.node is first and driver.error is not None
        assert "pinned fingerprint" in driver.error
        # ...and taken once it does, in place: the same node signs with it, no restart.
        engine.set_resources(network(), [site("site-a", pin=renewed.fingerprint), SITES[1]], [])
        await driver.ensure(engine, plan, keyring, renewed_credentials)
        assert driver.node is first and first.running and driver.error is None
        await eventually("the node renewed", lambda: first.stats()["renewals"] == 1)
        assert driver.signs_with(renewed_credentials)
        # The same credentials again change nothing.
        await driver.ensure(engine, plan, keyring, renewed_credentials)
        assert driver.node is first and first.stats()["renewals"] == 1
    finally:
        await driver.stop(leave=False)


async def test_a_node_that_refuses_the_credentials_is_not_started_again_with_them() -> None:
    keyring = Keyring((secrets.token_bytes(KEY_BYTES),))
    engine = SiteEngine(network(), "site-a", sites=SITES, providers=[])
    driver = _driver(engine, [])
    plan = SwimPlan("127.0.0.1:0", None, FAST, ())
    await driver.ensure(engine, plan, keyring, credentials("site-b"))
    assert driver.node is None
    assert driver.credentials_error is not None
    assert driver.credentials_error.startswith("SWIM cannot start: ")
    assert 'does not name site "site-a"' in driver.credentials_error
    assert driver.error == driver.credentials_error == driver.setup_error
    await driver.ensure(engine, plan, keyring, credentials("site-a"))
    try:
        assert driver.running and driver.error is None and driver.credentials_error is None
    finally:
        await driver.stop(leave=False)


async def test_the_pins_follow_the_gridsites_of_a_running_node() -> None:
    keyring = Keyring((secrets.token_bytes(KEY_BYTES),))
    a_engine = SiteEngine(network(), "site-a", sites=SITES, providers=[])
    # site-b is told that site-a presents site-b's certificate: it does not hear site-a.
    wrong = [SITES[1], site("site-a", pin=site_certificate("site-b").fingerprint)]
    b_engine = SiteEngine(network(), "site-b", sites=wrong, providers=[])
    a, b = _driver(a_engine, []), _driver(b_engine, [])
    try:
        await a.ensure(
            a_engine, SwimPlan("127.0.0.1:0", None, FAST, ()), keyring, credentials("site-a")
        )
        assert a.node is not None
        plan = SwimPlan("127.0.0.1:0", None, FAST, (a.node.address,))
        await b.ensure(b_engine, plan, keyring, credentials("site-b"))
        b_node = b.node
        assert b_node is not None
        await eventually(
            "site-a refused at site-b",
            lambda: b_node.stats().get("dropped_untrusted_certificate", 0) > 0,
        )
        assert "site-a" not in b_engine.members
        b_engine.set_resources(network(), SITES, [])
        await b.ensure(b_engine, plan, keyring, credentials("site-b"))
        assert b.node is b_node  # replaced in place, not restarted
        await eventually(
            "site-a heard at site-b",
            lambda: (
                "site-a" in b_engine.members
                and b_engine.members["site-a"].state is MemberState.ALIVE
            ),
        )
    finally:
        await b.stop(leave=False)
        await a.stop(leave=False)
