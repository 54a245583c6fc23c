/* SWIM chapter: replays a run recorded from grid._native.Simulation. */
"use strict";

(function () {
  const data = window.GRID_BOOKLET.swim;
  const $ = (id) => document.getElementById(id);
  const figure = $("swim-figure");
  const view = { run: null, frame: 0, timer: null };
  const SIZE = 560, CENTER = 280, RADIUS = 215;

  function fill(select, values, label, selected) {
    for (const value of values) {
      select.append(Booklet.el("option", { value: String(value), selected: value === selected }, label(value)));
    }
  }
  fill($("swim-n"), data.sizes, (n) => String(n), 8);
  fill($("swim-loss"), data.losses, (l) => Math.round(l * 100) + " %", 0.05);

  function key() {
    const loss = Math.round(Number($("swim-loss").value) * 100);
    return "n" + $("swim-n").value + "-loss" + loss + "-" + ($("swim-crash").checked ? "crash" : "nocrash");
  }

  async function choose() {
    stop();
    const wanted = key();
    await Booklet.loadScript(data.runs[wanted]);
    view.run = window.GRID_BOOKLET.swimRuns[wanted];
    view.frame = 0;
    $("swim-time").max = String(view.run.times.length - 1);
    describeSettings();
    buildLog();
    draw();
  }

  function position(node, count) {
    const angle = -Math.PI / 2 + (2 * Math.PI * node) / count;
    return [CENTER + RADIUS * Math.cos(angle), CENTER + RADIUS * Math.sin(angle)];
  }

  function seconds(absolute) {
    return absolute - view.run.start;
  }

  /* Events of the run: what the simulator recorded, in time order. */
  function events() {
    const run = view.run;
    const list = [];
    list.push({ t: seconds(run.join_at), kind: "join", text: "node " + run.joiner + " joins through node " + run.seed_node });
    if (run.crash_at !== null) {
      list.push({ t: seconds(run.crash_at), kind: "crash", text: "node " + run.crashed + " crashes" });
    }
    for (const [at, target, incarnation, by, alive] of run.suspicions) {
      list.push({
        t: seconds(at), kind: "suspect",
        text: "node " + by + " suspects node " + target + " (incarnation " + incarnation + ")" +
          (alive ? ": it is alive, a lost message" : ": it has crashed"),
      });
    }
    for (const [at, by, target, falsePositive] of run.declarations) {
      list.push({
        t: seconds(at), kind: "down",
        text: "node " + by + " declares node " + target + " down" + (falsePositive ? " (it was alive)" : ""),
      });
    }
    run.times.forEach((t, frame) => {
      const refuted = run.counters.refutations[frame];
      if (refuted > 0) {
        list.push({ t: t, kind: "refute", text: refuted + " refutation" + (refuted > 1 ? "s" : "") + " (a suspected node raised its incarnation)" });
      }
      const failed = run.counters.probes_failed[frame];
      if (failed > 0) {
        list.push({ t: t, kind: "probe-failed", text: failed + " probe" + (failed > 1 ? "s" : "") + " failed: no direct or indirect answer in time" });
      }
    });
    const join = run.join_learned;
    if (join.delays.length) {
      list.push({
        t: seconds(run.join_at) + join.delays[join.delays.length - 1], kind: "learned",
        text: join.delays.length + " of " + join.observers + " nodes know the joiner (the last after " + Booklet.fixed(join.delays[join.delays.length - 1] * 1000, 0) + " ms)",
      });
    }
    const down = run.down_learned;
    if (down && down.delays.length) {
      list.push({
        t: seconds(run.crash_at) + down.delays[down.delays.length - 1], kind: "learned",
        text: down.delays.length + " of " + down.observers + " nodes know node " + run.crashed + " is down (the last after " + Booklet.fixed(down.delays[down.delays.length - 1], 1) + " s)",
      });
    }
    list.sort((a, b) => a.t - b.t);
    return list;
  }

  function buildLog() {
    const log = $("swim-log");
    log.replaceChildren(...events().map((event) =>
      Booklet.el("li", { "data-t": event.t, "data-kind": event.kind, class: "event-" + event.kind },
        Booklet.el("span", { class: "mono" }, Booklet.fixed(event.t, 2) + " s "), event.text)));
  }

  function describeSettings() {
    const run = view.run, s = run.settings;
    $("swim-settings").textContent =
      "Run " + run.key + ": " + run.n + " nodes and a joiner, seed " + run.seed +
      ", probe interval " + s.probe_interval + " s, suspicion timeout " + s.suspicion_timeout +
      " s, gossip to " + s.gossip_nodes + " nodes every " + s.gossip_interval + " s, delay " +
      s.delay * 1000 + " ms + " + s.jitter_kind + " jitter " + s.jitter * 1000 + " ms, loss " +
      Math.round(s.loss * 100) + " %; trace fingerprint " + run.trace_hash + ".";
  }

  function sumUpTo(list, frame) {
    let total = 0;
    for (let k = 0; k <= frame; k++) total += list[k];
    return total;
  }

  function nodeSum(rows, frame) {
    return rows[frame].reduce((a, b) => a + b, 0);
  }

  function draw() {
    const run = view.run, frame = view.frame, t = run.times[frame];
    const previous = frame > 0 ? run.times[frame - 1] : 0;
    const probe = run.settings.probe_interval;
    $("swim-time").value = String(frame);
    figure.setAttribute("data-frame", String(frame));
    figure.setAttribute("data-time", String(t));
    figure.setAttribute("data-run", run.key);
    const parts = [];
    const count = run.nodes;
    const suspectedNow = new Set();
    const declaredDown = new Set();
    for (const [at, by, target] of run.declarations) if (seconds(at) <= t) declaredDown.add(target);
    for (const [at, target, , by] of run.suspicions) {
      const age = t - seconds(at);
      if (age >= 0 && age < probe && !declaredDown.has(target)) suspectedNow.add(target);
    }
    // Arrows: fresh suspicions and declarations, for one probe interval.
    for (const [at, target, incarnation, by] of run.suspicions) {
      const age = t - seconds(at);
      if (age < 0 || age >= probe) continue;
      const [x1, y1] = position(by, count), [x2, y2] = position(target, count);
      parts.push(Booklet.svg("line", { x1, y1, x2, y2, class: "suspicion", stroke: "#e0a100", "stroke-width": 3, "stroke-dasharray": "6 4", opacity: 1 - age / probe }));
    }
    for (const [at, by, target] of run.declarations) {
      const age = t - seconds(at);
      if (age < 0 || age >= probe) continue;
      const [x1, y1] = position(by, count), [x2, y2] = position(target, count);
      parts.push(Booklet.svg("line", { x1, y1, x2, y2, class: "declaration", stroke: "#c8423b", "stroke-width": 4, opacity: 1 - age / probe }));
    }
    for (let node = 0; node < count; node++) {
      const [x, y] = position(node, count);
      const known = run.known[frame][node];
      const joinerAbsent = node === run.joiner && t < seconds(run.join_at) + 1e-9 && known < 0;
      let state = "running";
      if (joinerAbsent) state = "absent";
      else if (known < 0) state = "crashed";
      else if (declaredDown.has(node)) state = "declared-down";
      else if (suspectedNow.has(node)) state = "suspected";
      const colour = { running: "#2e9d5b", absent: "#ffffff", crashed: "#c8423b", "declared-down": "#c8423b", suspected: "#e0a100" }[state];
      const sent = run.sent[frame][node], lost = run.lost[frame][node];
      const group = Booklet.svg("g", { class: "node " + state, "data-node": node, "data-known": known, "data-state": state });
      if (sent > 0 && state !== "absent") {
        group.append(Booklet.svg("circle", { cx: x, cy: y, r: 22 + 5 * Math.sqrt(sent), fill: "#2f6fd6", opacity: 0.16, class: "halo" }));
      }
      group.append(Booklet.svg("circle", { cx: x, cy: y, r: 20, fill: colour, stroke: state === "absent" ? "#9aa6ba" : "#18202e", "stroke-width": 1.5, "stroke-dasharray": state === "absent" ? "4 3" : null }));
      group.append(Booklet.svg("text", { x, y: y + 5, "text-anchor": "middle", "font-size": 15, "font-weight": 700, fill: state === "absent" ? "#9aa6ba" : "#fff", text: String(node) }));
      group.append(Booklet.svg("text", { x, y: y + 38, "text-anchor": "middle", "font-size": 12, fill: "#5b6474", text: known >= 0 ? "knows " + known : state === "absent" ? "not yet" : "stopped" }));
      for (let k = 0; k < lost; k++) {
        group.append(Booklet.svg("text", { x: x + 22 + 9 * k, y: y - 16, "font-size": 14, "font-weight": 700, fill: "#8a3fd1", class: "lost", text: "×" }));
      }
      parts.push(group);
    }
    parts.push(Booklet.svg("text", { x: CENTER, y: CENTER - 6, "text-anchor": "middle", "font-size": 30, "font-weight": 700, fill: "#18202e", text: Booklet.fixed(t, 2) + " s" }));
    parts.push(Booklet.svg("text", { x: CENTER, y: CENTER + 20, "text-anchor": "middle", "font-size": 13, fill: "#5b6474", text: "frame " + (frame + 1) + " of " + run.times.length + " · " + Booklet.fixed(t - previous, 2) + " s" }));
    figure.replaceChildren(...parts);
    drawStats(frame);
    for (const item of $("swim-log").children) {
      const at = Number(item.getAttribute("data-t"));
      item.classList.toggle("future", at > t + 1e-9);
      item.classList.toggle("current", at > previous + 1e-9 && at <= t + 1e-9);
    }
    const log = $("swim-log"), last = [...log.children].filter((item) => !item.classList.contains("future")).pop();
    if (last) log.scrollTop = last.offsetTop - log.offsetTop - log.clientHeight + last.clientHeight + 8;
    drawCurve(t);
  }

  function drawStats(frame) {
    const run = view.run;
    const rows = [
      ["messages this frame", nodeSum(run.sent, frame) + " sent, " + nodeSum(run.received, frame) + " received, " + nodeSum(run.lost, frame) + " lost"],
      ["messages so far", run.sent.slice(0, frame + 1).reduce((a, row) => a + row.reduce((x, y) => x + y, 0), 0) + " sent, " + run.lost.slice(0, frame + 1).reduce((a, row) => a + row.reduce((x, y) => x + y, 0), 0) + " lost"],
      ["probes failed so far", sumUpTo(run.counters.probes_failed, frame)],
      ["suspicion notices so far", sumUpTo(run.counters.suspicion_notices, frame)],
      ["refutations so far", sumUpTo(run.counters.refutations, frame)],
      ["late answers so far", sumUpTo(run.counters.late_answers, frame)],
    ];
    $("swim-stats").replaceChildren(...rows.map(([name, value]) =>
      Booklet.el("tr", {}, Booklet.el("td", { class: "muted" }, name), Booklet.el("td", { "data-stat": name }, String(value)))));
  }

  function drawCurve(t) {
    const run = view.run, svg = $("swim-curve");
    const W = 440, H = 170, left = 40, right = 12, top = 12, bottom = 30;
    const series = [["joiner known", "#2f6fd6", run.join_learned, seconds(run.join_at)]];
    if (run.down_learned) series.push(["crash known", "#c8423b", run.down_learned, seconds(run.crash_at)]);
    const end = run.times[run.times.length - 1];
    const x = (s) => left + ((W - left - right) * s) / end;
    const y = (share) => H - bottom - (H - top - bottom) * share;
    const parts = [
      Booklet.svg("line", { x1: left, y1: y(0), x2: W - right, y2: y(0), stroke: "#9aa6ba" }),
      Booklet.svg("line", { x1: left, y1: y(1), x2: W - right, y2: y(1), stroke: "#d5dae3" }),
      Booklet.svg("text", { x: left - 6, y: y(1) + 4, "text-anchor": "end", "font-size": 11, text: "all" }),
      Booklet.svg("text", { x: left - 6, y: y(0) + 4, "text-anchor": "end", "font-size": 11, text: "0" }),
      Booklet.svg("text", { x: W - right, y: H - 8, "text-anchor": "end", "font-size": 11, text: end + " s" }),
      Booklet.svg("text", { x: left, y: H - 8, "font-size": 11, text: "0 s" }),
    ];
    series.forEach(([label, colour, learned, since], index) => {
      let points = x(since) + "," + y(0);
      learned.delays.forEach((delay, k) => {
        points += " " + x(since + delay) + "," + y(k / learned.observers) + " " + x(since + delay) + "," + y((k + 1) / learned.observers);
      });
      points += " " + x(end) + "," + y(learned.delays.length / learned.observers);
      parts.push(Booklet.svg("polyline", { points, fill: "none", stroke: colour, "stroke-width": 2 }));
      parts.push(Booklet.svg("text", { x: left + 8, y: top + 14 + 14 * index, "font-size": 11, fill: colour, text: label }));
    });
    parts.push(Booklet.svg("line", { x1: x(t), y1: top, x2: x(t), y2: y(0), stroke: "#18202e", "stroke-dasharray": "3 3" }));
    svg.replaceChildren(...parts);
  }

  function go(frame) {
    const last = view.run.times.length - 1;
    view.frame = Math.max(0, Math.min(last, frame));
    draw();
  }

  function stop() {
    if (view.timer !== null) clearInterval(view.timer);
    view.timer = null;
    $("swim-play").textContent = "▶ play";
  }

  function play() {
    if (view.timer !== null) return stop();
    if (view.frame >= view.run.times.length - 1) go(0);
    $("swim-play").textContent = "⏸ pause";
    view.timer = setInterval(() => {
      if (view.frame >= view.run.times.length - 1) return stop();
      go(view.frame + 1);
    }, 240 / Number($("swim-speed").value));
  }

  for (const id of ["swim-n", "swim-loss", "swim-crash"]) $(id).addEventListener("change", choose);
  $("swim-step").addEventListener("click", () => { stop(); go(view.frame + 1); });
  $("swim-back").addEventListener("click", () => { stop(); go(view.frame - 1); });
  $("swim-reset").addEventListener("click", () => { stop(); go(0); });
  $("swim-end").addEventListener("click", () => { stop(); go(view.run.times.length - 1); });
  $("swim-play").addEventListener("click", play);
  $("swim-time").addEventListener("input", (event) => { stop(); go(Number(event.target.value)); });
  choose();
})();
