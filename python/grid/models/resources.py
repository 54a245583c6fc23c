"""Turning manifests into resource models: one document (from the Kubernetes API or a
file) or a whole directory of YAML files, with every problem reported by file, document,
field path and reason, and the valid resources kept."""

from __future__ import annotations

import difflib
import json
import os
import re
import stat
import types
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Annotated, Any, Union, get_args, get_origin

import yaml
from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails
from yaml.composer import Composer
from yaml.constructor import ConstructorError, SafeConstructor
from yaml.error import MarkedYAMLError
from yaml.events import AliasEvent, Event
from yaml.nodes import Node, ScalarNode
from yaml.resolver import Resolver

from grid.errors import ConfigError, InvalidResourceError, ResourceError
from grid.models.limits import (
    ALIASES_REFUSED,
    ANCHORS_REFUSED,
    MAX_DEPTH,
    MAX_DIRECTORY_BYTES,
    MAX_DIRECTORY_FILES,
    MAX_DOCUMENTS,
    MAX_FILE_BYTES,
    MAX_NODES_PER_DIRECTORY,
    MAX_NODES_PER_DOCUMENT,
    depth_problem,
    format_size,
    nodes_problem,
    size_problem,
    structure_problem,
)
from grid.models.meta import API_VERSION, GROUP
from grid.models.network import GridNetwork
from grid.models.provider import InferenceProvider
from grid.models.site import GridSite

Resource = GridNetwork | GridSite | InferenceProvider
RESOURCE_KINDS: dict[str, type[Resource]] = {
    "GridNetwork": GridNetwork,
    "GridSite": GridSite,
    "InferenceProvider": InferenceProvider,
}
YAML_SUFFIXES = (".yaml", ".yml")

Interrupt = Callable[[], str | None]
"""Asked between documents and every few hundred YAML nodes while a directory is read:
a reason (``the agent is stopping``) stops the read, None lets it go on."""


def load_resource(document: object) -> Resource:
    """The Grid resource described by ``document`` (a decoded manifest).

    Validation is strict, as the API server's is: a number is not accepted for a string
    nor a string for a number or boolean, and unknown fields are rejected. A document
    beyond the limits of :mod:`grid.models.limits` (values, nesting, size) is refused
    before it is validated. Raises :class:`InvalidResourceError` listing every problem
    found.
    """
    if not isinstance(document, Mapping):
        raise InvalidResourceError(
            [ResourceError("expected a mapping with apiVersion, kind, metadata and spec")]
        )
    kind = document.get("kind")
    name = _name_of(document)
    too_large = structure_problem(document)
    if too_large is not None:
        raise InvalidResourceError([ResourceError(too_large, kind=_str_or_none(kind), name=name)])
    if not isinstance(kind, str) or kind not in RESOURCE_KINDS:
        reason = (
            "required field is missing"
            if kind is None
            else f"must be one of {', '.join(RESOURCE_KINDS)}"
        )
        raise InvalidResourceError([ResourceError(reason, path="kind", name=name)])
    model = RESOURCE_KINDS[kind]
    api_version = document.get("apiVersion")
    if api_version != API_VERSION:
        reason = (
            "required field is missing"
            if api_version is None
            else f"must be {API_VERSION} for kind {kind}"
        )
        raise InvalidResourceError([ResourceError(reason, path="apiVersion", kind=kind, name=name)])
    try:
        text = json.dumps(document, default=_json_default)
    except (TypeError, ValueError) as error:
        raise InvalidResourceError([ResourceError(str(error), kind=kind, name=name)]) from None
    try:
        return model.model_validate_json(text, strict=True)
    except ValidationError as error:
        raise InvalidResourceError(
            [_describe(model, detail, kind, name) for detail in error.errors()]
        ) from None


def dump_resource(resource: Resource) -> dict[str, Any]:
    """The manifest of ``resource`` (camelCase, unset fields left out), ready for the
    Kubernetes API or a YAML file."""
    return resource.model_dump(mode="json", by_alias=True, exclude_none=True)


@dataclass(frozen=True)
class SkippedDocument:
    """A document that is not a Grid resource (a Secret, a Namespace, ...)."""

    file: str
    document: int
    api_version: str | None
    kind: str | None


@dataclass(frozen=True)
class LoadedResources:
    """What a directory held: the valid resources in file order, and what was wrong."""

    resources: tuple[Resource, ...] = ()
    errors: tuple[ResourceError, ...] = ()
    skipped: tuple[SkippedDocument, ...] = ()

    @property
    def networks(self) -> list[GridNetwork]:
        return [r for r in self.resources if isinstance(r, GridNetwork)]

    @property
    def sites(self) -> list[GridSite]:
        return [r for r in self.resources if isinstance(r, GridSite)]

    @property
    def providers(self) -> list[InferenceProvider]:
        return [r for r in self.resources if isinstance(r, InferenceProvider)]


@dataclass
class _Collector:
    resources: list[Resource] = field(default_factory=list)
    errors: list[ResourceError] = field(default_factory=list)
    skipped: list[SkippedDocument] = field(default_factory=list)
    first_seen: dict[tuple[str, str], str] = field(default_factory=dict)

    def add(self, document: object, file: str, index: int) -> None:
        if isinstance(document, Mapping) and _is_foreign(document):
            self.skipped.append(
                SkippedDocument(
                    file,
                    index,
                    _str_or_none(document.get("apiVersion")),
                    _str_or_none(document.get("kind")),
                )
            )
            return
        try:
            resource = load_resource(document)
        except InvalidResourceError as invalid:
            self.errors.extend(_locate(error, file, index) for error in invalid.errors)
            return
        identity = (resource.kind, resource.metadata.name)
        where = f"{file} document {index}"
        if identity in self.first_seen:
            self.errors.append(
                ResourceError(
                    f"duplicate: already defined in {self.first_seen[identity]}",
                    path="metadata.name",
                    file=file,
                    document=index,
                    kind=resource.kind,
                    name=resource.metadata.name,
                )
            )
            return
        self.first_seen[identity] = where
        self.resources.append(resource)


def load_resources_from_dir(
    directory: str | Path, *, interrupt: Interrupt | None = None
) -> LoadedResources:
    """Every Grid resource in the ``*.yaml``/``*.yml`` files directly inside ``directory``
    (multi-document files included, files in name order). Documents of other API groups
    are skipped; invalid documents are reported and do not stop the others from loading.

    Hostile input is refused before it costs time or memory (see
    :mod:`grid.models.limits`): YAML aliases and anchors, a file over ``MAX_FILE_BYTES``,
    a document with more than ``MAX_NODES_PER_DOCUMENT`` values or nested deeper than
    ``MAX_DEPTH``, and files that are not UTF-8 text or not regular files are reported as
    errors of that file. A directory over ``MAX_DIRECTORY_FILES`` or
    ``MAX_DIRECTORY_BYTES`` loads nothing; one over ``MAX_DOCUMENTS`` or
    ``MAX_NODES_PER_DIRECTORY``, or one whose read ``interrupt`` stops, is read no further.
    Either way the reason is the one error of the directory or of the file where reading
    stopped.

    Raises :class:`ConfigError` only when ``directory`` itself cannot be read.
    """
    root = Path(directory)
    try:
        files = _list_files(root)
    except OSError as error:
        raise ConfigError(f"cannot read resource directory {root}: {error.strerror}") from None
    collector = _Collector()
    refused = _directory_problem(files)
    if refused is not None:
        collector.errors.append(ResourceError(refused, file=str(root)))
        files = []
    budget = _Budget(interrupt)
    for number, (path, size) in enumerate(files):
        try:
            _load_file(path, size, collector, budget)
        except _Stopped as stopped:
            rest = len(files) - number - 1
            unread = f"; {rest} more file(s) not read" if rest else ""
            collector.errors.append(
                ResourceError(
                    f"{stopped.reason}{unread}", file=str(path), document=stopped.document
                )
            )
            break
    return LoadedResources(
        tuple(collector.resources), tuple(collector.errors), tuple(collector.skipped)
    )


def _list_files(root: Path) -> list[tuple[Path, int]]:
    """The YAML files in ``root`` (regular files, symbolic links followed) with their
    sizes, in name order; at most one more than ``MAX_DIRECTORY_FILES``."""
    found: list[tuple[Path, int]] = []
    with os.scandir(root) as entries:
        for entry in entries:
            if Path(entry.name).suffix not in YAML_SUFFIXES:
                continue
            try:
                if not entry.is_file():
                    continue
                size = entry.stat().st_size
            except OSError:
                size = 0  # gone or unreadable: reported when it is read
            found.append((root / entry.name, size))
            if len(found) > MAX_DIRECTORY_FILES:
                break
    return sorted(found)


def _directory_problem(files: list[tuple[Path, int]]) -> str | None:
    if len(files) > MAX_DIRECTORY_FILES:
        return (
            f"more than {MAX_DIRECTORY_FILES:,} YAML files, the limit for a resource "
            "directory: nothing was loaded"
        )
    total = sum(size for _, size in files)
    if total > MAX_DIRECTORY_BYTES:
        return (
            f"the YAML files add up to {format_size(total)}, more than the "
            f"{format_size(MAX_DIRECTORY_BYTES)} limit for a resource directory: nothing "
            "was loaded"
        )
    return None


class _Stopped(Exception):
    """The directory is read no further: a limit of the whole directory was reached, or
    the caller's interrupt said stop."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.document: int | None = None


_CHECK_EVERY = 256


@dataclass
class _Budget:
    """What the rest of a directory read may still use."""

    interrupt: Interrupt | None
    bytes: int = MAX_DIRECTORY_BYTES
    documents: int = MAX_DOCUMENTS
    nodes: int = MAX_NODES_PER_DIRECTORY

    def check(self) -> None:
        if self.interrupt is not None:
            reason = self.interrupt()
            if reason is not None:
                raise _Stopped(reason)

    def spend_bytes(self, count: int) -> None:
        self.bytes -= count
        if self.bytes < 0:
            raise _Stopped(
                f"the YAML files add up to more than {format_size(MAX_DIRECTORY_BYTES)}, the "
                "limit for a resource directory (a file grew while it was read)"
            )

    def spend_document(self) -> None:
        self.documents -= 1
        if self.documents < 0:
            raise _Stopped(
                f"more than {MAX_DOCUMENTS:,} YAML documents, the limit for a resource directory"
            )
        self.check()

    def spend_node(self) -> None:
        self.nodes -= 1
        if self.nodes < 0:
            raise _Stopped(
                f"more than {MAX_NODES_PER_DIRECTORY:,} values in all, the limit for a "
                "resource directory"
            )
        if self.nodes % _CHECK_EVERY == 0:
            self.check()


def _load_file(path: Path, size: int, collector: _Collector, budget: _Budget) -> None:
    file = str(path)
    too_large = size_problem(size, MAX_FILE_BYTES)
    if too_large is not None:
        collector.errors.append(ResourceError(f"the file {too_large} per file", file=file))
        return
    try:
        data = _read_file(path)
    except _Unreadable as error:
        collector.errors.append(ResourceError(f"cannot read: {error}", file=file))
        return
    except OSError as error:
        reason = (
            "the file disappeared while the directory was read"
            if isinstance(error, FileNotFoundError)
            else error.strerror or type(error).__name__
        )
        collector.errors.append(ResourceError(f"cannot read: {reason}", file=file))
        return
    budget.spend_bytes(len(data))
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        reason = f"file is not UTF-8 text (invalid byte at offset {error.start})"
        collector.errors.append(ResourceError(f"cannot read: {reason}", file=file))
        return
    for index, (first_line, chunk) in enumerate(_split_documents(text)):
        try:
            budget.spend_document()
            document = _parse(chunk, budget)
        except _Stopped as stopped:
            stopped.document = index
            raise
        except yaml.YAMLError as error:
            collector.errors.append(
                ResourceError(_yaml_reason(error, first_line, chunk), file=file, document=index)
            )
            continue
        if document is not None:
            collector.add(document, file, index)


class _Unreadable(Exception):
    """A resource file that is not one: a FIFO, a device, a file over the size limit."""


def _open_file(path: Path) -> int:
    """A descriptor of ``path``, opened without blocking (a FIFO put in a file's place
    must not hang the read). Tests replace it to change the file under the reader."""
    return os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)


def _read_file(path: Path) -> bytes:
    """The bytes of ``path``, read through one descriptor (a file renamed over it or
    removed meanwhile does not mix two versions), at most ``MAX_FILE_BYTES`` of them."""
    descriptor = _open_file(path)
    try:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            raise _Unreadable("not a regular file")
        chunks: list[bytes] = []
        total = 0
        while total <= MAX_FILE_BYTES:
            chunk = os.read(descriptor, min(256 * 1024, MAX_FILE_BYTES + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        if total > MAX_FILE_BYTES:
            raise _Unreadable(
                f"the file is larger than {format_size(MAX_FILE_BYTES)}, the limit per file"
            )
        return b"".join(chunks)
    finally:
        os.close(descriptor)


def _parse(chunk: str, budget: _Budget) -> object:
    """One YAML document, composed within the limits and constructed."""
    loader = _ResourceLoader(chunk, budget)
    try:
        return loader.get_single_data()
    except (ValueError, TypeError, OverflowError):
        # A conversion the constructor could not make (an integer of 5000 digits, ...).
        raise yaml.YAMLError("a value cannot be converted") from None
    finally:
        loader.dispose()


def parse_yaml(text: str) -> list[object]:
    """The documents of a YAML stream Grid reads besides its resources (a metrics file,
    Secrets given to ``grid secrets``), under the same rules: no aliases or anchors, the
    same size, nesting and value limits. Raises :class:`yaml.YAMLError` for a refusal as
    for bad syntax; its message never quotes the input."""
    if len(text.encode("utf-8", errors="replace")) > MAX_FILE_BYTES:
        raise yaml.YAMLError(f"larger than {format_size(MAX_FILE_BYTES)}, the limit per file")
    budget = _Budget(None)
    documents: list[object] = []
    try:
        for _, chunk in _split_documents(text):
            budget.spend_document()
            documents.append(_parse(chunk, budget))
    except _Stopped as stopped:
        raise yaml.YAMLError(str(stopped)) from None
    return documents


_DOCUMENT_START = re.compile(r"^---(?:[ \t].*)?$")


def _split_documents(text: str) -> list[tuple[int, str]]:
    """The documents of a YAML stream with the 0-based line each starts on. Splitting here
    rather than in the parser lets one broken document not hide the ones after it."""
    documents: list[tuple[int, str]] = []
    start, lines, after_marker = 0, [], False
    for number, line in enumerate(text.splitlines(keepends=True)):
        if _DOCUMENT_START.match(line.rstrip("\r\n")) is None:
            lines.append(line)
            continue
        # Comments before the first marker are not a document of their own.
        if after_marker or not _only_comments(lines):
            documents.append((start, "".join(lines)))
        # Content after the marker on the same line belongs to the new document.
        start, lines, after_marker = number, [line[3:]], True
    if not _only_comments(lines) or not documents:
        documents.append((start, "".join(lines)))
    return documents


def _only_comments(lines: list[str]) -> bool:
    return all(not line.strip() or line.lstrip().startswith("#") for line in lines)


class _Refused(MarkedYAMLError):
    """A document breaks a limit of :mod:`grid.models.limits`."""

    def __init__(self, problem: str, mark: Any) -> None:
        super().__init__(problem=problem, problem_mark=mark)


class _GuardedComposer(Composer):
    """Composes nodes only within the limits: no alias or anchor, at most
    ``MAX_NODES_PER_DOCUMENT`` nodes nested at most ``MAX_DEPTH`` deep. Each is checked
    as its event arrives, before anything is expanded, built or validated, so a billion
    laughs is refused at its first anchor, and a 600,000-label file at its 20,001st
    value."""

    _budget: _Budget
    _nodes: int
    _depth: int
    peek_event: Callable[[], Event]  # the parser's

    def compose_node(self, parent: Node | None, index: int) -> Node | None:
        event = self.peek_event()
        if isinstance(event, AliasEvent):
            raise _Refused(ALIASES_REFUSED, event.start_mark)
        if getattr(event, "anchor", None) is not None:
            raise _Refused(ANCHORS_REFUSED, event.start_mark)
        self._nodes += 1
        if self._nodes > MAX_NODES_PER_DOCUMENT:
            raise _Refused(nodes_problem(), event.start_mark)
        if self._depth >= MAX_DEPTH:
            raise _Refused(depth_problem(), event.start_mark)
        self._budget.spend_node()
        self._depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


class _StrictConstructor(SafeConstructor):
    """Safe YAML (no arbitrary Python objects) that rejects duplicate keys (the last would
    silently win) and integers too long to convert."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[object] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            try:
                hash(key)
            except TypeError:
                continue  # the base class reports unhashable keys
            if key in seen:
                raise ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)

    def construct_yaml_int(self, node: ScalarNode) -> int:
        try:
            return super().construct_yaml_int(node)
        except ValueError:
            raise ConstructorError(
                None, None, "integer too long to convert", node.start_mark
            ) from None


_StrictConstructor.add_constructor(
    "tag:yaml.org,2002:int",
    _StrictConstructor.construct_yaml_int,  # type: ignore[type-var]
)


class _StrictResolver(Resolver):
    """Keeps timestamps as strings, as the Kubernetes API does."""

    yaml_implicit_resolvers = {
        first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
        for first, resolvers in Resolver.yaml_implicit_resolvers.items()
    }


if yaml.__with_libyaml__:
    from yaml._yaml import CParser as _Parser

    class _ResourceLoader(_GuardedComposer, _Parser, _StrictConstructor, _StrictResolver):
        """libyaml scans and parses (fast, in C); the composer above builds the nodes.
        (``CSafeLoader`` composes in C too, where no check can be added.)"""

        def __init__(self, stream: str, budget: _Budget) -> None:
            _Parser.__init__(self, stream)
            Composer.__init__(self)
            _StrictConstructor.__init__(self)
            _StrictResolver.__init__(self)
            self._budget, self._nodes, self._depth = budget, 0, 0

else:  # pragma: no cover - PyYAML without libyaml

    class _ResourceLoader(  # type: ignore[no-redef]
        yaml.reader.Reader,
        yaml.scanner.Scanner,
        yaml.parser.Parser,
        _GuardedComposer,
        _StrictConstructor,
        _StrictResolver,
    ):
        """``yaml.SafeLoader``'s parts, with the composer above."""

        def __init__(self, stream: str, budget: _Budget) -> None:
            yaml.reader.Reader.__init__(self, stream)
            yaml.scanner.Scanner.__init__(self)
            yaml.parser.Parser.__init__(self)
            Composer.__init__(self)
            _StrictConstructor.__init__(self)
            _StrictResolver.__init__(self)
            self._budget, self._nodes, self._depth = budget, 0, 0

        def dispose(self) -> None:
            yaml.parser.Parser.dispose(self)


def _yaml_reason(error: yaml.YAMLError, first_line: int, chunk: str) -> str:
    # Only the problem and its position: the snippet PyYAML can add may quote a secret.
    if isinstance(error, yaml.reader.ReaderError):
        position = min(max(error.position, 0), len(chunk))
        line = first_line + chunk.count("\n", 0, position) + 1
        column = position - (chunk.rfind("\n", 0, position) + 1) + 1
        return f"YAML error at line {line}, column {column}: {error.reason}"
    problem = getattr(error, "problem", None) or (
        str(error) if type(error) is yaml.YAMLError else "invalid YAML"
    )
    mark = getattr(error, "problem_mark", None)
    if mark is None:
        return f"YAML error: {problem}"
    line = first_line + mark.line + 1
    return f"YAML error at line {line}, column {mark.column + 1}: {problem}"


def _is_foreign(document: Mapping[Any, Any]) -> bool:
    api_version = document.get("apiVersion")
    return isinstance(api_version, str) and api_version.split("/")[0] != GROUP


def _locate(error: ResourceError, file: str, index: int) -> ResourceError:
    return ResourceError(
        error.reason, path=error.path, file=file, document=index, kind=error.kind, name=error.name
    )


def _name_of(document: Mapping[Any, Any]) -> str | None:
    metadata = document.get("metadata")
    name = metadata.get("name") if isinstance(metadata, Mapping) else None
    return name if isinstance(name, str) else None


def _str_or_none(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _json_default(value: object) -> str | dict[Any, Any] | list[Any]:
    # Kubernetes clients hand out their own Mapping/Sequence types (kopf's Body, ...).
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, Sequence) and not isinstance(value, str | bytes):
        return list(value)
    if isinstance(value, date):
        return value.isoformat()
    raise TypeError(f"contains a {type(value).__name__} value, which is not JSON")


def _describe(
    model: type[BaseModel], detail: ErrorDetails, kind: str, name: str | None
) -> ResourceError:
    """A :class:`ResourceError` for one pydantic error, without the rejected value."""
    loc = detail["loc"]
    path = _format_path(loc)
    if detail["type"] == "extra_forbidden":
        reason = _unknown_field_reason(model, loc)
    elif detail["type"] == "missing":
        reason = "required field is missing"
    else:
        reason = detail["msg"].removeprefix("Value error, ")
    return ResourceError(reason, path=path, kind=kind, name=name)


def _format_path(loc: Sequence[int | str]) -> str:
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            path += f".{part}" if path else part
    return path


def _unknown_field_reason(model: type[BaseModel], loc: Sequence[int | str]) -> str:
    parent = _model_at(model, loc[:-1])
    if parent is None:
        return "unknown field"
    allowed = [info.alias or name for name, info in parent.model_fields.items()]
    close = difflib.get_close_matches(str(loc[-1]), allowed, n=1)
    if close:
        return f"unknown field (did you mean {close[0]}?)"
    return f"unknown field; expected one of: {', '.join(allowed)}"


def _model_at(model: type[BaseModel], loc: Sequence[int | str]) -> type[BaseModel] | None:
    current: Any = model
    for part in loc:
        current = _unwrap(current)
        if isinstance(current, type) and issubclass(current, BaseModel):
            match = next(
                (
                    info.annotation
                    for name, info in current.model_fields.items()
                    if part in (name, info.alias)
                ),
                None,
            )
            if match is None:
                return None
            current = match
        elif get_origin(current) in (list, dict):
            current = get_args(current)[-1]
        else:
            return None
    current = _unwrap(current)
    return current if isinstance(current, type) and issubclass(current, BaseModel) else None


def _unwrap(annotation: Any) -> Any:
    """The type inside ``Annotated[...]`` and ``X | None``."""
    while True:
        origin = get_origin(annotation)
        if origin is Annotated:
            annotation = get_args(annotation)[0]
        elif origin in (Union, types.UnionType):
            members = [arg for arg in get_args(annotation) if arg is not type(None)]
            if len(members) != 1:
                return annotation
            annotation = members[0]
        else:
            return annotation
