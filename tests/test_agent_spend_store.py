"""The agent's spend checkpoint file: written only when it changed, private, read back as
written, and set aside (spend then counts from the first scrape) when it is not this
site's or not a checkpoint. The escrow holder file beside it likewise."""

from __future__ import annotations

import stat
from pathlib import Path

from grid.agent.spend_store import EscrowStore, SpendStore
from grid.crdt.escrow import EscrowRecord
from grid.engine import EscrowCheckpoint, SpendCheckpoint
from grid.engine.spend_checkpoint import SourceBaseline

CHECKPOINT = SpendCheckpoint(
    "site-a",
    1_750_000_000_123,
    (("acme", "w86400-1749945600", 1500),),
    (("acme", "w86400-1749945600", 0.25),),
    {"litellm": SourceBaseline("f" * 32, {(("model", "gpt"), ("team", "acme")): 1234.0})},
)


def test_a_checkpoint_is_written_privately_and_read_back(tmp_path: Path) -> None:
    store = SpendStore(tmp_path, "prod", "site-a")
    assert store.load() is None  # a first start
    assert store.keep(CHECKPOINT)
    assert stat.S_IMODE(store.path.stat().st_mode) == 0o600
    assert store.path == tmp_path / "spend" / "prod.json"
    assert SpendStore(tmp_path, "prod", "site-a").load() == CHECKPOINT


def test_an_unchanged_checkpoint_is_not_written_again(tmp_path: Path) -> None:
    store = SpendStore(tmp_path, "prod", "site-a")
    assert store.keep(CHECKPOINT)
    store.path.write_bytes(b"touched")
    assert store.keep(CHECKPOINT)
    assert store.path.read_bytes() == b"touched"


def test_a_write_that_fails_says_so(tmp_path: Path) -> None:
    (tmp_path / "spend").write_text("a file where the directory should be")
    store = SpendStore(tmp_path, "prod", "site-a")
    assert not store.keep(CHECKPOINT)
    assert store.failures == 1


def test_another_sites_or_a_broken_checkpoint_is_set_aside(tmp_path: Path) -> None:
    SpendStore(tmp_path, "prod", "site-a").keep(CHECKPOINT)
    store = SpendStore(tmp_path, "prod", "site-b")
    assert store.load() is None
    assert not store.path.exists()
    assert (tmp_path / "spend" / "prod.json.unreadable").exists()
    store.path.write_bytes(b'{"format": 1, "site": "site-b"')
    assert store.load() is None


def escrow_holder() -> EscrowCheckpoint:
    record = EscrowRecord("acme", "w3600-1749945600", 7, 1000, 3, 250, revision=9)
    return EscrowCheckpoint("site-a", 7, (record,))


def test_the_escrow_holder_is_written_privately_read_back_or_set_aside(tmp_path: Path) -> None:
    store = EscrowStore(tmp_path, "prod", "site-a")
    assert store.load() is None  # a first start
    assert store.keep(escrow_holder())
    assert stat.S_IMODE(store.path.stat().st_mode) == 0o600
    assert store.path == tmp_path / "spend" / "prod.escrow.json"
    assert EscrowStore(tmp_path, "prod", "site-a").load() == escrow_holder()
    other = EscrowStore(tmp_path, "prod", "site-b")
    assert other.load() is None  # another site's: set aside, a new holder starts
    assert (tmp_path / "spend" / "prod.escrow.json.unreadable").exists()
    broken = tmp_path / "elsewhere"
    (broken / "spend").mkdir(parents=True)
    (broken / "spend" / "prod.escrow.json").write_bytes(b"{")
    assert EscrowStore(broken, "prod", "site-a").load() is None


def test_an_escrow_holder_that_cannot_be_written_says_so(tmp_path: Path) -> None:
    (tmp_path / "spend").write_text("a file where the directory should be")
    store = EscrowStore(tmp_path, "prod", "site-a")
    assert not store.keep(escrow_holder())
    assert store.failures == 1
