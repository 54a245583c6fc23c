"""Every fenced code block of README.md and docs/*.md runs, parses or validates, or is
marked illustrative (issue 19).

- ``python``: executed in a fresh namespace, in a temporary working directory holding a
  copy of ``examples/`` and ``crds/``; top-level ``await`` runs under asyncio.
- ``yaml``: Grid resources (``apiVersion: grid.praxis-proxy.io/...``) are loaded with the
  directory loader and must validate; other YAML must parse.
- ``json``: must parse.
- ``sh``/``console``: each command must be a ``grid`` command (pipes and ``&&`` included);
  it runs in the temporary directory and must exit 0, or the status a trailing
  ``# exit N`` states. In ``console`` blocks commands are the ``$ `` lines.
- ``text``: output, diagrams and formulas; nothing to run.

A block that cannot run here (it needs a cluster, kubectl, the network, root, a running
mesh or a long run) is marked by an HTML comment on the line right before its fence::

    <!-- illustrative: needs a Kubernetes cluster -->

and the reason must say why. A fence without a language fails: tag output ``text``.
"""

from __future__ import annotations

import ast
import asyncio
import inspect
import json
import os
import re
import shlex
import shutil
import stat
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from grid.models.resources import load_resources_from_dir

ROOT = Path(__file__).resolve().parent.parent
DOCS = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))
#: Copied into each block's working directory, so docs can name them as in the repository.
FIXTURE_DIRS = ("examples", "crds")
GRID_GROUP = "grid.praxis-proxy.io/"
COMMAND_TIMEOUT_S = 120

_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<info>.*)$")
_MARKER = re.compile(r"^\s*<!--\s*illustrative:(?P<reason>.*?)-->\s*$")
_STRAY_MARKER = re.compile(r"<!--\s*illustrative\b")
_EXPECTED_EXIT = re.compile(r"\s#\s*exit\s+(?P<code>\d+)\s*$")

PYTHON = ("python", "py")
YAML = ("yaml", "yml")
JSON = ("json",)
SHELL = ("sh", "shell", "bash", "console")
TEXT = ("text",)


@dataclass(frozen=True)
class Block:
    """One fenced block: where it starts (the opening fence, 1-based), its language, its
    text (the fence's indentation removed), and the reason of its illustrative marker
    (None when unmarked)."""

    file: str
    line: int
    lang: str
    text: str
    illustrative: str | None

    @property
    def id(self) -> str:
        return f"{self.file}:{self.line}"


def extract_blocks(text: str, file: str) -> list[Block]:
    """The fenced blocks of a Markdown text. An unclosed fence runs to the end."""
    lines = text.splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        opening = _FENCE.match(lines[i])
        if opening is None:
            i += 1
            continue
        indent, fence = opening["indent"], opening["fence"]
        lang = opening["info"].strip().split(" ")[0].lower() if opening["info"].strip() else ""
        body: list[str] = []
        j = i + 1
        while j < len(lines):
            closing = re.match(rf"^[ \t]*{re.escape(fence[0])}{{{len(fence)},}}\s*$", lines[j])
            if closing:
                break
            line = lines[j]
            body.append(line[len(indent) :] if line.startswith(indent) else line.lstrip())
            j += 1
        marker = _MARKER.match(lines[i - 1]) if i > 0 else None
        reason = marker["reason"].strip() if marker else None
        blocks.append(Block(file, i + 1, lang, "\n".join(body) + "\n", reason))
        i = j + 1
    return blocks


def stray_markers(text: str) -> list[int]:
    """Lines holding an illustrative marker that is malformed or not right before a fence."""
    lines = text.splitlines()
    stray = []
    for number, line in enumerate(lines, start=1):
        if not _STRAY_MARKER.search(line):
            continue
        well_formed = _MARKER.match(line) is not None
        before_fence = number < len(lines) and _FENCE.match(lines[number]) is not None
        if not (well_formed and before_fence):
            stray.append(number)
    return stray


def _all_blocks() -> list[Block]:
    blocks = []
    for path in DOCS:
        blocks.extend(extract_blocks(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT))))
    return blocks


BLOCKS = _all_blocks()


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A scratch directory with the repository's examples, as the block's cwd."""
    for name in FIXTURE_DIRS:
        shutil.copytree(ROOT / name, tmp_path / name)
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize("block", BLOCKS, ids=[block.id for block in BLOCKS])
def test_block(block: Block, workdir: Path) -> None:
    if block.illustrative is not None:
        assert block.illustrative, f"{block.id}: the illustrative marker must give a reason"
        pytest.skip(f"{block.id} is illustrative: {block.illustrative}")
    if block.lang in PYTHON:
        run_python(block)
    elif block.lang in YAML:
        check_yaml(block, workdir)
    elif block.lang in JSON:
        check_json(block)
    elif block.lang in SHELL:
        run_shell(block, workdir)
    elif block.lang in TEXT:
        pass
    elif not block.lang:
        pytest.fail(f"{block.id}: the fence has no language; tag output and diagrams `text`")
    else:
        pytest.fail(f"{block.id}: no check for `{block.lang}` blocks; mark it illustrative")


def run_python(block: Block) -> None:
    # Leading newlines make tracebacks name the Markdown file's own line numbers.
    source = "\n" * block.line + block.text
    code = compile(source, block.file, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    namespace: dict[str, object] = {"__name__": "__docs__"}
    if code.co_flags & inspect.CO_COROUTINE:
        asyncio.run(eval(code, namespace))
    else:
        exec(code, namespace)


def check_yaml(block: Block, workdir: Path) -> None:
    try:
        documents = [doc for doc in yaml.safe_load_all(block.text) if doc is not None]
    except yaml.YAMLError as error:
        pytest.fail(f"{block.id}: not YAML: {error}")
    assert documents, f"{block.id}: an empty YAML block"
    grid = [
        doc
        for doc in documents
        if isinstance(doc, dict) and str(doc.get("apiVersion", "")).startswith(GRID_GROUP)
    ]
    if not grid:
        return
    directory = workdir / "docs-block"
    directory.mkdir()
    (directory / "block.yaml").write_text(block.text, encoding="utf-8")
    loaded = load_resources_from_dir(directory)
    problems = [str(error) for error in loaded.errors]
    assert not problems, f"{block.id}: invalid Grid resources:\n" + "\n".join(problems)
    assert len(loaded.resources) == len(grid)


def check_json(block: Block) -> None:
    try:
        json.loads(block.text)
    except json.JSONDecodeError as error:
        pytest.fail(f"{block.id}: not JSON ({error}); mark it illustrative if it elides")


def shell_commands(block: Block) -> list[str]:
    """The block's commands, continuation lines joined. In ``console`` blocks only the
    ``$ `` lines (and their continuations) are commands; the rest is output."""
    commands: list[str] = []
    pending: str | None = None
    for line in block.text.splitlines():
        if pending is not None:
            pending += " " + line.strip()
        elif block.lang == "console":
            if not line.startswith("$ "):
                continue
            pending = line[2:].strip()
        elif line.strip() and not line.lstrip().startswith("#"):
            pending = line.strip()
        else:
            continue
        if pending.endswith("\\"):
            pending = pending[:-1].rstrip()
            continue
        commands.append(pending)
        pending = None
    if pending is not None:
        commands.append(pending)
    return commands


def programs(command: str) -> list[str]:
    """The program of every simple command in ``command`` (split at pipes, ``&&``, ...)."""
    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
    lexer.commenters = "#"
    lexer.whitespace_split = True
    found: list[str] = []
    expect_program = True
    for token in lexer:
        if token and set(token) <= set("|&;()"):
            expect_program = True
        elif expect_program:
            found.append(token)
            expect_program = False
    return found


def expected_exit(command: str) -> int:
    stated = _EXPECTED_EXIT.search(command)
    return int(stated["code"]) if stated else 0


def run_shell(block: Block, workdir: Path) -> None:
    commands = shell_commands(block)
    assert commands, f"{block.id}: a shell block without commands"
    for command in commands:
        others = [name for name in programs(command) if name != "grid"]
        assert not others, (
            f"{block.id}: only grid commands run here, not {', '.join(others)}; "
            "mark the block illustrative with the reason"
        )
    env = {**os.environ, "PATH": f"{_grid_shim(workdir)}{os.pathsep}{os.environ['PATH']}"}
    for command in commands:
        done = subprocess.run(
            ["bash", "-o", "pipefail", "-c", command],
            cwd=workdir,
            env=env,
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT_S,
            check=False,
        )
        want = expected_exit(command)
        assert done.returncode == want, (
            f"{block.id}: `{command}` exited {done.returncode}, not {want}\n"
            f"stdout:\n{done.stdout[-3000:]}\nstderr:\n{done.stderr[-3000:]}"
        )


def _grid_shim(workdir: Path) -> Path:
    """A ``grid`` on PATH that runs this interpreter's grid.cli (the tested package)."""
    bin_dir = workdir / ".docs-bin"
    bin_dir.mkdir(exist_ok=True)
    shim = bin_dir / "grid"
    shim.write_text(
        "#!/bin/sh\n"
        f"exec {shlex.quote(sys.executable)} -c \"import sys; sys.argv[0] = 'grid'; "
        'from grid.cli import main; sys.exit(main())" "$@"\n',
        encoding="utf-8",
    )
    shim.chmod(shim.stat().st_mode | stat.S_IXUSR)
    return bin_dir


# The harness itself.


def _marked_docs() -> Iterator[tuple[str, str]]:
    for path in DOCS:
        yield str(path.relative_to(ROOT)), path.read_text(encoding="utf-8")


def test_every_doc_has_blocks_and_markers_sit_on_fences() -> None:
    assert {block.file for block in BLOCKS} >= {"README.md", "docs/observations.md"}
    for file, text in _marked_docs():
        assert stray_markers(text) == [], f"{file}: illustrative markers not right before a fence"
    reasonless = [block.id for block in BLOCKS if block.illustrative == ""]
    assert reasonless == [], f"illustrative markers without a reason: {reasonless}"


def test_the_extractor_finds_markers_indents_and_languages() -> None:
    text = (
        "intro\n"
        "<!-- illustrative: needs a cluster -->\n"
        "```sh\n"
        "kubectl get grid\n"
        "```\n"
        "- item\n"
        "\n"
        "  ```python\n"
        "  x = 1\n"
        "  ```\n"
        "<!-- illustrative: -->\n"
        "````\n"
        "```inner```\n"
        "````\n"
    )
    first, second, third = extract_blocks(text, "t.md")
    assert (first.line, first.lang, first.text, first.illustrative) == (
        3,
        "sh",
        "kubectl get grid\n",
        "needs a cluster",
    )
    assert (second.line, second.lang, second.text, second.illustrative) == (
        8,
        "python",
        "x = 1\n",
        None,
    )
    assert (third.lang, third.text, third.illustrative) == ("", "```inner```\n", "")
    assert stray_markers(text) == []
    assert stray_markers("<!-- illustrative: x -->\n\n```sh\n```\n") == [1]


def test_shell_parsing_finds_commands_programs_and_exits() -> None:
    console = Block("t.md", 1, "console", "$ grid crds \\\n  --check crds/\noutput\n", None)
    assert shell_commands(console) == ["grid crds --check crds/"]
    sh = Block("t.md", 1, "sh", "# comment\ngrid a | kubectl apply -f -   # note\n", None)
    assert shell_commands(sh) == ["grid a | kubectl apply -f -   # note"]
    assert programs("grid a | kubectl apply -f - && grid b; echo '|'") == [
        "grid",
        "kubectl",
        "grid",
        "echo",
    ]
    assert expected_exit("grid overlay verify x   # exit 1") == 1
    assert expected_exit("grid crds --check crds/   # exit 1 if they are stale") == 0
