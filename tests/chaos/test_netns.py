"""The lab network itself: partitions cut both ways, one-way loss cuts one way, healing
restores everything, and namespaces of a run that is gone are cleaned up."""

from __future__ import annotations

import subprocess
import sys

import pytest

from chaos import netns

pytestmark = pytest.mark.slow

RECEIVE = """
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind((sys.argv[1], 9999))
s.settimeout(float(sys.argv[2]))
try:
    print(s.recvfrom(64)[0].decode())
except OSError:
    print("nothing")
"""
SEND = """
import socket, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for _ in range(10):  # a few tries: the receiver may not be bound yet
    s.sendto(b"hello", (sys.argv[1], 9999))
    time.sleep(0.03)
"""


def delivered(lab: netns.Lab, sender: str, receiver: str) -> bool:
    """Whether a datagram from ``sender`` reaches ``receiver`` (inside their namespaces)."""
    listener = subprocess.Popen(
        [*lab.exec_prefix(receiver), sys.executable, "-c", RECEIVE, lab.address(receiver), "1.0"],
        stdout=subprocess.PIPE,
        text=True,
    )
    subprocess.run(
        [*lab.exec_prefix(sender), sys.executable, "-c", SEND, lab.address(receiver)],
        check=True,
        timeout=30,
    )
    output, _ = listener.communicate(timeout=30)
    return output.strip() == "hello"


@pytest.fixture
def lab(lab_factory: list[netns.Lab]) -> netns.Lab:
    made = netns.Lab(["a", "b", "c"])
    lab_factory.append(made)
    made.create()
    return made


def test_partitions_cut_both_ways_and_heal(lab: netns.Lab) -> None:
    assert delivered(lab, "a", "b") and delivered(lab, "b", "a")
    lab.partition([["a"], ["b", "c"]])
    assert not delivered(lab, "a", "b") and not delivered(lab, "b", "a")
    assert delivered(lab, "b", "c")
    lab.heal()
    assert delivered(lab, "a", "b") and delivered(lab, "c", "a")


def test_one_way_loss_cuts_one_way(lab: netns.Lab) -> None:
    if lab.one_way_unsupported:
        pytest.skip(f"one-way loss is not available here: {lab.one_way_unsupported}")
    lab.mute("a")
    assert not delivered(lab, "a", "b") and delivered(lab, "b", "a")
    lab.unmute("a")
    lab.deafen("a")
    assert delivered(lab, "a", "b") and not delivered(lab, "b", "a")
    lab.heal()
    assert delivered(lab, "a", "b") and delivered(lab, "b", "a")


def test_namespaces_of_a_run_that_is_gone_are_removed(lab_factory: list[netns.Lab]) -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    stale = netns.Lab(["x"], prefix=netns.run_prefix(gone.pid).replace("None", "0"))
    stale.create()
    lab_factory.append(stale)
    sleeper = subprocess.Popen([*stale.exec_prefix("x"), "sleep", "600"])
    try:
        removed = netns.cleanup_stale()
        assert stale.namespace("x") in removed and stale.bridge_namespace in removed
        assert stale.namespace("x") not in netns.list_namespaces()
        assert sleeper.wait(timeout=10) == -9
    finally:
        if sleeper.poll() is None:
            sleeper.kill()
