"""Protocol versions on the wire, over real UDP on 127.0.0.1: every ``HELLO`` names the range
of SWIM protocol versions its sender speaks (docs/upgrading.md), each pair of nodes speaks
the highest version both hold, and a peer sharing none is refused: counted, answered with
this node's own range, reported once as an event, logged naming both ranges and listed in
the agent's ``/status`` and ``/metrics``.

The peers of other releases here are ``Mallory``: a holder of the SWIM key with a valid
certificate, writing its ``HELLO`` with the independent wire code of ``support.wire``.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager

import aiohttp
import pytest

from grid.demo import MeshSettings, ProviderPlan, SitePlan
from grid.membership import PROTOCOLS, SwimConfig, SwimNode, VersionRefused
from grid.trust.pem import certificate_ders
from support.agents import AgentMeshes
from support.attacker import Mallory, wait_until
from support.swim import credentials
from support.wire import (
    KIND_HELLO,
    Envelope,
    Forger,
    Identity,
    Signer,
    hello_protocols,
    open_frame,
)

CONFIG = SwimConfig(0.2, 0.6)


@contextmanager
def node(site: str, key: bytes) -> Iterator[SwimNode]:
    with SwimNode("127.0.0.1:0", site, None, [key], CONFIG, credentials=credentials(site)) as n:
        yield n


def protocol_seen(viewer: SwimNode, site: str) -> int | None:
    return next((m.protocol for m in viewer.members() if m.site == site), None)


def refusals(events: list[object]) -> list[VersionRefused]:
    return [e for e in events if isinstance(e, VersionRefused)]


def test_this_build_speaks_the_previous_protocol_and_its_own() -> None:
    lowest, highest = PROTOCOLS
    assert lowest == highest - 1, "a release speaks the protocol of the release before it"


def test_two_nodes_of_this_build_speak_its_highest_version() -> None:
    key = secrets.token_bytes(32)
    with node("site-a", key) as a, node("site-b", key) as b:
        b.join([a.address])
        wait_until(
            lambda: (
                protocol_seen(a, "site-b") == PROTOCOLS[1]
                and protocol_seen(b, "site-a") == PROTOCOLS[1]
            ),
            10,
            "both nodes speak the highest version",
        )
        assert a.stats()["dropped_incompatible_version"] == 0


def test_a_hello_without_a_range_is_heard_as_release_0_1_0_and_refused() -> None:
    """Release 0.1.0 announced no range: protocol 1, which this build (two releases on)
    no longer speaks."""
    key = secrets.token_bytes(32)
    with node("site-a", key) as a:
        mallory = Mallory(key, "old-site")
        try:
            mallory.send(a, mallory.forger.hello(Identity.of(a), mallory.chain, protocols=None))
            wait_until(
                lambda: a.stats()["dropped_incompatible_version"] >= 1, 10, "old-site refused"
            )
            assert protocol_seen(a, "old-site") is None
            assert a.stats()["hellos_received"] >= 1
        finally:
            mallory.close()


def _answer_to(mallory: Mallory, key: bytes, timeout: float) -> Envelope:
    """The next HELLO ``mallory`` receives."""
    mallory.sock.settimeout(timeout)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        data = mallory.sock.recv(2048)
        envelope = Envelope.decode(open_frame(key, data))
        if envelope.kind == KIND_HELLO:
            return envelope
    raise AssertionError("no HELLO came back")


def test_a_peer_that_shares_no_version_is_refused_answered_and_reported_once() -> None:
    key = secrets.token_bytes(32)
    with node("site-a", key) as a:
        future = Mallory(key, "future-site")
        later = Mallory(key, "future-site", certificate=future.certificate)
        try:
            target = Identity.of(a)
            future.send(
                a, future.forger.hello(target, future.chain, want_reply=True, protocols=(9, 9))
            )
            # The refusing node answers with its own range, so the peer can say why too.
            answer = _answer_to(future, key, 10)
            assert hello_protocols(answer.body) == PROTOCOLS
            wait_until(
                lambda: a.stats()["dropped_incompatible_version"] == 1, 10, "the HELLO refused"
            )
            events = list(iter(lambda: a.next_event(0.5), None))
            assert [(r.site, r.theirs, r.ours) for r in refusals(events)] == [
                ("future-site", (9, 9), PROTOCOLS)
            ]
            assert "speaks SWIM protocol versions 9..9" in refusals(events)[0].describe()
            # Nothing more from that identity is heard, and asking again is no new report.
            future.send(a, future.forger.announce(target))
            future.send(a, future.forger.hello(target, future.chain, protocols=(9, 9)))
            wait_until(lambda: a.stats()["dropped_incompatible_version"] == 3, 10, "both refused")
            assert refusals(list(iter(lambda: a.next_event(0.2), None))) == []
            assert protocol_seen(a, "future-site") is None
            assert all(m.site != "future-site" for m in a.members())
            # The site's node of a release that overlaps is taken in, at the version shared.
            later.send(a, later.forger.hello(target, later.chain, protocols=(2, 9)))
            wait_until(
                lambda: protocol_seen(a, "future-site") == PROTOCOLS[1], 10, "the overlap taken"
            )
        finally:
            future.close()
            later.close()


async def test_an_agent_logs_lists_and_counts_a_peer_it_refused_for_its_versions(
    agent_mesh: AgentMeshes, caplog: pytest.LogCaptureFixture
) -> None:
    provider = ProviderPlan("llama-a", ("llama-3.1-8b",))
    sites = [
        SitePlan("site-a", "us-east", "us-east-1a", (provider,)),
        SitePlan("future-site", "us-east", "us-east-1b", ()),
    ]
    mesh = await agent_mesh(sites, MeshSettings(http=True))
    await mesh.start(["site-a"])
    site = mesh.sites["site-a"]
    agent = site.agent
    assert agent is not None and agent.http_address is not None
    swim_key = site.key_file.read_bytes() if site.key_file else b""
    tls = mesh.sites["future-site"].tls_dir
    chain = certificate_ders((tls / "tls.crt").read_text())
    signer = Signer.from_pem((tls / "tls.key").read_bytes())
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.1", 0))
        me = Identity.at("future-site", f"127.0.0.1:{sock.getsockname()[1]}", 1)
        forger = Forger(swim_key, signer, me)
        host, port = site.swim_address.rsplit(":", 1)
        target = Identity.at("site-a", site.swim_address, 0)
        caplog.set_level(logging.WARNING)
        sock.sendto(forger.hello(target, chain, protocols=(9, 9)), (host, int(port)))

        base = f"http://{agent.http_address}"
        async with aiohttp.ClientSession() as http:

            async def listed() -> list[dict[str, object]]:
                async with http.get(f"{base}/status") as response:
                    document = await response.json()
                membership = document["networks"]["grid-demo"]["membership"]
                assert membership["protocols"] == list(PROTOCOLS)
                return list(membership["refusedVersions"])

            deadline = time.monotonic() + 15
            while not (refused := await listed()) and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
            assert [(r["site"], r["theirs"], r["ours"]) for r in refused] == [
                ("future-site", [9, 9], list(PROTOCOLS))
            ]
            async with http.get(f"{base}/metrics") as response:
                metrics = await response.text()
    lines = [
        line
        for line in metrics.splitlines()
        if line.startswith("grid_swim_refused_messages_total")
        and 'reason="incompatible_version"' in line
    ]
    assert lines and float(lines[0].rsplit(" ", 1)[1]) >= 1
    said = [r.getMessage() for r in caplog.records if "future-site" in r.getMessage()]
    assert any("9..9" in m and f"{PROTOCOLS[0]}..{PROTOCOLS[1]}" in m for m in said), said
