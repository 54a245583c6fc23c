"""Seal and open throughput of the SWIM frame: ``grid._native.Keyring`` against pyca
``cryptography``'s AESGCM building the same frame layout, in the same run, on the same
frames, from Python (so both sides pay one Python call per frame).

Frames of 256 and 1,400 bytes (the largest Grid sends): plaintext = frame - 33 bytes.
Each figure is the median of ``--repeat`` rounds of ``--frames`` operations.

Run: ``.venv/bin/python bench/bench_frame.py``
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable

from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from grid import _native

HEADER = b"GRID\x01"


def python_seal(cipher: AESGCM, plaintext: bytes) -> bytes:
    nonce = os.urandom(12)
    return HEADER + nonce + cipher.encrypt(nonce, plaintext, HEADER)


def python_open(cipher: AESGCM, frame: bytes) -> bytes:
    if len(frame) < 33 or frame[:5] != HEADER:
        raise ValueError("not a frame")
    return cipher.decrypt(frame[5:17], frame[17:], HEADER)


def rate(op: Callable[[bytes], bytes], inputs: list[bytes], repeat: int) -> float:
    """Median operations per second over ``repeat`` rounds."""
    rounds = []
    for _ in range(repeat):
        start = time.perf_counter()
        for data in inputs:
            op(data)
        rounds.append(len(inputs) / (time.perf_counter() - start))
    return statistics.median(rounds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--frames", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()

    key = os.urandom(32)
    ring = _native.Keyring(key)
    cipher = AESGCM(key)
    header = ("frame", "op", "native op/s", "python op/s", "ratio", "MB/s native")
    print("{:>6} {:>5} {:>12} {:>12} {:>6}  {}".format(*header))
    for frame_len in (256, 1400):
        plaintexts = [os.urandom(frame_len - 33) for _ in range(args.frames)]
        frames = [ring.seal(p) for p in plaintexts]
        # The same frames open on both sides: check before timing.
        assert python_open(cipher, frames[0]) == plaintexts[0]
        assert ring.open(python_seal(cipher, plaintexts[0])) == plaintexts[0]
        for op, native, python, inputs in (
            ("seal", ring.seal, lambda p: python_seal(cipher, p), plaintexts),
            ("open", ring.open, lambda f: python_open(cipher, f), frames),
        ):
            native_rate = rate(native, inputs, args.repeat)
            python_rate = rate(python, inputs, args.repeat)
            print(
                f"{frame_len:>6} {op:>5} {native_rate:>12,.0f} {python_rate:>12,.0f} "
                f"{native_rate / python_rate:>5.2f}x  {native_rate * frame_len / 1e6:,.0f}"
            )


if __name__ == "__main__":
    main()
