"""Turning manifests into resource models: one document (from the Kubernetes API or a
file) or a whole directory of YAML files, with every problem reported by file, document,
field path and reason, and the valid resources kept."""

from __future__ import annotations

import difflib
import json
import re
import types
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Annotated, Any, Union, get_args, get_origin

import yaml
from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from grid.errors import ConfigError, InvalidResourceError, ResourceError
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


def load_resource(document: object) -> Resource:
    """The Grid resource described by ``document`` (a decoded manifest).

    Validation is strict, as the API server's is: a number is not accepted for a string
    nor a string for a number or boolean, and unknown fields are rejected. Raises
    :class:`InvalidResourceError` listing every problem found.
    """
    if not isinstance(document, Mapping):
        raise InvalidResourceError(
            [ResourceError("expected a mapping with apiVersion, kind, metadata and spec")]
        )
    kind = document.get("kind")
    name = _name_of(document)
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


def load_resources_from_dir(directory: str | Path) -> LoadedResources:
    """Every Grid resource in the ``*.yaml``/``*.yml`` files directly inside ``directory``
    (multi-document files included, files in name order). Documents of other API groups
    are skipped; invalid documents are reported and do not stop the others from loading.

    Raises :class:`ConfigError` only when ``directory`` itself cannot be read.
    """
    root = Path(directory)
    try:
        files = sorted(
            child for child in root.iterdir() if child.suffix in YAML_SUFFIXES and child.is_file()
        )
    except OSError as error:
        raise ConfigError(f"cannot read resource directory {root}: {error.strerror}") from None
    collector = _Collector()
    for path in files:
        _load_file(path, collector)
    return LoadedResources(
        tuple(collector.resources), tuple(collector.errors), tuple(collector.skipped)
    )


def _load_file(path: Path, collector: _Collector) -> None:
    file = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        reason = error.strerror if isinstance(error, OSError) else "file is not UTF-8 text"
        collector.errors.append(ResourceError(f"cannot read: {reason}", file=file))
        return
    for index, (first_line, chunk) in enumerate(_split_documents(text)):
        try:
            # _StrictLoader is a SafeLoader: no arbitrary Python objects are constructed.
            document = yaml.load(chunk, Loader=_StrictLoader)  # noqa: S506
        except yaml.YAMLError as error:
            collector.errors.append(
                ResourceError(_yaml_reason(error, first_line), file=file, document=index)
            )
            continue
        if document is not None:
            collector.add(document, file, index)


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


class _StrictLoader(yaml.SafeLoader):
    """Safe YAML that rejects duplicate keys (the last would silently win) and keeps
    timestamps as strings, as the Kubernetes API does."""

    yaml_implicit_resolvers = {
        first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[object] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            try:
                hash(key)
            except TypeError:
                continue  # the base class reports unhashable keys
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r}", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _yaml_reason(error: yaml.YAMLError, first_line: int) -> str:
    # Only the problem and its position: the snippet PyYAML can add may quote a secret.
    problem = getattr(error, "problem", None) or "invalid YAML"
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
