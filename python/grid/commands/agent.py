"""``grid agent``: run Grid for one site without Kubernetes."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from pathlib import Path
from typing import Any

from grid.agent import Agent, AgentOptions, NameConflictError, PerNetwork, parse_key_files
from grid.agent.startup import check_startup
from grid.errors import ConfigError, GridError
from grid.logs import add_logging_options, configure_logging
from grid.runtime.collector import settle_collector

EXIT_OK = 0
EXIT_CONFIG = 2
EXIT_NAME_CONFLICT = 3
PREFIX = "grid agent: "
"""What the one line on standard error starts with when the agent exits for an error."""

_log = logging.getLogger("grid.agent")


def register(subparsers: Any) -> None:
    """Add ``grid agent``."""
    parser = subparsers.add_parser(
        "agent",
        help="run Grid for one site from a directory of resources (no Kubernetes)",
        description="Join each GridNetwork in --resources over SWIM, observe this site's "
        "providers, probe every site's egress, and write each gateway's overlay and each "
        "resource's status under --state-dir. Stops gracefully (leaving the mesh) on SIGINT "
        "or SIGTERM. Before starting, it checks what cannot work (the resources, --site, the "
        "addresses and ports, the key files, the TLS files, the state directory) and exits "
        "with one line naming the first problem. Exit status: 0 stopped, 2 unusable "
        "options, resources, key or TLS files, or a port that cannot be bound, 3 another "
        "live node, started earlier, holds this site's name.",
    )
    parser.add_argument(
        "--resources",
        required=True,
        type=Path,
        metavar="DIR",
        help="directory of GridNetwork, GridSite and InferenceProvider YAML (reloaded on change)",
    )
    parser.add_argument(
        "--state-dir",
        required=True,
        type=Path,
        metavar="DIR",
        help="where overlays (overlays/...) and status files (status/...) are written",
    )
    parser.add_argument(
        "--site",
        action="append",
        default=[],
        metavar="[NETWORK=]NAME",
        help="this site's GridSite name (default: the network's only GridSite)",
    )
    parser.add_argument(
        "--bind",
        action="append",
        default=[],
        metavar="[NETWORK=]HOST:PORT",
        help="SWIM UDP address (default 127.0.0.1 and the network's swim.port)",
    )
    parser.add_argument(
        "--advertise",
        action="append",
        default=[],
        metavar="[NETWORK=]HOST:PORT",
        help="SWIM address peers use (default: the bound one; needed with 0.0.0.0)",
    )
    parser.add_argument(
        "--key-file",
        action="append",
        default=[],
        metavar="[NETWORK=]FILE",
        help="SWIM key (required: SWIM is always encrypted): 32 raw bytes, or base64 keys "
        "one per line (first seals); edit the file to rotate",
    )
    parser.add_argument(
        "--tls-dir",
        type=Path,
        metavar="DIR",
        help="tls.crt and tls.key of this site, which sign its SWIM messages (required), "
        "and optionally ca.crt",
    )
    parser.add_argument(
        "--secrets-dir",
        type=Path,
        metavar="DIR",
        help="mounted Secrets as NAMESPACE/NAME/KEY files: checked for presence (never read), "
        "except an Oauth2 or Sigv4 provider's, which its tokens are minted from, and a "
        "Custom provider's with auth.custom, which its value is rendered from",
    )
    parser.add_argument(
        "--http", metavar="HOST:PORT", help="serve /metrics, /healthz and /status here"
    )
    parser.add_argument(
        "--egress-listen",
        metavar="HOST:PORT",
        help="serve a TLS listener presenting tls.crt here (what peers probe)",
    )
    parser.add_argument(
        "--probe-interval",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="how often each site's egress is probed (default 10)",
    )
    parser.add_argument(
        "--reload-interval",
        type=float,
        default=2.0,
        metavar="SECONDS",
        help="how often the resource directory and key files are checked (default 2)",
    )
    add_logging_options(parser)
    parser.set_defaults(handler=agent_command)


def options_from(args: argparse.Namespace) -> AgentOptions:
    """The agent's options from parsed arguments (raises :class:`ConfigError`)."""
    return AgentOptions(
        resources=args.resources,
        state_dir=args.state_dir,
        site=PerNetwork.parse(args.site, "--site"),
        bind=PerNetwork.parse(args.bind, "--bind"),
        advertise=PerNetwork.parse(args.advertise, "--advertise"),
        key_files=parse_key_files(args.key_file),
        tls_dir=args.tls_dir,
        secrets_dir=args.secrets_dir,
        http=args.http,
        egress_listen=args.egress_listen,
        probe_interval_s=args.probe_interval,
        reload_interval_s=args.reload_interval,
    )


def agent_command(args: argparse.Namespace) -> int:
    """Check the options (:func:`~grid.agent.startup.check_startup`), then run the agent
    until SIGINT or SIGTERM."""
    configure_logging(args.log_level, args.log_format)
    json_logs = args.log_format == "json"
    try:
        options = options_from(args)
        report = check_startup(options)
    except ConfigError as error:
        return _exit(EXIT_CONFIG, error, json_logs=json_logs)
    for warning in report.warnings:
        _log.warning("%s", warning)
    try:
        agent = Agent(options)
        settle_collector()
        asyncio.run(agent.run())
    except NameConflictError as error:
        return _exit(EXIT_NAME_CONFLICT, error, json_logs=json_logs)
    except (ConfigError, GridError) as error:
        return _exit(EXIT_CONFIG, error, json_logs=json_logs)
    return EXIT_OK


def _exit(code: int, error: Exception, *, json_logs: bool = False) -> int:
    """The one line that says why the agent stops: plain text, or with ``--log-format
    json`` a log record like every other line (``exit_status`` says the code)."""
    if json_logs:
        _log.error("%s", error, extra={"exit_status": code})
    else:
        print(f"{PREFIX}{error}", file=sys.stderr)
    return code
