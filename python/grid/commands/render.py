"""``grid render`` and ``grid explain``: what-if rendering from a directory of resources,
with no network. ``render`` prints the overlay a site's gateway would receive (or its
complete gateway configuration); ``explain`` prints why the candidates are in that order
and why each missing provider is missing (``--json``: as one document)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from grid.errors import ConfigError, EmptyOverlayError, OverlayRenderError
from grid.models.network import ConsumerConfig
from grid.models.resources import load_resources_from_dir, parse_yaml
from grid.render.consumer import consumer_config_yaml
from grid.render.overlay import render_overlay, rfc3339, select_candidates
from grid.render.whatif import (
    MetricsReport,
    WhatIf,
    build_what_if,
    check_target,
    parse_metrics_report,
)
from grid.scoring.explain import ELLIPSIS, explain, explain_document
from grid.scoring.ranking import Ranking, rank_candidates

EXIT_OK = 0
EXIT_NO_OVERLAY = 1
EXIT_USAGE = 2


def register(subparsers: Any) -> None:
    """Add ``grid render`` and ``grid explain``."""
    render = subparsers.add_parser(
        "render",
        help="print the overlay a site's gateway would receive (what-if, no network)",
        description="Exit status: 0 rendered, 1 no candidate left (the gateway would keep "
        "its previous overlay), 2 unreadable or invalid input, a --site that is not a "
        "GridSite (without --allow-unknown-site) or a --gateway the GridNetwork does not list.",
    )
    _add_inputs(render)
    render.add_argument(
        "--consumer-config",
        action="store_true",
        help="print the complete gateway configuration (YAML) instead of the overlay",
    )
    render.set_defaults(handler=render_command)
    explain_parser = subparsers.add_parser(
        "explain",
        help="explain a site's candidate order and every provider left out (what-if)",
        description="On a terminal the tables are fitted to its width (COLUMNS, else the "
        "terminal's): the least important columns are left out first and long names cut "
        "short. Written to a pipe or a file, every column is shown. Exit status: 0 "
        "explained, 2 unreadable or invalid input, a --site that is not a GridSite (without "
        "--allow-unknown-site) or a --gateway the GridNetwork does not list.",
    )
    _add_inputs(explain_parser)
    output = explain_parser.add_mutually_exclusive_group()
    output.add_argument(
        "--json",
        action="store_true",
        help="print one JSON document (every column, unrounded; its keys: grid docs scoring)",
    )
    output.add_argument(
        "--wide", action="store_true", help="show every column in full, even on a terminal"
    )
    explain_parser.set_defaults(handler=explain_command)


def _add_inputs(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--resources",
        required=True,
        metavar="DIR",
        help="directory of GridNetwork, GridSite and InferenceProvider YAML",
    )
    parser.add_argument("--site", required=True, help="the consuming site (GridSite name)")
    parser.add_argument(
        "--allow-unknown-site",
        action="store_true",
        help="render for a --site that is not a GridSite (yet): it counts as unknown, so "
        "providers with an access policy are left out",
    )
    parser.add_argument(
        "--gateway", required=True, metavar="NAME", help="the gateway's name (a gatewayRef)"
    )
    parser.add_argument(
        "--namespace",
        metavar="NS",
        help="the gateway's namespace (needed when it is listed in several)",
    )
    parser.add_argument(
        "--metrics",
        metavar="FILE",
        help="YAML or JSON with per-provider signal values and health (the format: grid docs "
        "scoring)",
    )
    parser.add_argument(
        "--now",
        metavar="RFC3339",
        help="the moment to render at (default: the current time)",
    )


@dataclass(frozen=True, slots=True)
class _Prepared:
    what_if: WhatIf
    ranking: Ranking
    now: datetime


def _fail(message: str) -> int:
    print(f"grid: {message}", file=sys.stderr)
    return EXIT_USAGE


def _parse_now(text: str | None) -> datetime:
    if text is None:
        return datetime.now(UTC)
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise ConfigError(f"--now {text!r} is not an RFC 3339 timestamp") from None
    if moment.utcoffset() is None:
        raise ConfigError("--now needs a time zone (e.g. 2026-07-29T00:00:00Z)")
    return moment


def _read_metrics(path: str | None) -> MetricsReport:
    if path is None:
        return MetricsReport()
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        reason = error.strerror if isinstance(error, OSError) else "not UTF-8 text"
        raise ConfigError(f"cannot read metrics file {path}: {reason}") from None
    try:
        documents = parse_yaml(text)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(error, "problem", None) or (
            str(error) if type(error) is yaml.YAMLError else None
        )
        detail = f": {problem}" if problem else ""
        raise ConfigError(f"metrics file {path} is not valid YAML or JSON{where}{detail}") from None
    if len(documents) > 1:
        raise ConfigError(f"metrics file {path} holds {len(documents)} YAML documents, not one")
    return parse_metrics_report(documents[0] if documents else None)


def _prepare(args: argparse.Namespace) -> _Prepared | int:
    try:
        now = _parse_now(args.now)
        resources = load_resources_from_dir(args.resources)
        if resources.errors:
            for error in resources.errors:
                print(f"grid: {error}", file=sys.stderr)
            return _fail(f"{len(resources.errors)} invalid resource(s) in {args.resources}")
        check_target(
            resources,
            site=args.site,
            gateway=args.gateway,
            namespace=args.namespace,
            allow_unknown_site=args.allow_unknown_site,
        )
        what_if = build_what_if(
            resources,
            site=args.site,
            gateway=args.gateway,
            namespace=args.namespace,
            metrics=_read_metrics(args.metrics),
        )
        network = what_if.network.spec
        ranking = rank_candidates(
            what_if.candidates,
            what_if.consumer,
            network.scoring,
            now,
            stale_after_seconds=network.stale_candidate_ttl_seconds,
        )
    except ConfigError as error:
        return _fail(str(error))
    for note in what_if.notes:
        print(f"grid: note: {note}", file=sys.stderr)
    return _Prepared(what_if, ranking, now)


def render_command(args: argparse.Namespace) -> int:
    """Print the overlay (or the gateway configuration) for ``--site``'s gateway."""
    prepared = _prepare(args)
    if isinstance(prepared, int):
        return prepared
    what_if = prepared.what_if
    try:
        overlay = render_overlay(prepared.ranking, what_if.scope, what_if.source, prepared.now)
    except EmptyOverlayError as error:
        print(f"grid: {error}", file=sys.stderr)
        print(explain(prepared.ranking, not_offered=what_if.not_offered), file=sys.stderr)
        return EXIT_NO_OVERLAY
    except OverlayRenderError as error:
        return _fail(str(error))
    if overlay.truncated:
        print(
            f"grid: note: {len(overlay.truncated)} candidates cut to fit the overlay limit",
            file=sys.stderr,
        )
    if not args.consumer_config:
        print(json.dumps(overlay.document, indent=2, ensure_ascii=False))
        return EXIT_OK
    gateway = what_if.gateway
    try:
        text = consumer_config_yaml(
            what_if.plan,
            gateway.consumer_config or ConsumerConfig(),
            overlay_key=gateway.config_map_key,
            overlay=overlay,
            route_filter=gateway.route_filter_name,
            credential_filter=gateway.credential_filter_name,
        )
    except OverlayRenderError as error:
        return _fail(str(error))
    print(text, end="")
    return EXIT_OK


def table_width(wide: bool = False) -> int | None:
    """How wide ``grid explain``'s tables may be: the terminal's width (``COLUMNS`` when
    set, as :func:`shutil.get_terminal_size` reads it) when standard output is a terminal,
    else None (no limit: what a script reads does not depend on a window); None with
    ``--wide``."""
    if wide or not sys.stdout.isatty():
        return None
    return shutil.get_terminal_size().columns


def _ellipsis() -> str:
    """``…``, or ``~`` where standard output cannot write it (a Latin-1 terminal)."""
    try:
        ELLIPSIS.encode(sys.stdout.encoding or "ascii")
    except (UnicodeEncodeError, LookupError):
        return "~"
    return ELLIPSIS


def explain_command(args: argparse.Namespace) -> int:
    """Print the candidate table and the left-out table for ``--site`` (or, with
    ``--json``, the same as one JSON document)."""
    prepared = _prepare(args)
    if isinstance(prepared, int):
        return prepared
    published, cut = select_candidates(prepared.ranking.candidates)
    what_if = prepared.what_if
    if args.json:
        document = explain_document(
            prepared.ranking,
            published=published,
            extra_left_out=cut,
            not_offered=what_if.not_offered,
            scope=dataclasses.asdict(what_if.scope),
            now=rfc3339(prepared.now),
        )
        print(json.dumps(document, indent=2, ensure_ascii=False))
        return EXIT_OK
    print(
        explain(
            prepared.ranking,
            published=published,
            extra_left_out=cut,
            not_offered=what_if.not_offered,
            width=table_width(args.wide),
            ellipsis=_ellipsis(),
        ),
        end="",
    )
    return EXIT_OK
