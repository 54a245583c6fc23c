"""Runs the convergence scenarios for a plan (sizes, runs, seed) under both profiles and
gathers one report: per-run figures reduced to p50/p99/max, CDFs for plotting, the
epidemic bound and memberlist-LAN ratios, and Grid's targets checked."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from grid.simbench.profiles import (
    GRID,
    MEMBERLIST_LAN,
    PROFILES,
    NetworkModel,
    SwimProfile,
    epidemic_rounds,
    profile,
)
from grid.simbench.progress import Progress
from grid.simbench.scenarios import (
    Context,
    FailureRun,
    JoinRun,
    accuracy_run,
    failure_runs,
    form_cluster,
    join_runs,
    partition_run,
    rounds,
)
from grid.simbench.state import StatePlan, state_row
from grid.simbench.stats import pooled_cdf, spread, tail_miss_bound, uninformed_by_round

SCENARIOS = ("join", "failure", "accuracy", "partition", "speed", "state")
#: The scenarios of membership alone (the state plane's is ``state``).
MEMBERSHIP_SCENARIOS = tuple(name for name in SCENARIOS if name != "state")


def title(report: dict[str, Any]) -> str:
    """What a report (or its figure) shows: SWIM convergence, the state plane, or both."""
    membership = any(name in report for name in MEMBERSHIP_SCENARIOS)
    if "state" not in report:
        return "SWIM convergence"
    return "SWIM convergence and the state plane" if membership else "The state plane"


#: Fractions of the cluster a join is timed to.
COVERAGE = (("50%", 0.5), ("99%", 0.99), ("100%", 1.0))
#: Cluster sizes when none are given: the full run, and --quick's (no 10,000-member
#: cluster, whose forming alone takes 5 to 8 minutes per profile).
DEFAULT_SIZES = (100, 1000, 10_000)
QUICK_SIZES = (100, 1000)
#: The accuracy sizes, losses and duration.
ACCURACY_LOSSES = (0.10, 0.20)
ACCURACY_MAX_SIZE = 1000
ACCURACY_TARGET_MINUTES = 30.0
#: Sizes the zero-false-downs target is checked at. 10,000 is not in the default accuracy
#: sizes (a figure, not a routine run: about 20 minutes on 2 cores); one command runs it:
#: ``grid bench convergence --scenario accuracy --sizes 10000 --profiles grid --losses 0.1
#: --no-slow-node`` (a plan of one size runs accuracy at it, whatever the cap).
ACCURACY_TARGET_SIZES = (100, 1000, 10_000)
PARTITION_MAX_SIZE = 1000
#: With --quick, accuracy and partition run only up to this size: at 1,000 members a
#: 5-minute accuracy run takes about a minute (grid, 10 % loss) to many (memberlist-lan at
#: 20 % loss), and one partition and heal several.
QUICK_DEEP_MAX_SIZE = 100
SPEED_MIN_SIZE = 1000
JOIN_ROUND_TARGET = 15
#: The join target's pass rate, and the confidence runs alone must show it with.
JOIN_RATE_TARGET = 0.999
CONFIDENCE = 0.95

Row = dict[str, Any]


class SpeedProbeError(RuntimeError):
    """The separate speed-probe process failed; the message carries the end of its stderr."""


@dataclass(frozen=True, slots=True)
class Plan:
    """What to run. ``runs`` None picks each scenario's default (fewer when quick); empty
    ``sizes`` picks :data:`DEFAULT_SIZES`, or :data:`QUICK_SIZES` when quick."""

    scenarios: tuple[str, ...] = SCENARIOS
    sizes: tuple[int, ...] = ()
    runs: int | None = None
    seed: int = 1
    quick: bool = False
    network: NetworkModel = field(default_factory=NetworkModel)
    threads: int | None = None
    #: Clusters at least this large are formed once per profile and shared by the runs.
    shared_from: int = 5000
    profiles: tuple[str, ...] = PROFILES
    #: Accuracy runs: losses, whether to add the slow-node run, minutes (None: 30, 5 quick).
    losses: tuple[float, ...] = ACCURACY_LOSSES
    slow_node: bool = True
    accuracy_minutes: float | None = None
    #: The state-plane scenario's providers per site, window, changes and patience.
    state: StatePlan = field(default_factory=StatePlan)

    def __post_init__(self) -> None:
        unknown = set(self.scenarios) - set(SCENARIOS)
        if unknown:
            raise ValueError(
                f"unknown scenario {sorted(unknown)[0]!r}; scenarios are {', '.join(SCENARIOS)}"
            )
        if not self.sizes:
            object.__setattr__(self, "sizes", QUICK_SIZES if self.quick else DEFAULT_SIZES)
        if any(size < 3 for size in self.sizes):
            raise ValueError("sizes must be at least 3 members each")
        if self.runs is not None and self.runs < 1:
            raise ValueError(f"runs must be at least 1, got {self.runs}")
        if not self.profiles:
            raise ValueError("name at least one profile")
        if any(not 0.0 <= loss <= 1.0 for loss in self.losses):
            raise ValueError("losses must be probabilities between 0 and 1")
        if self.accuracy_minutes is not None and not self.accuracy_minutes > 0:
            raise ValueError("accuracy minutes must be positive")
        for name in self.profiles:
            profile(name, 3)

    def run_count(self, scenario: str, size: int) -> int:
        if self.runs is not None:
            return self.runs
        shared = size >= self.shared_from
        defaults = {
            "join": (5, 2) if self.quick else (20, 3),
            "failure": (3, 1) if self.quick else (10, 2),
            "partition": (1, 1) if self.quick else (3, 1),
        }
        regular, large = defaults.get(scenario, (1, 1))
        return large if shared else regular

    def seeds(self, scenario: str, size: int) -> list[int]:
        return [self.seed + i for i in range(self.run_count(scenario, size))]

    def scenario_sizes(self, scenario: str) -> list[int]:
        """The sizes ``scenario`` runs at: accuracy and partition up to 1,000 members (100
        with --quick), speed from 1,000; the nearest size when none qualifies."""
        if scenario == "speed":
            return [s for s in self.sizes if s >= SPEED_MIN_SIZE] or [max(self.sizes)]
        caps = {"accuracy": ACCURACY_MAX_SIZE, "partition": PARTITION_MAX_SIZE}
        if scenario not in caps:
            return list(self.sizes)
        cap = QUICK_DEEP_MAX_SIZE if self.quick else caps[scenario]
        return [s for s in self.sizes if s <= cap] or [min(self.sizes)]

    @property
    def accuracy_duration(self) -> float:
        if self.accuracy_minutes is not None:
            return self.accuracy_minutes * 60
        return 300.0 if self.quick else 1800.0


def run_plan(plan: Plan, progress: Progress) -> dict[str, Any]:
    """Runs every scenario of the plan; returns the report (JSON-ready)."""
    ctx = Context(network=plan.network, threads=plan.threads, progress=progress)
    report: dict[str, Any] = {
        "plan": {
            "scenarios": list(plan.scenarios),
            "sizes": list(plan.sizes),
            "seed": plan.seed,
            "quick": plan.quick,
            "shared_from": plan.shared_from,
            "network": {
                "delay": plan.network.delay,
                "jitter": plan.network.jitter,
                "jitter_kind": plan.network.jitter_kind,
            },
            "profiles": list(plan.profiles),
            "losses": list(plan.losses),
            "slow_node": plan.slow_node,
            "accuracy_minutes": plan.accuracy_duration / 60,
            "state": {
                "providers": plan.state.providers,
                "window": plan.state.window,
                "changes": plan.state.changes,
                "patience": plan.state.patience,
                "start_rate": plan.state.start_rate,
                "start": plan.state.start,
                "joins": plan.state.joins,
            },
            "scenario_sizes": {name: plan.scenario_sizes(name) for name in plan.scenarios},
        }
    }
    if {"join", "failure"} & set(plan.scenarios):
        report |= _membership(plan, ctx)
    steps: dict[str, Callable[[Plan, Context], list[Row]]] = {
        "accuracy": _accuracy,
        "partition": _partition,
        "speed": _speed,
        "state": _state,
    }
    for scenario, step in steps.items():
        if scenario in plan.scenarios:
            report[scenario] = step(plan, ctx)
    progress.clear()
    report["targets"] = targets(report)
    return report


def _membership(plan: Plan, ctx: Context) -> dict[str, list[Row]]:
    """Join and failure runs. A large cluster is formed once per profile and serves the
    joins, then the crashes; only one is alive at a time."""
    rows: dict[str, list[Row]] = {s: [] for s in ("join", "failure") if s in plan.scenarios}
    for size in plan.sizes:
        joins: dict[str, Row] = {}
        failures: dict[str, Row] = {}
        for name in plan.profiles:
            prof = profile(name, size)
            shared = None
            if size >= plan.shared_from:
                shared = form_cluster(size - 1, plan.seed, prof, ctx, label=f"N={size} {name}")
                shared.run_until(shared.now + prof.probe_interval)
            if "join" in rows:
                runs = join_runs(size, plan.seeds("join", size), prof, ctx, shared)
                joins[name] = _join_row(size, name, runs, shared is not None)
            if "failure" in rows:
                crashes = failure_runs(size, plan.seeds("failure", size), prof, ctx, shared)
                failures[name] = _failure_row(size, name, crashes, shared is not None)
            del shared
        if "join" in rows:
            _add_ratios(joins, ("seconds", "100%", "p50"))
            rows["join"].extend(joins.values())
        if "failure" in rows:
            _add_ratios(failures, ("everywhere", "p50"))
            rows["failure"].extend(failures.values())
    return rows


def _join_row(size: int, name: str, runs: Sequence[JoinRun], shared: bool) -> Row:
    prof = profile(name, size)
    row: Row = {
        "size": size,
        "profile": name,
        "runs": len(runs),
        "shared_cluster": shared,
        "probe_interval": prof.probe_interval,
        "gossip_interval": prof.gossip_interval,
        "seconds": {},
        "rounds": {},
    }
    for label, fraction in COVERAGE:
        times = [t for run in runs if (t := run.coverage(fraction)) is not None]
        row["seconds"][label] = spread(times)
        row["rounds"][label] = spread([rounds(t, prof) or 0.0 for t in times])
    full = [run.coverage(1.0) for run in runs]
    row["reached_all"] = sum(1 for t in full if t is not None) / len(runs)
    row["within_target_rounds"] = sum(
        1 for t in full if t is not None and t <= JOIN_ROUND_TARGET * prof.gossip_interval
    ) / len(runs)
    joiner = [t for run in runs if (t := run.joiner_coverage(0.99)) is not None]
    row["joiner_knows_99%"] = spread(joiner)
    row["joiner_reached_99%"] = len(joiner) / len(runs)
    bound = epidemic_rounds(size, prof.gossip_nodes)
    row["epidemic_bound_rounds"] = bound
    measured = row["rounds"]["100%"]
    row["rounds_vs_bound"] = None if measured is None else measured["p50"] / bound
    row["cdf"] = pooled_cdf([(run.delays, run.observers) for run in runs])
    row.update(_join_tail(prof, runs))
    return row


def _join_tail(prof: SwimProfile, runs: Sequence[JoinRun]) -> Row:
    """How likely a run is to miss the round target, beyond what the runs show.

    foca relays each piece of news a bounded number of times (``max_transmissions``), so
    dissemination only goes on while members that learned it recently still relay it; past
    that, a straggler waits for a push/pull sync. The estimate therefore extrapolates the
    measured tail only to the *relay horizon*: the round by which half the members knew,
    plus the rounds a member's relay budget lasts at one message to each of its gossip
    fanout per round (or the target, if earlier)."""
    learned = [(run.delays, run.observers) for run in runs]
    curve = uninformed_by_round(learned, prof.gossip_interval, JOIN_ROUND_TARGET)
    half = next((r for r, u in enumerate(curve) if u <= 0.5), None)
    if half is None:
        return {"uninformed_by_round": curve, "relay_horizon_rounds": None, "miss_bound": None}
    relay_rounds = runs[0].max_transmissions / prof.gossip_nodes
    horizon = min(float(JOIN_ROUND_TARGET), half + relay_rounds)
    return {
        "uninformed_by_round": curve,
        "relay_horizon_rounds": horizon,
        "miss_bound": tail_miss_bound(curve, runs[0].observers, horizon),
    }


def _failure_row(size: int, name: str, runs: Sequence[FailureRun], shared: bool) -> Row:
    prof = profile(name, size)
    everywhere = [t for run in runs if (t := run.everywhere) is not None]
    return {
        "size": size,
        "profile": name,
        "runs": len(runs),
        "shared_cluster": shared,
        "probe_interval": prof.probe_interval,
        "suspicion_timeout": prof.suspicion_timeout,
        "first_suspicion": spread([t for r in runs if (t := r.first_suspicion) is not None]),
        "first_down": spread([t for r in runs if (t := r.first_down) is not None]),
        "everywhere": spread(everywhere),
        "detected_everywhere": len(everywhere) / len(runs),
        "false_positives": sum(run.false_positives for run in runs),
        "cdf": pooled_cdf([(run.delays, run.observers) for run in runs]),
    }


def _accuracy(plan: Plan, ctx: Context) -> list[Row]:
    rows: list[Row] = []
    sizes = plan.scenario_sizes("accuracy")
    variants = [(loss, False) for loss in plan.losses] + ([(0.0, True)] if plan.slow_node else [])
    for size in sizes:
        for loss, slow in variants:
            for name in plan.profiles:
                prof = profile(name, size)
                for seed in plan.seeds("accuracy", size):
                    run = accuracy_run(
                        size,
                        seed,
                        prof,
                        ctx,
                        loss=loss,
                        duration=plan.accuracy_duration,
                        slow=slow,
                    )
                    rows.append(
                        {
                            "size": size,
                            "profile": name,
                            "seed": seed,
                            "loss": loss,
                            "slow_node_delay": run.slow_delay,
                            "minutes": run.duration / 60,
                            "false_declarations": run.false_declarations,
                            "falsely_declared_members": run.falsely_declared,
                            "false_declarations_by_slow_node": run.by_slow,
                            "false_declarations_of_slow_node": run.of_slow,
                            "false_per_member_hour": run.per_member_hour,
                            "false_suspicions": run.false_suspicions,
                            "refutations": run.refutations,
                            "suspicion_notices": run.suspicion_notices,
                            "late_answers": run.late_answers,
                            "messages_per_member_second": run.message_rate,
                            "updates_backlog_max": run.backlog_max,
                        }
                    )
    return rows


def _partition(plan: Plan, ctx: Context) -> list[Row]:
    rows: list[Row] = []
    sizes = plan.scenario_sizes("partition")
    for size in sizes:
        by_profile: dict[str, Row] = {}
        for name in plan.profiles:
            prof = profile(name, size)
            runs = [partition_run(size, seed, prof, ctx) for seed in plan.seeds("partition", size)]
            times = [t for run in runs if (t := run.converged_after) is not None]
            by_profile[name] = {
                "size": size,
                "profile": name,
                "runs": len(runs),
                "split_seconds": spread([run.split_for for run in runs]),
                "split_complete": sum(run.split_complete for run in runs) / len(runs),
                "converged": len(times) / len(runs),
                "converged_after": spread(times),
                "converged_after_probe_intervals": spread([t / prof.probe_interval for t in times]),
            }
        _add_ratios(by_profile, ("converged_after", "p50"))
        rows.extend(by_profile.values())
    return rows


def _speed(plan: Plan, ctx: Context) -> list[Row]:
    sizes = plan.scenario_sizes("speed")
    rows: list[Row] = []
    for size in sizes:
        ctx.progress.show(f"speed N={size} (separate process)", 0, 1)
        rows.append(measure_speed(size, plan.seed, GRID, plan.network, plan.threads))
    return rows


def _state(plan: Plan, ctx: Context) -> list[Row]:
    sizes = plan.scenario_sizes("state")
    rows: list[Row] = []
    for done, size in enumerate(sizes):
        ctx.progress.show(f"state N={size} x {plan.state.providers} providers", done, len(sizes))
        rows.append(state_row(size, plan.seed, plan.state, ctx.network, ctx.threads))
    return rows


def measure_speed(
    size: int, seed: int, name: str, network: NetworkModel, threads: int | None
) -> Row:
    """Runs the speed probe in a fresh interpreter so its peak memory is its own."""
    command = [
        sys.executable,
        "-m",
        "grid.simbench.speed",
        "--size",
        str(size),
        "--seed",
        str(seed),
        "--profile",
        name,
        "--delay",
        str(network.delay),
        "--jitter",
        str(network.jitter),
        "--jitter-kind",
        network.jitter_kind,
    ]
    if threads is not None:
        command += ["--threads", str(threads)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SpeedProbeError(
            f"the speed probe for N={size} failed (exit {done.returncode}): "
            + done.stderr.strip()[-2000:]
        )
    row: Row = json.loads(done.stdout)
    return row


def _add_ratios(by_profile: dict[str, Row], path: tuple[str, ...]) -> None:
    """Adds ``grid_vs_memberlist``: Grid's figure at ``path`` over memberlist-LAN's."""
    if GRID not in by_profile or MEMBERLIST_LAN not in by_profile:
        return
    ours, theirs = _dig(by_profile[GRID], path), _dig(by_profile[MEMBERLIST_LAN], path)
    ratio = None if ours is None or theirs is None or theirs == 0 else ours / theirs
    by_profile[GRID]["grid_vs_memberlist"] = {"/".join(path): ratio}


def _dig(row: Row, path: tuple[str, ...]) -> float | None:
    value: Any = row
    for key in path:
        if value is None:
            return None
        value = value.get(key)
    return None if value is None else float(value)


@dataclass(frozen=True, slots=True)
class Verdict:
    """One target's verdict: ``met`` True (met), False (MISSED) or None (unproven, with the
    ``reason``: the runs saw no failure but could not establish the target)."""

    met: bool | None
    reason: str | None = None

    @property
    def label(self) -> Literal["met", "MISSED", "unproven"]:
        return "met" if self.met else "MISSED" if self.met is False else "unproven"


def verdict(
    *,
    failures: int,
    samples: int,
    minutes: float | None = None,
    required_minutes: float | None = None,
    required_rate: float | None = None,
    miss_bound: float | None = None,
) -> Verdict:
    """Judges one target from what the runs measured. Pure.

    ``failures`` counts what broke the target (runs over the limit, false downs): any
    failure is MISSED, however short the run, since no longer run can undo it. Otherwise the
    target is unproven when the evidence falls short of what it asks: no samples at all; a
    run of ``minutes`` shorter than ``required_minutes`` (run too short); or, for a pass
    rate ``required_rate``, fewer ``samples`` than show it. All of K runs passing shows a
    pass rate of at least (1 - CONFIDENCE)^(1/K) at 95 % confidence; with fewer runs the
    target is still met when ``miss_bound``, an estimated chance of a miss from the runs'
    measured tail, is at most 1 - ``required_rate``.
    """
    if samples < 1:
        return Verdict(None, "no samples")
    if failures > 0:
        return Verdict(False)
    if required_minutes is not None and (minutes is None or minutes < required_minutes):
        ran = "no" if minutes is None else f"{minutes:g}"
        return Verdict(None, f"run too short: {ran} of {required_minutes:g} minutes")
    if required_rate is not None:
        shown = (1 - CONFIDENCE) ** (1 / samples)
        if shown < required_rate and (miss_bound is None or miss_bound > 1 - required_rate):
            return Verdict(
                None,
                f"too few samples: {samples} passing runs show {_percent(shown)} at "
                f"{CONFIDENCE:.0%} confidence, not {_percent(required_rate)}",
            )
    return Verdict(True)


def _percent(value: float) -> str:
    return f"{100 * value:.4g}%"


def targets(report: dict[str, Any]) -> list[Row]:
    """Grid's convergence targets under Grid's profile, each with the measured figure and its
    verdict. A target whose scenario ran, but not at its size (or profile, or loss), is
    listed as unproven (not run) when the report carries its plan."""
    plan = report.get("plan")
    checks: list[Row | None] = []
    if "speed" in report:
        speed = {row["size"]: row for row in report["speed"]}
        checks.append(_speed_target(10_000, speed.get(10_000), plan))
        checks.append(_speed_target(1000, speed.get(1000), plan))
    if "join" in report:
        join = {row["size"]: row for row in report["join"] if row["profile"] == GRID}
        checks.append(
            _join_target(join[10_000]) if 10_000 in join else _not_run(_JOIN, plan, "N=10,000 join")
        )
        checks.append(_joiner_target(join.get(1000), plan))
    if "accuracy" in report:
        for size in ACCURACY_TARGET_SIZES:
            name = f"zero false downs in 30 min at 10% loss, N={size}"
            rows = [
                row
                for row in report["accuracy"]
                if row["profile"] == GRID and row["loss"] == 0.10 and row["size"] == size
            ]
            checks.extend(_accuracy_target(name, row) for row in rows)
            if not rows:
                checks.append(_not_run(name, plan, f"N={size:,} accuracy run at 10% loss"))
    return [check for check in checks if check is not None]


_JOIN = "a join reaches 100% of 10,000 within 15 gossip rounds in >= 99.9% of runs"


def _not_run(name: str, plan: dict[str, Any] | None, run: str) -> Row | None:
    """A target the plan did not measure (``run`` says what it needs); None without a plan
    (a bare list of rows)."""
    if plan is None:
        return None
    quick = " (--quick)" if plan.get("quick") else ""
    return _target(name, "-", Verdict(None, f"not run: no {run} under the grid profile{quick}"))


def _speed_target(size: int, row: Row | None, plan: dict[str, Any] | None) -> Row | None:
    if size == 10_000:
        name = "10,000 members at >= real time on 2 cores within 8 GiB"
    else:
        name = "1,000 members at >= 20x real time"
    if row is None:
        return _not_run(name, plan, f"N={size:,} speed probe")
    if size == 10_000:
        measured = f"{row['speed']:.2f}x real time, peak {row['peak_rss_bytes'] / 2**30:.2f} GiB"
        passed = row["speed"] >= 1.0 and row["peak_rss_bytes"] <= 8 * 2**30
    else:
        measured = f"{row['speed']:.1f}x real time"
        passed = row["speed"] >= 20.0
    return _target(name, measured, verdict(failures=0 if passed else 1, samples=1))


def _joiner_target(row: Row | None, plan: dict[str, Any] | None) -> Row | None:
    name = "a joiner knows >= 99% of a 1,000-member cluster within 5 s"
    if row is None:
        return _not_run(name, plan, "N=1,000 join")
    spread_ = row["joiner_knows_99%"]
    reached = row.get("joiner_reached_99%", 1.0 if spread_ is not None else 0.0)
    passed = spread_ is not None and spread_["max"] <= 5.0 and reached == 1.0
    measured = f"max {_fmt(spread_, 'max')} s over {row['runs']} runs"
    if reached < 1.0:
        measured += f"; {reached:.0%} of joiners ever knew 99%"
    return _target(name, measured, verdict(failures=0 if passed else 1, samples=row["runs"]))


def _accuracy_target(name: str, row: Row) -> Row:
    measured = (
        f"{row['false_declarations']} false declarations in {row['minutes']:g} min "
        f"(seed {row['seed']})"
    )
    result = verdict(
        failures=row["false_declarations"],
        samples=1,
        minutes=row["minutes"],
        required_minutes=ACCURACY_TARGET_MINUTES,
    )
    return _target(name, measured, result)


def _join_target(row: Row) -> Row:
    """The 10,000-member join target. All of K runs passing shows a pass rate of at least
    0.05^(1/K) at 95 % confidence, so runs alone need about 3,000 to show 99.9 %; with fewer,
    the target is met when the measured tail of the runs puts the chance of a miss below
    0.1 % (see ``_join_tail``), and unproven otherwise."""
    runs = row["runs"]
    within = round(row["within_target_rounds"] * runs)
    bound = row.get("miss_bound")
    measured = f"{within} of {runs} runs; max {_fmt(row['rounds']['100%'], 'max')} rounds"
    result = verdict(
        failures=runs - within, samples=runs, required_rate=JOIN_RATE_TARGET, miss_bound=bound
    )
    if result.met and bound is not None and (1 - CONFIDENCE) ** (1 / runs) < JOIN_RATE_TARGET:
        measured += f"; estimated miss chance {bound:.1e} from the measured tail"
    return _target(_JOIN, measured, result)


def _target(name: str, measured: str, result: Verdict) -> Row:
    """``met`` None is unproven: ``reason`` says why (run too short, too few samples)."""
    return {"target": name, "measured": measured, "met": result.met, "reason": result.reason}


def _fmt(spread_: dict[str, float] | None, key: str) -> str:
    return "-" if spread_ is None else f"{spread_[key]:.2f}"
