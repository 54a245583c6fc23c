"""The caption of the convergence figure: the sentences naming what it came from (Grid's
version, the seed, the runs per size and profile, the network model and the profiles).
Pure.
"""

from __future__ import annotations

from typing import Any

from grid.simbench.figure_model import number


def caption(report: dict[str, Any], version: str | None = None) -> tuple[str, ...]:
    """Sentences naming what the figure came from: Grid version, seed, runs, network."""
    plan = report.get("plan") or {}
    if version is None:
        version = report.get("version") or _running_version()
    seed = plan.get("seed")
    # Speed and the state plane run once per size under grid alone.
    profiled = any(name in report for name in _PROFILED)
    first = f"Grid {version}"
    if seed is not None:
        first += f"; seed {seed}"
        if profiled:
            first += f" (run i uses seed {seed} + i, the same under both profiles)"
    lines = [first + "."]
    runs = _runs(report)
    if runs:
        lines.append(f"Runs per size and profile: {'; '.join(runs)}.")
    network = plan.get("network")
    if network:
        loss = float(network.get("loss", 0.0))
        text = (
            f"Network: {number(network['delay'] * 1000)} ms one way + "
            f"{network['jitter_kind']} jitter averaging {number(network['jitter'] * 1000)} ms "
            f"per message, {'no loss' if loss == 0 else f'{loss:.0%} loss'}"
        )
        accuracy = _accuracy_settings(plan) if "accuracy" in report else ""
        lines.append(text + (f"; {accuracy}" if accuracy else "") + ".")
    profiles = plan.get("profiles")
    if profiles and profiled:
        described = [_PROFILE_TEXT.get(name, name) for name in profiles]
        lines.append(f"Profiles: {'; '.join(described)}.")
    return tuple(lines)


#: The scenarios that run under every profile of the plan.
_PROFILED = ("join", "failure", "accuracy", "partition")
_PROFILE_TEXT = {
    "grid": "grid (solid, filled): probe P 5 s, suspicion S 10 s, gossip every 1 s to 3",
    "memberlist-lan": "memberlist-lan (dashed, hollow): P 1 s, S 4·max(1, log10 N) s, gossip "
    "every 0.2 s to 3",
}


def _runs(report: dict[str, Any]) -> list[str]:
    out = []
    for name in ("join", "failure", "partition"):
        rows = report.get(name) or []
        by_count: dict[int, list[int]] = {}
        for row in rows:
            if "runs" in row:
                sizes = by_count.setdefault(int(row["runs"]), [])
                if row["size"] not in sizes:
                    sizes.append(row["size"])
        if not by_count:
            continue
        label = "failure" if name == "failure" else name
        if len(by_count) == 1:
            out.append(f"{label} {next(iter(by_count))}")
        else:
            parts = [
                f"{count} at N={', '.join(f'{s:,}' for s in sizes)}"
                for count, sizes in sorted(by_count.items(), reverse=True)
            ]
            out.append(f"{label} {', '.join(parts)}")
    accuracy = report.get("accuracy") or []
    if accuracy:
        settings: dict[tuple[Any, ...], int] = {}
        for row in accuracy:
            key = (row["size"], row["profile"], row["loss"], bool(row.get("slow_node_delay")))
            settings[key] = settings.get(key, 0) + 1
        counts = sorted(set(settings.values()))
        minutes = sorted({row["minutes"] for row in accuracy if "minutes" in row})
        out.append(
            f"accuracy {'/'.join(map(str, counts))} of {'/'.join(number(m) for m in minutes)} "
            "virtual minutes per setting"
        )
    if report.get("speed"):
        out.append("speed 1 timed push/pull period per size")
    if report.get("state"):
        state = (report.get("plan") or {}).get("state") or {}
        providers = sorted({row["providers"] for row in report["state"] if "providers" in row})
        text = "state plane 1 under grid"
        parts = []
        if providers:
            parts.append(f"{'/'.join(map(str, providers))} providers a site")
        if "window" in state:
            parts.append(f"{number(float(state['window']))} s of steady state")
        if "changes" in state:
            parts.append(f"{state['changes']} changes")
        out.append(text + (f" ({', '.join(parts)})" if parts else ""))
    return out


def _accuracy_settings(plan: dict[str, Any]) -> str:
    parts = [f"{loss:.0%}" for loss in plan.get("losses", ())]
    text = f"accuracy runs at {' and '.join(parts)} loss" if parts else "accuracy runs"
    if plan.get("slow_node"):
        text += ", and at no loss with one slow node (1.5 P late)"
    return text


def _running_version() -> str:
    try:
        from grid import __version__
    except ImportError:  # pragma: no cover - the extension is always built here
        return "unknown"
    return str(__version__)
