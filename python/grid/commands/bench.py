"""``grid bench convergence``: SWIM convergence figures from the deterministic simulator.

Join dissemination, failure detection, accuracy under loss, partition and heal, and the
simulator's own speed, each under Grid's SWIM defaults and under memberlist's LAN
parameters, next to the epidemic bound. docs/convergence.md explains every figure.

``grid bench mesh``: one real site under the load of a large mesh, beside today's design
(docs/scale.md).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from grid.errors import ConfigError
from grid.meshbench.report import render as render_mesh
from grid.meshbench.run import BASELINE_COMMIT, BenchFailed, MeshPlan, run_mesh
from grid.models.fields import parse_duration
from grid.simbench.plot import PLOT_EXTRA, PlotError, check_plot_path, png_available, write_plot
from grid.simbench.profiles import PROFILES, NetworkModel
from grid.simbench.progress import Progress
from grid.simbench.report import render
from grid.simbench.runner import SCENARIOS, Plan, SpeedProbeError, run_plan
from grid.simbench.state import DEFAULT_PROVIDERS, STATE_STARTS, StatePlan
from grid.suggest import unknown_name

EXIT_OK = 0
EXIT_TARGET_MISSED = 1
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``grid bench`` and its ``convergence`` subcommand."""
    bench = subparsers.add_parser(
        "bench",
        help="benchmarks (SWIM convergence on the simulator, one site under a large mesh)",
        description="Benchmarks: SWIM convergence on Grid's simulator, and one real site "
        "under the load of a large mesh on 127.0.0.1.",
    )
    bench.set_defaults(handler=lambda _args: _usage(bench))
    commands = bench.add_subparsers(dest="bench_command", metavar="BENCHMARK")
    convergence = commands.add_parser(
        "convergence",
        help="how fast membership news spreads, failures are noticed and partitions heal",
        description="Runs SWIM scenarios on the deterministic simulator (the real driver, "
        "many times over, on a virtual clock) under Grid's defaults and memberlist's LAN "
        "parameters, and reports p50/p99/max over seeded runs with the epidemic bound and "
        "the scale targets. Exit status: 0 done, 1 a target was missed (with --strict) "
        "or the speed probe failed, 2 invalid options, 130 interrupted.",
    )
    convergence.add_argument(
        "--scenario",
        default="all",
        metavar="NAME[,NAME]",
        help=f"{', '.join(SCENARIOS)} or all (default: all)",
    )
    convergence.add_argument(
        "--sizes",
        metavar="N[,N]",
        help="cluster sizes (default: 100,1000,10000, with --quick 100,1000; accuracy and "
        "partition use those up to 1,000, with --quick up to 100, speed those from 1,000)",
    )
    convergence.add_argument(
        "--runs",
        type=int,
        metavar="K",
        help="seeded runs per size and profile (default: 20 joins, 10 crashes, 3 partitions "
        "and 1 accuracy run; fewer for shared large clusters and with --quick)",
    )
    convergence.add_argument("--seed", type=int, default=1, help="first seed (default: 1)")
    convergence.add_argument(
        "--profiles",
        default=",".join(PROFILES),
        metavar="NAME[,NAME]",
        help=f"SWIM profiles to run, {' and '.join(PROFILES)} (default: both; the ratios "
        "need both)",
    )
    convergence.add_argument(
        "--losses",
        default="0.1,0.2",
        metavar="P[,P]",
        help="loss probabilities of the accuracy runs (default: 0.1,0.2)",
    )
    convergence.add_argument(
        "--no-slow-node",
        dest="slow_node",
        action="store_false",
        help="skip the accuracy run with one slow node",
    )
    convergence.add_argument(
        "--accuracy-minutes",
        type=float,
        metavar="M",
        help="virtual minutes per accuracy run (default: 30; 5 with --quick)",
    )
    convergence.add_argument(
        "--quick",
        action="store_true",
        help="a fast look, about 75 s on 2 busy cores: sizes 100 and 1,000 (accuracy and "
        "partition at 100 only), fewer runs, 5-minute accuracy runs instead of 30 (so the "
        "accuracy targets are unproven: run too short)",
    )
    convergence.add_argument("--json", action="store_true", help="print the report as JSON")
    convergence.add_argument(
        "--plot",
        metavar="FILE",
        type=Path,
        help="also write the plot, a panel per scenario: FILE.svg, or FILE.png with the plot "
        "extra (pip install 'grid-mesh[plot]')",
    )
    convergence.add_argument(
        "--progress",
        action="store_true",
        help="draw the progress bar on stderr even when it is not a terminal",
    )
    convergence.add_argument(
        "--threads", type=int, metavar="T", help="simulator threads (default: every core)"
    )
    convergence.add_argument(
        "--delay",
        type=float,
        default=5.0,
        metavar="MS",
        help="fixed one-way delay in milliseconds (default: 5)",
    )
    convergence.add_argument(
        "--jitter",
        type=float,
        default=5.0,
        metavar="MS",
        help="mean of the exponential extra delay in milliseconds (default: 5)",
    )
    convergence.add_argument(
        "--shared-from",
        type=int,
        default=5000,
        metavar="N",
        help="clusters this large are formed once and shared by their runs (default: 5000)",
    )
    convergence.add_argument(
        "--providers",
        type=int,
        default=DEFAULT_PROVIDERS,
        metavar="P",
        help=f"state scenario: providers per site (default: {DEFAULT_PROVIDERS})",
    )
    convergence.add_argument(
        "--state-window",
        type=float,
        default=60.0,
        metavar="S",
        help="state scenario: virtual seconds of steady state whose traffic is counted "
        "(default: 60)",
    )
    convergence.add_argument(
        "--state-changes",
        type=int,
        default=20,
        metavar="K",
        help="state scenario: catalogue changes timed (default: 20)",
    )
    convergence.add_argument(
        "--state-joins",
        type=int,
        default=1,
        metavar="J",
        help="state scenario: times an empty site joins, catches up and leaves (default: 1)",
    )
    convergence.add_argument(
        "--state-start",
        default="growing",
        help="state scenario: sites start one after another and the run times the fill "
        "(growing, the default), or every store holds every site's items from the start "
        "(converged: no fill phase, for sizes too large to grow in a run's time)",
    )
    convergence.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    convergence.set_defaults(handler=convergence_command)
    _register_mesh(commands)


def _register_mesh(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    mesh = commands.add_parser(
        "mesh",
        help="one real site under the load of a large mesh, beside today's design",
        description="Runs one real site (a standalone agent: SWIM node, engine, renders, "
        "overlay files) in a process of its own, with real SWIM peers on 127.0.0.1 publishing "
        "as the other sites would, and reports its CPU, memory, gossip bytes, item and "
        "render rates and the metric change -> overlay latency; then the same for today's "
        f"design (commit {BASELINE_COMMIT}) under the same load, and the scale targets. "
        "`grid docs scale` explains the set-up and the figures. Exit status: 0 done, 1 a run "
        "failed or (with --strict) a target was missed, 2 invalid options, 130 interrupted.",
    )
    mesh.add_argument("--sites", type=int, default=10, help="sites in the mesh (default: 10)")
    mesh.add_argument(
        "--providers-per-site",
        type=int,
        default=10,
        metavar="N",
        help="providers at each site (default: 10)",
    )
    mesh.add_argument(
        "--scrape-interval",
        default="15s",
        metavar="DURATION",
        help="how often every provider's metrics move and are scraped, e.g. 15s (default: 15s)",
    )
    mesh.add_argument(
        "--duration",
        default="60s",
        metavar="DURATION",
        help="how long each design is measured once the site knows the mesh (default: 60s)",
    )
    mesh.add_argument(
        "--warmup",
        default="5s",
        metavar="DURATION",
        help="time between convergence and the measurement (default: 5s)",
    )
    mesh.add_argument(
        "--peers",
        type=int,
        metavar="K",
        help="SWIM peers standing for the other sites (default: one per site up to 10 sites, "
        "else 4, or more so that none carries over 2500 providers)",
    )
    mesh.add_argument("--seed", type=int, default=1, help="seed of the load (default: 1)")
    mesh.add_argument(
        "--joins",
        type=int,
        default=0,
        metavar="N",
        help="after the measurement, restart the site N times (it leaves and joins again at "
        "its address) and report how long it takes to trust every site and rank every "
        "candidate, p50 and p99 (default: 0)",
    )
    mesh.add_argument(
        "--others-join",
        type=int,
        default=0,
        metavar="N",
        help="during the measurement, another site with an empty store joins the mesh, catches "
        "up and leaves, N times spread over --duration (at least 4 s each); report the site's "
        "change -> overlay latency and CPU while it catches up against the rest of the time, "
        "its catch-up time and the bytes the site sent per join (default: 0)",
    )
    mesh.add_argument(
        "--no-baseline",
        dest="baseline",
        action="store_false",
        help="measure the current design only",
    )
    mesh.add_argument("--json", action="store_true", help="print the report as JSON")
    mesh.add_argument(
        "--plot",
        metavar="FILE.png",
        type=Path,
        help="also write the figures as PNG (needs the plot extra: pip install 'grid-mesh[plot]')",
    )
    mesh.add_argument(
        "--progress",
        action="store_true",
        help="draw the progress bar on stderr even when it is not a terminal",
    )
    mesh.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    mesh.set_defaults(handler=mesh_command)


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return EXIT_USAGE


def _ints(text: str, what: str) -> tuple[int, ...]:
    try:
        values = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise ConfigError(f"{what} must be comma-separated whole numbers, got {text!r}") from None
    if not values:
        raise ConfigError(f"{what} must name at least one value")
    return values


def plan_from_args(args: argparse.Namespace) -> Plan:
    """The plan the options describe; ConfigError says what is wrong with them."""
    names = tuple(part.strip() for part in args.scenario.split(",") if part.strip())
    scenarios = SCENARIOS if names in ((), ("all",)) else names
    profiles = tuple(part.strip() for part in args.profiles.split(",") if part.strip())
    _check_names(scenarios, SCENARIOS, "scenario")
    _check_names(profiles, PROFILES, "profile")
    if (
        args.providers < 1
        or args.state_changes < 1
        or args.state_joins < 1
        or not args.state_window > 0
    ):
        raise ConfigError(
            "--providers, --state-changes and --state-joins must be at least 1, "
            "--state-window positive"
        )
    if args.state_start not in STATE_STARTS:
        raise ConfigError(
            f"--state-start must be one of {', '.join(STATE_STARTS)}, got {args.state_start!r}"
        )
    if args.threads is not None and args.threads < 1:
        raise ConfigError(f"--threads must be at least 1, got {args.threads}")
    if not (args.delay > 0 and args.jitter >= 0):
        raise ConfigError("--delay must be positive and --jitter not negative (milliseconds)")
    try:
        losses = tuple(float(part) for part in args.losses.split(",") if part.strip())
    except ValueError:
        raise ConfigError(
            f"--losses must be comma-separated numbers, got {args.losses!r}"
        ) from None
    try:
        return Plan(
            scenarios=scenarios,
            sizes=() if args.sizes is None else _ints(args.sizes, "--sizes"),
            runs=args.runs,
            seed=args.seed,
            quick=args.quick,
            network=NetworkModel(delay=args.delay / 1000, jitter=args.jitter / 1000),
            threads=args.threads,
            shared_from=args.shared_from,
            profiles=profiles,
            losses=losses,
            slow_node=args.slow_node,
            accuracy_minutes=args.accuracy_minutes,
            state=StatePlan(
                providers=args.providers,
                window=args.state_window,
                changes=args.state_changes,
                start=args.state_start,
                joins=args.state_joins,
            ),
        )
    except ValueError as err:
        raise ConfigError(str(err)) from None


def _check_names(given: tuple[str, ...], known: tuple[str, ...], what: str) -> None:
    for name in given:
        if name not in known:
            raise ConfigError(unknown_name(f"unknown {what} {name!r}", name, known, f"{what}s"))


def convergence_command(args: argparse.Namespace) -> int:
    try:
        plan = plan_from_args(args)
    except ConfigError as err:
        print(f"grid bench convergence: {err}", file=sys.stderr)
        return EXIT_USAGE
    if args.plot is not None and not args.plot.parent.resolve().is_dir():
        print(
            f"grid bench convergence: --plot: no directory {str(args.plot.parent)!r}",
            file=sys.stderr,
        )
        return EXIT_USAGE
    if args.plot is not None:
        try:
            check_plot_path(args.plot)
        except PlotError as err:
            print(f"grid bench: {err}", file=sys.stderr)
            return EXIT_USAGE
    progress = Progress.for_stderr(args.progress)
    try:
        report = run_plan(plan, progress)
    except KeyboardInterrupt:
        progress.clear()
        print("grid bench convergence: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except ConfigError as err:
        progress.clear()
        print(f"grid bench convergence: {err}", file=sys.stderr)
        return EXIT_USAGE
    except SpeedProbeError as err:
        progress.clear()
        print(f"grid bench convergence: {err}", file=sys.stderr)
        return EXIT_FAILED
    if args.json:
        json.dump(report, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(render(report))
    if args.plot is not None:
        try:
            write_plot(report, args.plot)
        except PlotError as err:
            print(f"grid bench: {err}", file=sys.stderr)
            return EXIT_USAGE
        except OSError as err:
            print(f"grid bench convergence: cannot write the plot: {err}", file=sys.stderr)
            return EXIT_USAGE
    missed = [target for target in report["targets"] if target["met"] is False]
    return EXIT_TARGET_MISSED if args.strict and missed else EXIT_OK


def _seconds(text: str, option: str) -> float:
    try:
        return float(text) if text.replace(".", "", 1).isdigit() else parse_duration(text)
    except ValueError as err:
        raise ConfigError(f"{option} must be a duration such as 15s or 500ms: {err}") from None


def mesh_plan_from_args(args: argparse.Namespace) -> MeshPlan:
    """The plan the options describe; ConfigError says what is wrong with them."""
    return MeshPlan(
        sites=args.sites,
        providers_per_site=args.providers_per_site,
        scrape_interval_s=_seconds(args.scrape_interval, "--scrape-interval"),
        duration_s=_seconds(args.duration, "--duration"),
        warmup_s=_seconds(args.warmup, "--warmup"),
        peers=args.peers,
        seed=args.seed,
        baseline=args.baseline,
        joins=args.joins,
        others_join=args.others_join,
    )


def _check_png(path: Path) -> str | None:
    """Why the plot cannot be written to ``path`` (None: it can)."""
    if path.suffix.lower() != ".png":
        return f"--plot {str(path)!r}: the mesh plot is a PNG: name a .png file"
    if not path.parent.resolve().is_dir():
        return f"--plot: no directory {str(path.parent)!r}"
    if not png_available():
        return f"--plot: PNG needs the plot extra: {PLOT_EXTRA}"
    return None


def mesh_command(args: argparse.Namespace) -> int:
    try:
        plan = mesh_plan_from_args(args)
    except ConfigError as err:
        print(f"grid bench mesh: {err}", file=sys.stderr)
        return EXIT_USAGE
    if args.plot is not None:
        problem = _check_png(args.plot)
        if problem is not None:
            print(f"grid bench mesh: {problem}", file=sys.stderr)
            return EXIT_USAGE
    progress = Progress.for_stderr(args.progress)
    try:
        report = run_mesh(plan, progress.show)
    except KeyboardInterrupt:
        progress.clear()
        print("grid bench mesh: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BenchFailed as err:
        progress.clear()
        print(f"grid bench mesh: {err}", file=sys.stderr)
        return EXIT_FAILED
    progress.clear()
    if args.json:
        json.dump(report, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(render_mesh(report))
    if args.plot is not None:
        from grid.meshbench.plot import render_png

        try:
            args.plot.write_bytes(render_png(report))
        except OSError as err:
            print(f"grid bench mesh: cannot write the plot: {err}", file=sys.stderr)
            return EXIT_FAILED
    missed = [target for target in report["targets"] if not target["met"]]
    return EXIT_TARGET_MISSED if args.strict and missed else EXIT_OK
