"""The release artifacts of ``scripts/build-wheels`` and installing them as a user would:
finding the wheels, reading what an ELF file links against, and a fresh venv with no Rust
toolchain in reach. Shared by ``tests/test_wheel_install.py`` and
``bench/bench_install.py``."""

from __future__ import annotations

import os
import platform
import re
import shutil
import struct
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ARCHES = ("x86_64", "aarch64")
#: The policy the wheels are built for (scripts/build-wheels: manylinux2014).
MANYLINUX = "manylinux_2_17"
MAX_GLIBC = (2, 17)
#: What the extension may link against: the core of glibc, which every manylinux system has
#: (a subset of the manylinux2014 policy's list).
ALLOWED_LIBRARIES = frozenset(
    {
        "libc.so.6",
        "libm.so.6",
        "libdl.so.2",
        "libpthread.so.0",
        "librt.so.1",
        "libgcc_s.so.1",
        "ld-linux-x86-64.so.2",
        "ld-linux-aarch64.so.1",
    }
)
ELF_MACHINES = {62: "x86_64", 183: "aarch64"}
RUST_ENV = re.compile(r"^(CARGO|RUSTUP|RUSTC|RUSTDOC|RUSTFLAGS)")


def wheel_dir() -> Path:
    """Where the artifacts are: ``$GRID_WHEEL_DIR``, else ``dist/``."""
    return Path(os.environ.get("GRID_WHEEL_DIR") or REPO / "dist")


def host_arch() -> str:
    return platform.machine()


def wheels(directory: Path) -> dict[str, Path]:
    """The manylinux wheel of each architecture in ``directory`` (by architecture)."""
    found: dict[str, Path] = {}
    for path in sorted(directory.glob("grid_mesh-*.whl")):
        match = re.search(r"_(x86_64|aarch64)\.whl$", path.name)
        if match:
            assert match.group(1) not in found, f"two {match.group(1)} wheels in {directory}"
            found[match.group(1)] = path
    return found


# -- what an ELF shared object needs ----------------------------------------------------------


@dataclass(frozen=True)
class ElfLinkage:
    machine: str
    needed: frozenset[str]
    #: The versions it needs of each library (``{"libc.so.6": {"GLIBC_2.17", ...}}``).
    versions: Mapping[str, frozenset[str]] = field(default_factory=dict)

    def max_glibc(self) -> tuple[int, ...]:
        found = [
            tuple(int(part) for part in name.removeprefix("GLIBC_").split("."))
            for names in self.versions.values()
            for name in names
            if re.fullmatch(r"GLIBC_\d+(\.\d+)*", name)
        ]
        return max(found, default=(0,))


def elf_linkage(data: bytes) -> ElfLinkage:
    """Read ``DT_NEEDED`` and the needed symbol versions (``.gnu.version_r``) of a 64-bit
    little-endian ELF file, from its section headers: what ``auditwheel show`` judges."""
    assert data[:4] == b"\x7fELF", "not an ELF file"
    assert data[4] == 2 and data[5] == 1, "not a 64-bit little-endian ELF file"
    (machine,) = struct.unpack_from("<H", data, 18)
    (shoff,) = struct.unpack_from("<Q", data, 40)
    shentsize, shnum = struct.unpack_from("<HH", data, 58)
    sections = [
        struct.unpack_from("<IIQQQQIIQQ", data, shoff + index * shentsize) for index in range(shnum)
    ]

    def string(section: int, offset: int) -> str:
        start = sections[section][4] + offset
        return data[start : data.index(b"\0", start)].decode()

    needed: set[str] = set()
    versions: dict[str, frozenset[str]] = {}
    for _name, kind, _flags, _addr, offset, size, link, info, _align, entsize in sections:
        if kind == 6:  # SHT_DYNAMIC
            for position in range(offset, offset + size, entsize):
                tag, value = struct.unpack_from("<qQ", data, position)
                if tag == 1:  # DT_NEEDED
                    needed.add(string(link, value))
        elif kind == 0x6FFFFFFE:  # SHT_GNU_verneed
            position = offset
            for _ in range(info):
                _version, count, file, aux, following = struct.unpack_from("<HHIII", data, position)
                names = set()
                entry = position + aux
                for _ in range(count):
                    _hash, _flags2, _other, name, next_aux = struct.unpack_from(
                        "<IHHII", data, entry
                    )
                    names.add(string(link, name))
                    entry += next_aux
                versions[string(link, file)] = frozenset(names)
                position += following
    return ElfLinkage(ELF_MACHINES.get(machine, str(machine)), frozenset(needed), versions)


# -- a user's fresh venv ------------------------------------------------------------------------


def env_without_rust() -> dict[str, str]:
    """This process's environment with no Rust toolchain in reach: no directory on ``PATH``
    that holds ``cargo`` or ``rustc`` (``~/.cargo/bin`` among them), no ``CARGO*``,
    ``RUSTUP*`` or ``RUSTC*`` variables. A wheel that needed building would fail here."""
    env = {name: value for name, value in os.environ.items() if not RUST_ENV.match(name)}
    kept = [
        directory
        for directory in env.get("PATH", "").split(os.pathsep)
        if directory
        and not Path(directory, "cargo").exists()
        and not Path(directory, "rustc").exists()
        and Path(directory).resolve() != (Path.home() / ".cargo" / "bin").resolve()
    ]
    env["PATH"] = os.pathsep.join(kept)
    env.pop("VIRTUAL_ENV", None)
    env.pop("PYTHONPATH", None)
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def base_python() -> str:
    """The interpreter this venv was made from (a fresh venv is made from it, not from this
    venv, so it sees none of this venv's packages)."""
    return getattr(sys, "_base_executable", sys.executable)


@dataclass
class Steps:
    """Wall times of the steps of an install, in seconds, in order."""

    seconds: dict[str, float] = field(default_factory=dict)

    def run(
        self,
        name: str,
        command: Sequence[str | os.PathLike[str]],
        env: Mapping[str, str],
        *,
        timeout: float,
        cwd: Path | None = None,
    ) -> subprocess.CompletedProcess[str]:
        start = time.monotonic()
        finished = subprocess.run(
            [str(part) for part in command],
            env=dict(env),
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        self.seconds[name] = time.monotonic() - start
        assert finished.returncode == 0, (
            f"{name} failed ({finished.returncode}): {' '.join(map(str, command))}\n"
            f"{finished.stdout[-4000:]}\n{finished.stderr[-4000:]}"
        )
        return finished

    @property
    def total(self) -> float:
        return sum(self.seconds.values())


def install_and_demo(
    venv: Path,
    requirement: str,
    env: Mapping[str, str],
    *,
    pip_args: Sequence[str] = (),
    cwd: Path | None = None,
    timeout: float = 900,
) -> tuple[Steps, str]:
    """Make a fresh venv at ``venv``, ``pip install`` ``requirement`` into it (as its own
    pip, the one ``python -m venv`` ships), then run ``grid demo --json`` and import
    ``grid._native``, all under ``env``. Returns the steps' times and the demo's output."""
    if venv.exists():
        shutil.rmtree(venv)
    steps = Steps()
    steps.run("venv", [base_python(), "-m", "venv", venv], env, timeout=120)
    python = venv / "bin" / "python"
    steps.run(
        "pip install",
        [python, "-m", "pip", "install", "--quiet", *pip_args, requirement],
        env,
        timeout=timeout,
        cwd=cwd,
    )
    demo = steps.run(
        "grid demo --json", [venv / "bin" / "grid", "demo", "--json"], env, timeout=300
    )
    steps.run("import grid._native", [python, "-c", "import grid._native"], env, timeout=60)
    return steps, demo.stdout
