"""The live view's ``certificates`` part (the same list ``/status`` carries): this site's
certificate first, then each peer's advertised one, with its fingerprint, expiry, what
vouches for it and why peers discard it; built from real engines at an explicit ``now``."""

from __future__ import annotations

from datetime import timedelta

from grid.view import MemberHistory, NetworkSource, NodeInfo, network_document
from test_engine import NETWORK, T0
from test_engine_certificates import Pair, issued, not_after

NODE = NodeInfo(True, "10.0.0.1:7946", 7, ("k-1",))


def certificates(pair: Pair, *, at: timedelta = timedelta()) -> list[dict[str, object]]:
    pair.a.refresh(T0 + at)
    document = network_document(NetworkSource(NETWORK, pair.a, NODE), MemberHistory(), T0 + at)
    return list(document["certificates"])


def test_own_certificate_first_then_each_peers_with_expiry_fingerprint_and_anchor() -> None:
    pair = Pair()
    assert certificates(pair) == [
        {
            "site": "site-a",
            "self": True,
            "fingerprint": pair.a_cert.fingerprint,
            "notAfter": not_after(pair.a_cert).isoformat(),
            "anchor": "ca",
            "problem": None,
        },
        {
            "site": "site-b",
            "self": False,
            "fingerprint": pair.b_cert.fingerprint,
            "notAfter": not_after(pair.b_cert).isoformat(),
            "anchor": "ca",
            "problem": None,
        },
    ]


def test_a_peer_certificate_pinned_by_nothing_has_no_anchor() -> None:
    pair = Pair()
    rotated = issued("site-b")
    pair.b.set_certificate(rotated.certificate_pem, T0)
    for item in pair.b.refresh(T0).items:
        pair.a.receive_item("site-b", item.lane, item.key, item.version, item.payload, T0)
    (peer,) = [row for row in certificates(pair) if row["site"] == "site-b"]
    assert (peer["fingerprint"], peer["anchor"]) == (rotated.fingerprint, None)


def test_an_expired_certificate_says_when_and_why_it_is_discarded() -> None:
    pair = Pair()
    expiry = not_after(pair.b_cert)
    rows = certificates(pair, at=expiry - T0 + timedelta(hours=1))
    (peer,) = [row for row in rows if row["site"] == "site-b"]
    assert peer["notAfter"] == expiry.isoformat()
    assert peer["anchor"] is None
    assert isinstance(peer["problem"], str) and "expired" in peer["problem"]


def test_a_network_without_an_engine_lists_none() -> None:
    document = network_document(NetworkSource(NETWORK, None, None), MemberHistory(), T0)
    assert document["certificates"] == []
