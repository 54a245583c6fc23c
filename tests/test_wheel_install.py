"""Grid installs like any wheel (issue 18): ``pip install`` on a Linux machine without Rust.

The artifacts are the ones ``scripts/build-wheels`` leaves in ``dist/`` (``.ci/run`` builds
them before the suite; ``GRID_WHEEL_DIR`` names another directory). Each wheel is checked
for its tags, its contents, its metadata and what its extension links against (the
aarch64 one included, without running it); the sdist for what a source build needs; and
the wheel of this machine's architecture is installed into a fresh venv, with no Rust
toolchain in reach and binary wheels only, by the venv's own pip, and runs ``grid demo
--json``. Under ``CI=true`` a missing artifact fails; elsewhere the tests skip and say how
to build them."""

from __future__ import annotations

import email.parser
import email.policy
import json
import os
import shutil
import subprocess
import tarfile
import tomllib
import zipfile
from email.message import Message
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from support.wheels import (
    ALLOWED_LIBRARIES,
    ARCHES,
    MANYLINUX,
    MAX_GLIBC,
    REPO,
    elf_linkage,
    env_without_rust,
    host_arch,
    install_and_demo,
    wheel_dir,
    wheels,
)

PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
PROJECT = PYPROJECT["project"]
VERSION = tomllib.loads((REPO / "Cargo.toml").read_text(encoding="utf-8"))["workspace"]["package"][
    "version"
]
DOC_PAGES = sorted(path.name for path in (REPO / "docs").glob("*.md"))
NATIVE = "grid/_native.abi3.so"
REQUIRED_CLASSIFIERS = {
    "Development Status :: 3 - Alpha",
    "Operating System :: POSIX :: Linux",
    "Programming Language :: Python :: 3.11",
    "Programming Language :: Python :: 3.12",
    "Programming Language :: Python :: 3.13",
    "Programming Language :: Rust",
    "Typing :: Typed",
}


def missing(what: str) -> None:
    """Fail under CI (the artifacts are built there first), else skip saying how to build."""
    message = f"{what} in {wheel_dir()}: run scripts/build-wheels (CI runs it in .ci/run)"
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


def stale_files(wheel: Path) -> list[str]:
    """The package's Python files, stub and docs that differ between ``wheel`` and this
    checkout (or are in only one of them): a wheel built from other sources."""
    package = REPO / "python" / "grid"
    sources = {
        f"grid/{path.relative_to(package)}": path
        for path in package.rglob("*")
        if path.suffix in {".py", ".pyi"} and "__pycache__" not in path.parts
    }
    # rglob does not enter python/grid/docs, the symlink to docs/.
    sources |= {f"grid/docs/{path.name}": path for path in (REPO / "docs").glob("*.md")}
    with zipfile.ZipFile(wheel) as archive:
        built = {
            name: archive.read(name)
            for name in archive.namelist()
            if name.startswith("grid/") and name.endswith((".py", ".pyi", ".md"))
        }
    return sorted(
        name
        for name in set(sources) | set(built)
        if name not in sources or name not in built or sources[name].read_bytes() != built[name]
    )


def the_wheel(arch: str) -> Path:
    found = wheels(wheel_dir()) if wheel_dir().is_dir() else {}
    if arch not in found:
        missing(f"no {arch} wheel")
    stale = stale_files(found[arch])
    if stale:
        missing(f"a wheel of other sources ({', '.join(stale[:3])} differ)")
    return found[arch]


def the_sdist() -> Path:
    found = sorted(wheel_dir().glob("grid_mesh-*.tar.gz")) if wheel_dir().is_dir() else []
    if not found:
        missing("no sdist")
    assert len(found) == 1, f"several sdists: {found}"
    return found[0]


def metadata(text: str) -> Message:
    return email.parser.Parser(policy=email.policy.compat32).parsestr(text)


def dist_info(archive: zipfile.ZipFile, name: str) -> str:
    return archive.read(f"grid_mesh-{VERSION}.dist-info/{name}").decode()


# -- the wheels, without installing them ----------------------------------------------------


def test_the_directory_holds_one_release_of_this_version() -> None:
    for arch in ARCHES:
        wheel = the_wheel(arch)
        assert wheel.name.startswith(f"grid_mesh-{VERSION}-cp311-abi3-"), wheel.name
    assert the_sdist().name == f"grid_mesh-{VERSION}.tar.gz"


@pytest.mark.parametrize("arch", ARCHES)
def test_each_wheel_is_abi3_manylinux_for_its_architecture(arch: str) -> None:
    with zipfile.ZipFile(the_wheel(arch)) as archive:
        wheel = metadata(dist_info(archive, "WHEEL"))
        linkage = elf_linkage(archive.read(NATIVE))
    assert wheel["Root-Is-Purelib"] == "false"
    assert f"cp311-abi3-{MANYLINUX}_{arch}" in wheel.get_all("Tag")
    # What auditwheel judges, read from the extension itself: the machine it runs on, the
    # libraries it links (none outside the manylinux policy) and the newest glibc symbol.
    assert linkage.machine == arch
    assert linkage.needed <= ALLOWED_LIBRARIES, sorted(linkage.needed - ALLOWED_LIBRARIES)
    assert linkage.max_glibc() <= MAX_GLIBC, linkage.versions


@pytest.mark.parametrize("arch", ARCHES)
def test_each_wheel_holds_the_package_its_docs_and_the_license(arch: str) -> None:
    with zipfile.ZipFile(the_wheel(arch)) as archive:
        names = set(archive.namelist())
        license_text = dist_info(archive, "licenses/LICENSE")
        docs = {
            name.removeprefix("grid/docs/"): archive.read(name).decode()
            for name in names
            if name.startswith("grid/docs/")
        }
    assert {NATIVE, "grid/__init__.py", "grid/cli.py", "grid/py.typed", "grid/_native.pyi"} <= names
    assert license_text == (REPO / "LICENSE").read_text(encoding="utf-8")
    assert "Apache License" in license_text and "Version 2.0, January 2004" in license_text
    assert sorted(docs) == DOC_PAGES, "grid docs serves every page of docs/"
    assert {name.split("/")[0] for name in names} == {"grid", f"grid_mesh-{VERSION}.dist-info"}
    assert not [
        name
        for name in names
        if "__pycache__" in name or (name.endswith((".pyc", ".so")) and name != NATIVE)
    ]


@pytest.mark.parametrize("arch", ARCHES)
def test_each_wheel_carries_the_metadata_a_user_checks(arch: str) -> None:
    with zipfile.ZipFile(the_wheel(arch)) as archive:
        meta = metadata(dist_info(archive, "METADATA"))
    assert meta["Name"] == PROJECT["name"] == "grid-mesh"
    assert meta["Version"] == VERSION
    assert meta["Requires-Python"] == ">=3.11"
    # PEP 639: the SPDX expression and the file; the deprecated License classifiers are not
    # used beside it.
    assert meta["License-Expression"] == "Apache-2.0"
    assert meta.get_all("License-File") == ["LICENSE"]
    classifiers = set(meta.get_all("Classifier"))
    assert classifiers >= REQUIRED_CLASSIFIERS
    assert not [c for c in classifiers if c.startswith("License ::")]
    urls = dict(entry.split(", ", 1) for entry in meta.get_all("Project-URL"))
    assert set(urls) == {"Homepage", "Documentation", "Source", "Issues"}
    # The runtime extras only: the development tools are a dependency group, unpublished.
    assert set(meta.get_all("Provides-Extra")) == set(PROJECT["optional-dependencies"])
    assert "dev" not in meta.get_all("Provides-Extra")
    requires = [Requirement(line) for line in meta.get_all("Requires-Dist")]
    assert {str(r) for r in requires if r.marker is None} == {
        str(Requirement(line)) for line in PROJECT["dependencies"]
    }
    assert not [r for r in requires if r.name in {"pytest", "mypy", "ruff", "maturin"}]
    assert meta.get_payload().startswith("# Grid"), "the README is the long description"


def test_the_sdist_holds_what_a_source_build_needs() -> None:
    with tarfile.open(the_sdist()) as archive:
        root = f"grid_mesh-{VERSION}/"
        names = {name.removeprefix(root) for name in archive.getnames()}
        pkg_info = archive.extractfile(root + "PKG-INFO")
        assert pkg_info is not None
        meta = metadata(pkg_info.read().decode())
    assert {
        "LICENSE",
        "PKG-INFO",
        "pyproject.toml",
        "README.md",
        "Cargo.toml",
        "Cargo.lock",
        "rust/grid-py/Cargo.toml",
        "rust/grid-core/Cargo.toml",
        "python/grid/__init__.py",
        "python/grid/py.typed",
    } <= names
    assert {f"python/grid/docs/{page}" for page in DOC_PAGES} <= names
    assert meta["License-Expression"] == "Apache-2.0"
    assert not [name for name in names if name.startswith(("target/", ".venv/", "dist/"))]


# -- installed like a user: a fresh venv, no Rust ---------------------------------------------


@pytest.mark.timeout(900)
def test_the_wheel_installs_and_runs_without_rust(tmp_path: Path) -> None:
    wheel = the_wheel(host_arch())
    env = env_without_rust()
    for tool in ("cargo", "rustc", "rustup"):
        assert shutil.which(tool, path=env["PATH"]) is None, f"{tool} is still on PATH"
    # Binary wheels only, for every package: nothing can be compiled. The dependencies come
    # from the index (a wheel by path: pip never looks for grid-mesh there).
    steps, report = install_and_demo(
        tmp_path / "venv", str(wheel), env, pip_args=["--only-binary", ":all:"]
    )
    demo = json.loads(report)
    assert demo["ok"] is True, demo["summary"]
    python = tmp_path / "venv" / "bin" / "python"
    shown = subprocess.run(
        [python, "-c", "import grid, grid._native; print(grid.__version__, grid._native.__file__)"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.split()
    assert shown[0] == VERSION
    assert shown[1].startswith(str(tmp_path / "venv")), "the venv's own copy, not the checkout"
    page = subprocess.run(
        [tmp_path / "venv" / "bin" / "grid", "docs", "scoring"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    assert page == (REPO / "docs" / "scoring.md").read_text(encoding="utf-8")
    # The booklet's assets and scenario and the live view's page are package data: the
    # installed copy builds the whole booklet from them.
    booklet = tmp_path / "booklet"
    subprocess.run(
        [tmp_path / "venv" / "bin" / "grid", "booklet", "--out", str(booklet)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    assert {"index.html", "swim.html", "crdt.html", "scoring.html"} <= {
        path.name for path in booklet.iterdir()
    }
    view = subprocess.run(
        [
            python,
            "-c",
            "import importlib.resources as r; "
            "print(all((r.files('grid.view') / n).is_file() "
            "for n in ('page.html', 'view.css', 'view.js')))",
        ],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.strip()
    assert view == "True", "the live view's page ships in the wheel"
    print(
        "install from the wheel: "
        + ", ".join(f"{name} {seconds:.1f} s" for name, seconds in steps.seconds.items())
        + f"; total {steps.total:.1f} s"
    )
