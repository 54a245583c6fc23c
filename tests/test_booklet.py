"""grid booklet: the built site is complete and self-contained, its data are what Grid's
own code computes, and the served booklet's API answers or refuses with a reason."""

from __future__ import annotations

import io
import json
import random
import re
import shutil
from collections.abc import AsyncIterator
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from grid._native import Simulation
from grid.booklet import crdt, scoring, swim
from grid.booklet.serve import CONTENT_SECURITY_POLICY, booklet_routes
from grid.booklet.site import CHAPTERS, Site, build_site, write_site
from grid.cli import main
from grid.errors import ConfigError
from grid.runtime.http import Endpoint

REFERENCE = re.compile(rb"""(?:src|href)="([^"]+)\"""")


@pytest.fixture(scope="module")
def site() -> Site:
    return build_site()


@pytest.fixture(scope="module")
def built(site: Site, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("booklet")
    write_site(site, out)
    return out


def embedded(path: Path) -> Any:
    """The JSON a data script assigns."""
    text = path.read_text(encoding="utf-8")
    return json.loads(text[text.index("] = ") + 4 :].strip().removesuffix(";"))


def explain_with_cli(tmp_path: Path, inputs: scoring.ScoringInputs) -> dict[str, Any]:
    """``grid explain --json`` run on files: the scenario's resources with ``inputs``'
    weights written into its GridNetwork, and a metrics file of ``inputs``' signals."""
    resources = tmp_path / "resources"
    shutil.copytree(scoring.SCENARIO_DIR, resources, dirs_exist_ok=True)
    mesh = resources / "mesh.yaml"
    documents = list(yaml.safe_load_all(mesh.read_text()))
    network = next(d for d in documents if d["kind"] == "GridNetwork")
    network["spec"]["scoring"]["weights"] = {
        "locality": inputs.weights["locality"],
        "queueDepth": inputs.weights["queue_depth"],
        "kvCache": inputs.weights["kv_cache"],
        "prefixCache": inputs.weights["prefix_cache"],
        "latency": inputs.weights["latency"],
        "cost": inputs.weights["cost"],
    }
    mesh.write_text(yaml.safe_dump_all(documents))
    metrics = tmp_path / "metrics.yaml"
    metrics.write_text(yaml.safe_dump(inputs.metrics_document()))
    output = io.StringIO()
    with redirect_stdout(output):
        code = main(
            [
                "explain",
                "--resources",
                str(resources),
                "--site",
                scoring.SITE,
                "--gateway",
                scoring.GATEWAY,
                "--now",
                "2026-07-29T12:00:00Z",
                "--metrics",
                str(metrics),
                "--json",
            ]
        )
    assert code == 0
    document: dict[str, Any] = json.loads(output.getvalue())
    return document


# --- the static site ------------------------------------------------------------------


def test_every_page_and_asset_referenced_exists(built: Path) -> None:
    pages = ["index.html", *(chapter.page for chapter in CHAPTERS)]
    for page in pages:
        content = (built / page).read_bytes()
        references = {match.decode() for match in REFERENCE.findall(content)}
        assert references, page
        for reference in references:
            assert (built / reference).is_file(), f"{page} refers to missing {reference}"
        for chapter in CHAPTERS:
            assert f'href="{chapter.page}"'.encode() in content, page
    runs = embedded(built / "data/swim-index.js")["runs"]
    assert len(runs) == len(swim.SIZES) * len(swim.LOSSES) * 2
    for path in runs.values():
        assert (built / path).is_file(), path


def test_nothing_is_fetched_from_elsewhere(built: Path) -> None:
    files = [path for path in built.rglob("*") if path.is_file()]
    assert len(files) > 30
    for path in files:
        content = path.read_bytes()
        for pattern in (rb"https?://", rb"""["'(]//[a-z]""", rb"@import"):
            assert not re.search(pattern, content, re.IGNORECASE), f"{path}: {pattern!r}"
        if path.suffix == ".js":
            for call in re.findall(rb"fetch\(([^,)]+)", content):
                assert call.startswith(b'"api/'), f"{path} fetches {call!r}"


def test_the_swim_runs_are_the_simulators_records(built: Path) -> None:
    recorded = embedded(built / "data/swim-n8-loss5-crash.js")
    fresh = swim.record_trace(8, 0.05, True)
    assert recorded == json.loads(json.dumps(fresh))
    # The run shows what the chapter is about: the joiner spreads, the crash is
    # suspected, declared down and learned by every running node.
    assert len(fresh["join_learned"]["delays"]) == fresh["join_learned"]["observers"]
    assert [delay for delay, _ in fresh["join_learned_by"]] == pytest.approx(
        fresh["join_learned"]["delays"], abs=1e-6
    )
    assert any(entry[1] == swim.CRASHED_NODE for entry in fresh["suspicions"])
    assert any(entry[2] == swim.CRASHED_NODE for entry in fresh["declarations"])
    down = fresh["down_learned"]
    assert len(down["delays"]) == down["observers"] == fresh["nodes"] - 1
    assert all(row[swim.CRASHED_NODE] == -1 for row in fresh["known"][-5:])
    lossy = embedded(built / "data/swim-n16-loss20-nocrash.js")
    assert sum(lossy["counters"]["refutations"]) == len(lossy["refutations"]) > 0
    assert all(by is not None for _, _, _, by in lossy["refutations"])
    assert lossy["suspicions"] and all(entry[4] for entry in lossy["suspicions"])


def logged_messages(run: dict[str, Any]) -> list[tuple[Any, ...]]:
    """An embedded run's messages, frame after frame, as the simulator lists them."""
    kinds, fates = run["message_kinds"], run["message_fates"]
    flat = []
    for frame in run["messages"]:
        for sent_at, sender, to, kind, fate, *rest in frame:
            about = rest[0] if rest else None
            updates = [
                (subject, incarnation, swim.STATES[state])
                for subject, state, incarnation in (rest[1] if len(rest) > 1 else [])
            ]
            flat.append((sent_at, sender, to, kinds[kind], fates[fate], about, updates))
    return flat


def test_an_embedded_runs_messages_are_a_fresh_simulations(built: Path) -> None:
    """The same seed and steps, run straight through with the message log on from the
    start, log the messages the page shows, frame by frame, none left out."""
    run = embedded(built / "data/swim-n8-loss5-crash.js")
    assert run["messages_dropped"] == 0
    sim = Simulation(8, swim.SEED, loss=0.05, threads=1)
    start = sim.now
    sim.set_message_log(True, 1_000_000)
    sim.run_until(start + swim.JOIN_AFTER)
    joiner = sim.add_node()
    sim.join(joiner, [swim.SEED_NODE])
    sim.run_until(start + swim.CRASH_AFTER)
    sim.crash(swim.CRASHED_NODE)
    sim.run_until(start + swim.RUN_FOR)
    assert f"{sim.trace_hash():016x}" == run["trace_hash"]
    fresh = [
        (round(sent_at - start, 4), sender, to, kind, fate, about, updates)
        for sent_at, sender, to, kind, fate, _, about, updates in sim.messages()
    ]
    assert logged_messages(run) == fresh
    # What the chapter draws is in it: probes and their acks, indirect probes of the
    # crashed node through others that cannot reach it, lost messages, the joiner's
    # announce, and the suspicion and down news of the crashed node as updates.
    kinds = {kind for _, _, _, kind, _, _, _ in fresh}
    assert {"ping", "ack", "ping-req", "indirect-ping", "announce", "feed", "gossip"} <= kinds
    crash = swim.CRASH_AFTER
    assert any(
        kind == "ping-req" and about == swim.CRASHED_NODE and t > crash
        for t, _, _, kind, _, about, _ in fresh
    )
    assert any(
        kind == "indirect-ping" and to == swim.CRASHED_NODE and fate == "undeliverable"
        for _, _, to, kind, fate, _, _ in fresh
    )
    assert any(fate == "lost" for _, _, _, _, fate, _, _ in fresh)
    carried = {(s, state) for *_, updates in fresh for s, _, state in updates}
    assert {(swim.CRASHED_NODE, "suspect"), (swim.CRASHED_NODE, "down")} <= carried
    assert all(sender != swim.CRASHED_NODE for t, sender, *_ in fresh if t > crash)


def test_every_embedded_run_fits_its_message_log(site: Site) -> None:
    for name, content in site.files.items():
        if name.startswith("data/swim-n"):
            text = content.decode()
            run = json.loads(text[text.index("] = ") + 4 :].strip().removesuffix(";"))
            assert run["messages_dropped"] == 0, name
            assert len(run["messages"]) == len(run["times"]) == len(run["suspected"])


def test_the_crdt_tables_are_what_the_crdt_types_compute(built: Path) -> None:
    data = embedded(built / "data/crdt.js")
    components = data["components"]
    operations = {entry["id"]: entry for entry in data["operations"]}
    generator = random.Random(5)
    for _ in range(40):
        state = {name: {c: components[c]["start"] for c in components} for name in "ABC"}
        unused = list(operations)
        steps: list[tuple[str, ...]] = []
        for _ in range(generator.randrange(4, 24)):
            if unused and generator.random() < 0.45:
                operation = operations[unused.pop(generator.randrange(len(unused)))]
                place = state[operation["replica"]]
                component = operation["component"]
                place[component] = components[component]["apply"][
                    f"{place[component]}|{operation['id']}"
                ]
                steps.append(("op", operation["id"]))
            else:
                receiver, sender = generator.sample("ABC", 2)
                for component in components:
                    mine, theirs = state[receiver][component], state[sender][component]
                    if mine != theirs:
                        state[receiver][component] = components[component]["merge"][
                            f"{mine}|{theirs}"
                        ]
                steps.append(("merge", receiver, sender))
        from_tables = [
            {c: components[c]["values"][state[name][c]] for c in components} for name in "ABC"
        ]
        assert from_tables == crdt.replay(steps), steps


def test_add_wins_over_a_concurrent_remove() -> None:
    views = crdt.replay(
        [
            ("op", "A-add-llama"),
            ("merge", "B", "A"),
            ("op", "B-remove-llama"),
            ("op", "C-add-llama"),
            ("merge", "A", "B"),
            ("merge", "A", "C"),
            ("merge", "B", "A"),
            ("merge", "C", "A"),
        ]
    )
    assert views[0] == views[1] == views[2]
    elements = views[0]["set"]["elements"]
    assert elements == [{"element": "llama", "dots": [["C", 1]]}]
    assert views[0]["set"]["context"] == {"A": 1, "C": 1}


def test_a_scoring_table_row_is_what_grid_explain_prints(built: Path, tmp_path: Path) -> None:
    data = embedded(built / "data/scoring.js")
    constant = {key: data[key] for key in ("scope", "now", "site")}
    for key, value in (("vllm-hub-a.queueDepth", 56), ("weight.locality", 0)):
        slider = data["sliders"][key]
        stored = data["documents"][slider["documents"][slider["stops"].index(value)]]
        inputs = scoring.base_inputs().changed(key, value)
        printed = explain_with_cli(tmp_path / key, inputs)
        printed.pop("schema_version")
        assert {**constant, **stored} == printed
    base = data["documents"][data["base"]]
    assert base["candidates"][0]["provider"] == "vllm-hub-a"


def test_past_the_queue_threshold_a_provider_goes_behind_the_others() -> None:
    threshold = scoring.thresholds()["queue_threshold"]
    below = scoring.explain_inputs(
        scoring.base_inputs().changed("vllm-hub-a.queueDepth", threshold - 0.4)
    )
    above = scoring.explain_inputs(
        scoring.base_inputs().changed("vllm-hub-a.queueDepth", threshold + 0.6)
    )
    # Just below, only its score falls: it stays among the same-site candidates.
    entry = next(c for c in below["candidates"] if c["provider"] == "vllm-hub-a")
    assert (entry["rank"], entry["admission"]) == (1, "new_and_existing")
    last = above["candidates"][-1]
    assert (last["provider"], last["admission"]) == ("vllm-hub-a", "existing_only")


def test_build_reports_the_weight_of_each_chapter(site: Site) -> None:
    for chapter in CHAPTERS:
        weight = site.chapter_bytes(chapter)
        assert len(site.files[chapter.page]) < weight < 2_000_000
    assert site.build_seconds > 0


# --- the command ----------------------------------------------------------------------


def test_out_that_cannot_be_written_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert main(["booklet", "--out", str(blocker / "site")]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1
    assert captured.err.startswith(f"grid: cannot write the booklet to {blocker / 'site'}: ")


def test_the_command_needs_out_or_serve_and_a_usable_listen(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["booklet"]) == 2
    assert "--out DIR or --serve" in capsys.readouterr().err
    assert main(["booklet", "--serve", "--listen", "nowhere"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("grid: --listen 'nowhere': ") and err.count("\n") == 1


def test_the_command_writes_the_site(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "new" / "booklet"
    assert main(["booklet", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert f"open {out / 'index.html'}" in printed
    for chapter in CHAPTERS:
        assert (out / chapter.page).is_file()
        assert chapter.page in printed


# --- served ---------------------------------------------------------------------------


@pytest.fixture
async def served() -> AsyncIterator[str]:
    endpoint = Endpoint("127.0.0.1", 0, booklet_routes("/docs/booklet"), error=ConfigError)
    await endpoint.start()
    try:
        yield f"http://{endpoint.address}/docs/booklet"
    finally:
        await endpoint.stop()


async def test_served_pages_and_assets(served: str, site: Site) -> None:
    async with aiohttp.ClientSession() as session:
        async with session.get(served, allow_redirects=False) as response:
            assert response.status == 302
            assert response.headers["Location"] == "/docs/booklet/"
        async with session.get(served + "/") as response:
            assert response.status == 200
            assert await response.read() == site.files["index.html"]
            assert response.headers["Content-Security-Policy"] == CONTENT_SECURITY_POLICY
        for name, kind in (
            ("scoring.html", "text/html"),
            ("swim.js", "text/javascript"),
            ("booklet.css", "text/css"),
            ("data/swim-n5-loss0-crash.js", "text/javascript"),
            ("favicon.png", "image/png"),
        ):
            async with session.get(f"{served}/{name}") as response:
                assert response.status == 200, name
                assert response.content_type == kind
                assert await response.read() == site.files[name]
        async with session.get(f"{served}/../secrets.txt") as response:
            assert response.status == 404
        async with session.get(f"{served}/nothing.html") as response:
            assert response.status == 404
            assert "nothing.html" in await response.text()


async def test_the_api_scores_any_combination(served: str, tmp_path: Path) -> None:
    query = {
        "vllm-hub-a.queueDepth": "60",
        "vllm-east.p99LatencyMs": "250",
        "weight.cost": "7.5",
        "weight.locality": "0",
    }
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"{served}/api/scoring", params=query) as response,
    ):
        assert response.status == 200
        answer = await response.json()
    inputs = scoring.parse_query(query)
    printed = explain_with_cli(tmp_path, inputs)
    assert answer["explain"] == printed
    assert answer["inputs"]["signals"]["vllm-hub-a"]["queueDepth"] == 60
    providers = [c["provider"] for c in printed["candidates"]]
    assert providers[-1] == "vllm-hub-a"


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("vllm-hub-a.queueDepth=129", "vllm-hub-a.queueDepth must be a number from 0 to 128"),
        ("vllm-hub-a.queueDepth=-1", "must be a number from 0 to 128, got -1"),
        ("weight.cost=11", "weight.cost must be a number from 0 to 10, got 11"),
        ("weight.cost=inf", "weight.cost must be a number from 0 to 10, got inf"),
        ("vllm-nowhere.queueDepth=3", "unknown provider 'vllm-nowhere' (providers: vllm-hub-a"),
        ("vllm-hub-a.temperature=3", "unknown signal 'temperature' (signals: queueDepth"),
        ("weight.speed=3", "unknown weight 'speed' (weights: locality"),
        ("vllm-hub-a.queueDepth=lots", "vllm-hub-a.queueDepth must be a number, got 'lots'"),
        ("garbage", "unknown parameter 'garbage'"),
        ("weight.cost=1&weight.cost=2", "'weight.cost' is given more than once"),
    ],
)
async def test_the_api_refuses_bad_input_with_the_reason(
    served: str, query: str, message: str
) -> None:
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"{served}/api/scoring?{query}") as response,
    ):
        assert response.status == 400
        answer = await response.json()
    assert message in answer["error"]
