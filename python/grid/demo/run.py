"""``grid demo``: a three-site mesh on 127.0.0.1, start to finish, in well under a minute.

Three sites in two regions join over encrypted SWIM, trust each other by certificate pins,
share their providers and rank every candidate. Then one provider's load rises and the
other sites reorder; then a site crashes and the survivors drop its candidates. Each
site's overlay file is checked with the gateway's acceptance rules, and the measured times
are summarized.
"""

from __future__ import annotations

import errno
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grid.demo.builder import GATEWAY_NAME, GATEWAY_NAMESPACE
from grid.demo.mesh import LocalMesh, MeshSettings, ProviderPlan, SitePlan, quiet_agents
from grid.errors import ConfigError
from grid.membership import SwimConfig
from grid.models.fields import parse_duration
from grid.render.validate import ExpectedScope, validate_overlay

LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
QWEN = "Qwen/Qwen2.5-72B-Instruct"

DEMO_SITES = (
    SitePlan(
        "east-edge",
        "us-east",
        "us-east-1a",
        (ProviderPlan("llama-east-edge", (LLAMA,), 3, 0.35, 0.6, 0.9, ("0.05", "0.10")),),
    ),
    SitePlan(
        "east-core",
        "us-east",
        "us-east-1b",
        (
            ProviderPlan(
                "qwen-east-core",
                (QWEN, LLAMA),
                1,
                0.2,
                0.7,
                0.6,
                ("0.20", "0.60"),
                cluster="east-core-vllm",
            ),
        ),
    ),
    SitePlan(
        "west-edge",
        "us-west",
        "us-west-2a",
        (ProviderPlan("llama-west-edge", (LLAMA,), 2, 0.3, 0.5, 0.8, ("0.05", "0.10")),),
    ),
)
LOADED_SITE, LOADED_PROVIDER = "east-core", "qwen-east-core"
LOADED_QUEUE, LOADED_KV = 60.0, 0.95
CRASHED_SITE = "west-edge"
CONVERGE_TIMEOUT_S = 30.0
STEP_TIMEOUT_S = 20.0

COLUMNS = ("rank", "name", "site", "cluster", "selection_tier", "admission_state", "score")
HEADER = ("RANK", "MODEL", "SITE", "CLUSTER", "TIER", "ADMISSION", "SCORE")


@dataclass
class Step:
    """One act of the demo: what happened, how long the mesh took, what each site ranks."""

    name: str
    title: str
    seconds: float | None = None
    bound_seconds: float | None = None
    error: str | None = None
    overlays: dict[str, list[dict[str, Any]]] = field(default_factory=dict)


@dataclass
class DemoReport:
    out_dir: Path
    sites: list[dict[str, str]] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)
    verification: dict[str, dict[str, str]] = field(default_factory=dict)
    total_seconds: float | None = None

    @property
    def ok(self) -> bool:
        verified = bool(self.verification) and all(
            entry["verdict"].startswith("accept") for entry in self.verification.values()
        )
        return verified and all(step.error is None for step in self.steps)

    def as_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "outDir": str(self.out_dir),
            "sites": self.sites,
            "steps": [
                {
                    "name": step.name,
                    "title": step.title,
                    "seconds": step.seconds,
                    "boundSeconds": step.bound_seconds,
                    "error": step.error,
                    "overlays": step.overlays,
                }
                for step in self.steps
            ],
            "verification": self.verification,
            "summary": {
                **{step.name: step.seconds for step in self.steps},
                "total": self.total_seconds,
            },
        }


def table(candidates: list[dict[str, Any]]) -> list[str]:
    """Candidates as aligned text rows (header first)."""
    rows = [HEADER] + [
        tuple(f"{c[column]:.4f}" if column == "score" else str(c[column]) for column in COLUMNS)
        for c in candidates
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(HEADER))]
    return [
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in rows
    ]


class Demo:
    """Runs the demo and reports as it goes (``emit`` receives each line of text)."""

    def __init__(self, out_dir: Path, emit: Callable[[str], None]) -> None:
        self.report = DemoReport(out_dir)
        self._emit = emit
        self._started = 0.0
        settings = MeshSettings()
        self.mesh = LocalMesh(out_dir, DEMO_SITES, settings)
        self._swim = SwimConfig(
            probe_interval=parse_duration(settings.probe_interval),
            suspicion_timeout=parse_duration(settings.suspicion_timeout),
            push_pull_interval=parse_duration(settings.probe_interval) * 6,
        )

    async def run(self) -> DemoReport:
        mesh = self.mesh
        await mesh.prepare()
        self._introduce()
        try:
            self._started = time.monotonic()
            await mesh.start()
            await self._converge()
            if self.report.steps[-1].error is None:
                await self._shift_load()
                await self._crash()
            self._verify()
        finally:
            await mesh.stop()
        self._summarize()
        return self.report

    # -- the acts ---------------------------------------------------------------------------

    def _introduce(self) -> None:
        emit = self._emit
        emit(
            "Grid demo: 3 sites on 127.0.0.1 in 2 regions; SWIM encrypted with a fresh "
            "AES-256 key; sites pinned to fresh certificates"
        )
        for name, runtime in self.mesh.sites.items():
            plan = runtime.plan
            providers = ", ".join(p.name for p in plan.providers)
            entry = {
                "site": name,
                "region": plan.region,
                "zone": plan.zone,
                "swim": runtime.swim_address,
                "egress": runtime.egress_address,
                "providers": providers,
            }
            self.report.sites.append(entry)
            emit(
                f"  {name:<10} {plan.region}/{plan.zone}  swim {runtime.swim_address}  "
                f"egress {runtime.egress_address}  provider {providers}"
            )
        emit(f"Output: {self.report.out_dir}")

    async def _step(
        self, name: str, title: str, predicate: Callable[[], bool], timeout: float
    ) -> Step:
        step = Step(name, title)
        self.report.steps.append(step)
        try:
            step.seconds = await self.mesh.wait_for(title, predicate, timeout)
        except TimeoutError as error:
            step.error = str(error)
        return step

    def _show(self, step: Step, sites: list[str]) -> None:
        emit = self._emit
        timing = "timed out" if step.seconds is None else f"{step.seconds:.2f} s"
        bound = "" if step.bound_seconds is None else f"; SWIM bound {step.bound_seconds:.2f} s"
        emit("")
        emit(f"{len(self.report.steps)}. {step.title} ({timing}{bound})")
        for site in sites:
            step.overlays[site] = self.mesh.candidates(site)
            emit(f"  {site}")
            for line in table(step.overlays[site]):
                emit(f"    {line}")
        if step.error is not None:
            emit(f"  ! {step.error}")

    async def _converge(self) -> None:
        mesh = self.mesh
        everyone = set(mesh.sites)

        def converged() -> bool:
            return all({c["site"] for c in mesh.candidates(s)} == everyone for s in everyone)

        step = await self._step(
            "convergence",
            "The mesh converges: every site trusts the others and ranks every candidate",
            converged,
            CONVERGE_TIMEOUT_S,
        )
        self._show(step, list(mesh.sites))
        self._emit("  as it happened (seconds after start: the sites each overlay routes to):")
        known: dict[str, tuple[str, ...]] = {}
        for at, site, overlay in mesh.overlay_log:
            rendered = overlay.overlay
            if rendered is None:
                continue
            reached = tuple(sorted({entry.candidate.site for entry in rendered.candidates}))
            if known.get(site) != reached:
                known[site] = reached
                self._emit(f"    +{at - self._started:5.2f}  {site:<10} {', '.join(reached)}")

    async def _shift_load(self) -> None:
        mesh = self.mesh
        others = [s for s in mesh.sites if s != LOADED_SITE]
        before = {s: [(c["name"], c["site"]) for c in mesh.candidates(s)] for s in others}
        mesh.sites[LOADED_SITE].providers[LOADED_PROVIDER].set_load(
            queue_depth=LOADED_QUEUE, kv_cache_utilization=LOADED_KV
        )

        def shifted() -> bool:
            return all(
                all(
                    c["admission_state"] == "existing_only"
                    for c in mesh.candidates(s)
                    if c["site"] == LOADED_SITE
                )
                for s in others
            )

        step = await self._step(
            "metric_propagation",
            f"Load rises at {LOADED_PROVIDER} ({LOADED_SITE}): queue {LOADED_QUEUE:g}, KV cache "
            f"{LOADED_KV:.0%}; the other sites take it out of new sessions",
            shifted,
            STEP_TIMEOUT_S,
        )
        self._show(step, others)
        for site in others:
            after = [(c["name"], c["site"]) for c in mesh.candidates(site)]
            if after != before[site]:
                self._emit(f"  {site}: order changed")

    async def _crash(self) -> None:
        mesh = self.mesh
        survivors = [s for s in mesh.sites if s != CRASHED_SITE]
        await mesh.crash(CRASHED_SITE)

        def removed() -> bool:
            return all(
                all(c["site"] != CRASHED_SITE for c in mesh.candidates(s)) for s in survivors
            )

        step = await self._step(
            "failure_removal",
            f"{CRASHED_SITE} crashes; the survivors detect it and drop its candidates",
            removed,
            STEP_TIMEOUT_S,
        )
        self._show(step, survivors)
        for site in survivors:
            member, phase = mesh.view_of(site, CRASHED_SITE)
            self._emit(f"  {site} sees {CRASHED_SITE}: SWIM {member}, GridSite {phase}")

        def declared_down() -> bool:
            return all(mesh.view_of(s, CRASHED_SITE)[0] == "down" for s in survivors)

        detection = await self._step(
            "failure_detection",
            f"SWIM declares {CRASHED_SITE} down at every survivor",
            declared_down,
            STEP_TIMEOUT_S,
        )
        if detection.seconds is not None and step.seconds is not None:
            detection.seconds += step.seconds  # both measured from the crash
        detection.bound_seconds = self._swim.detection_bound(len(mesh.sites))
        timing = "timed out" if detection.seconds is None else f"{detection.seconds:.2f} s"
        self._emit("")
        self._emit(
            f"{len(self.report.steps)}. {detection.title} ({timing} after the crash; "
            f"bound {detection.bound_seconds:.2f} s)"
        )
        if detection.error is not None:
            self._emit(f"  ! {detection.error}")

    def _verify(self) -> None:
        self._emit("")
        self._emit(
            "Overlay files, checked with the gateway's acceptance rules (grid overlay verify)"
        )
        network = self.mesh.settings.network
        for site in self.mesh.sites:
            try:
                path = self.mesh.overlay_file(site)
                data = path.read_bytes()
            except (AssertionError, OSError) as error:
                self.report.verification[site] = {"verdict": f"reject unreadable: {error}"}
                self._emit(f"  {site:<10} missing")
                continue
            expected = ExpectedScope(
                network=network,
                gateway=GATEWAY_NAME,
                namespace=GATEWAY_NAMESPACE,
                local_site=site,
            )
            verdict = validate_overlay(data, expected)
            # The agents keep running (and may render again) until the demo stops them, so
            # the exact document judged is kept beside the live one.
            kept = self.report.out_dir / "verified" / f"{site}-grid-config.json"
            kept.parent.mkdir(exist_ok=True)
            kept.write_bytes(data)
            self.report.verification[site] = {"verdict": str(verdict), "path": str(kept)}
            self._emit(f"  {site:<10} {verdict}  {kept}")

    def _summarize(self) -> None:
        emit = self._emit
        emit("")
        emit("Summary")
        labels = {
            "convergence": "convergence",
            "metric_propagation": "metric propagation",
            "failure_removal": "failure removal",
            "failure_detection": "SWIM detection",
        }
        for step in self.report.steps:
            value = "timed out" if step.seconds is None else f"{step.seconds:6.2f} s"
            bound = (
                ""
                if step.bound_seconds is None
                else f"   (SWIM detection bound {step.bound_seconds:.2f} s)"
            )
            emit(f"  {labels.get(step.name, step.name):<22}{value}{bound}")
        accepted = sum(v["verdict"].startswith("accept") for v in self.report.verification.values())
        emit(f"  {'overlays accepted':<22}{accepted}/{len(self.mesh.sites)}")
        emit(f"  {'result':<22}{'ok' if self.report.ok else 'FAILED'}")


class DemoOutputError(ConfigError):
    """The demo's output directory cannot be written (nothing was started)."""


def prepare_output(out_dir: Path | None) -> Path:
    """The demo's output directory, created if needed and checked writable (``None``: a
    new temporary directory). Raises :class:`DemoOutputError` saying why it cannot be
    used, before anything starts."""
    if out_dir is None:
        try:
            return Path(tempfile.mkdtemp(prefix="grid-demo-"))
        except OSError as error:
            raise DemoOutputError(
                f"cannot create a temporary directory for the demo output: {error.strerror}"
                "; give --out DIR"
            ) from None
    try:
        if out_dir.exists() and not out_dir.is_dir():
            raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR))
        out_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=out_dir, prefix=".grid-demo-"):
            pass
    except OSError as error:
        reason = error.strerror or str(error)
        raise DemoOutputError(f"cannot write the demo output to {out_dir}: {reason}") from None
    return out_dir


async def run_demo(
    out_dir: Path | None, *, emit: Callable[[str], None], verbose: bool = False
) -> DemoReport:
    """Run the demo into ``out_dir`` (default: a new temporary directory, kept). Raises
    :class:`DemoOutputError` before anything starts when the directory cannot be written."""
    directory = prepare_output(out_dir)
    quiet_agents(verbose)
    started = time.monotonic()
    report = await Demo(directory, emit).run()
    report.total_seconds = time.monotonic() - started
    emit(f"  {'total':<22}{report.total_seconds:6.2f} s")
    return report
