"""``grid operator``: run Grid's Kubernetes operator for one cluster."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Any

from grid.errors import ConfigError, GridError
from grid.logs import add_logging_options, configure_logging
from grid.runtime.collector import settle_collector

EXIT_OK = 0
EXIT_CONFIG = 2

_log = logging.getLogger("grid.operator")


def register(subparsers: Any) -> None:
    """Add ``grid operator``."""
    parser = subparsers.add_parser(
        "operator",
        help="run Grid's Kubernetes operator for this cluster",
        description="Watch GridNetworks, GridSites and InferenceProviders cluster-wide, run "
        "one encrypted SWIM node per GridNetwork, and write each gateway's overlay "
        "ConfigMap, every resource's status and Events. Settings come from the "
        "environment the Deployment sets: GRID_SWIM_ADVERTISE_ADDRESS (the pod IP), "
        "GRID_SWIM_PORT, GRID_METRICS_PORT, GRID_HEALTH_PORT, POD_NAMESPACE, POD_NAME and, "
        "optionally, GRID_SITE_NAME. Credentials: in-cluster (service account), else the "
        "current kubeconfig context. Stops gracefully (leaving every mesh) on SIGTERM. "
        "Exit status: 0 stopped, 2 unusable settings.",
    )
    parser.add_argument(
        "--namespace",
        help="the operator's own namespace, where Events about Grid's resources go "
        "(default: POD_NAMESPACE, else grid-system)",
    )
    parser.add_argument(
        "--site",
        help="this cluster's GridSite name (default: GRID_SITE_NAME, else the GridSite "
        "pinning this site's certificate, else the network's only declared GridSite)",
    )
    add_logging_options(parser)
    parser.set_defaults(handler=operator_command)


def operator_command(args: argparse.Namespace) -> int:
    """Run the operator until SIGINT or SIGTERM."""
    # kopf's own records (``kopf.*``, with their object reference) go through the same
    # handler: one format for the whole process.
    configure_logging(args.log_level, args.log_format)
    json_logs = args.log_format == "json"
    try:
        import kopf

        from grid.operator import Operator, OperatorOptions, build_registry, configure, post_event
        from grid.operator.kube import configuration_from_environment
    except ImportError as error:
        return _exit(
            f"{error.name} is not installed; install grid-mesh[operator]", json_logs=json_logs
        )
    try:
        options = OperatorOptions.from_environment(
            os.environ, namespace=args.namespace, site=args.site
        )
        configuration = configuration_from_environment()
    except (ConfigError, GridError) as error:
        return _exit(str(error), json_logs=json_logs)
    operator = Operator(options, configuration, post_event)
    settings = kopf.OperatorSettings()
    configure(settings, options)
    settle_collector()
    try:
        kopf.run(
            registry=build_registry(operator, login=True),
            settings=settings,
            clusterwide=True,
            standalone=True,
        )
    except Exception:
        # kopf reports a refused startup as its own error; the operator knows the cause.
        if operator.failure is None:
            raise
    if operator.failure is not None:
        return _exit(str(operator.failure), json_logs=json_logs)
    return EXIT_OK


def _exit(message: str, *, json_logs: bool) -> int:
    """The one line that says why the operator stops: plain text, or with ``--log-format
    json`` a log record like every other line (``exit_status`` says the code)."""
    if json_logs:
        _log.error("%s", message, extra={"exit_status": EXIT_CONFIG})
    else:
        print(f"grid operator: {message}", file=sys.stderr)
    return EXIT_CONFIG
