/* SWIM chapter: replays a run recorded from grid._native.Simulation, message by message.
   Nothing here simulates: every arrow, state and event is a recorded one. */
"use strict";

(function () {
  const data = window.GRID_BOOKLET.swim;
  const $ = (id) => document.getElementById(id);
  const figure = $("swim-figure");
  const view = { run: null, frame: 0, timer: null, events: [] };
  const CENTER = 280, RADIUS = 215, NODE_R = 20;
  /* How each message kind is drawn. */
  const GROUPS = {
    ping: "probe", ack: "probe",
    "ping-req": "indirect", "indirect-ping": "indirect", "indirect-ack": "indirect", "forwarded-ack": "indirect",
    gossip: "gossip", broadcast: "gossip", "turn-undead": "gossip",
    announce: "join", feed: "join",
    "sync-request": "sync", "sync-response": "sync",
  };
  const STATES = ["alive", "suspect", "down", "left"];

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
    view.events = events();
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

  /* A recorded message, with names instead of the run's indices. */
  function message(entry) {
    const run = view.run;
    const [t, from, to, kind, fate, about, updates] = entry;
    return {
      t, from, to, kind: run.message_kinds[kind], fate: run.message_fates[fate],
      about: about === undefined ? null : about,
      updates: (updates || []).map(([subject, state, incarnation]) => ({ subject, state: STATES[state], incarnation })),
    };
  }

  /* Lifeguard's suspicion notice is a ping that carries the recipient's own suspicion. */
  function group(m) {
    if (m.kind === "ping" && m.updates.some((u) => u.subject === m.to && u.state === "suspect")) return "notice";
    return GROUPS[m.kind] || "other";
  }

  function describeMessage(m) {
    let text = Booklet.fixed(m.t, 3) + " s  node " + m.from + " → " + (m.to === null ? "an address that is no node" : "node " + m.to) + "  " + m.kind;
    if (m.about !== null) text += " about node " + m.about;
    if (group(m) === "notice") text += " (suspicion notice)";
    if (m.fate !== "delivered") text += " · " + (m.fate === "undeliverable" ? "not delivered: the node has stopped" : m.fate);
    if (m.updates.length) {
      text += " · carries " + m.updates.map((u) => u.subject + " " + u.state + (u.incarnation ? " #" + u.incarnation : "")).join(", ");
    }
    return text;
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
        t: seconds(at), kind: "suspect", node: target,
        text: "node " + by + " suspects node " + target + " (incarnation " + incarnation + ")" +
          (alive ? ": it is alive, a lost message" : ": it has crashed"),
      });
    }
    for (const [at, node, incarnation, by] of run.refutations) {
      list.push({
        t: seconds(at), kind: "refute", node,
        text: "node " + node + " refutes: incarnation " + incarnation +
          (by === null ? "" : ", answering node " + by + "'s suspicion"),
      });
    }
    for (const [at, by, target, falsePositive] of run.declarations) {
      list.push({
        t: seconds(at), kind: "down", node: target,
        text: "node " + by + " declares node " + target + " down" + (falsePositive ? " (it was alive)" : ""),
      });
    }
    const since = seconds(run.join_at);
    run.join_learned_by.forEach(([delay, observer], k) => {
      list.push({
        t: since + delay, kind: "learned-join", node: observer,
        text: "node " + observer + " learns node " + run.joiner + " joined (" + (k + 1) + " of " + run.join_learned.observers + ", after " + Booklet.fixed(delay * 1000, 0) + " ms)",
      });
    });
    if (run.down_learned_by) {
      run.down_learned_by.forEach(([delay, observer], k) => {
        list.push({
          t: seconds(run.crash_at) + delay, kind: "learned-down", node: observer,
          text: "node " + observer + " learns node " + run.crashed + " is down (" + (k + 1) + " of " + run.down_learned.observers + ", " + Booklet.fixed(delay, 1) + " s after the crash)",
        });
      });
    }
    run.times.forEach((t, frame) => {
      const failed = run.counters.probes_failed[frame];
      if (failed > 0) {
        list.push({ t: t, kind: "probe-failed", text: failed + " probe" + (failed > 1 ? "s" : "") + " failed: no direct or indirect answer in time" });
      }
    });
    list.sort((a, b) => a.t - b.t);
    return list;
  }

  function buildLog() {
    const log = $("swim-log");
    log.replaceChildren(...view.events.map((event) =>
      Booklet.el("li", { "data-t": event.t, "data-kind": event.kind, "data-node": event.node, class: "event-" + event.kind },
        Booklet.el("span", { class: "mono" }, Booklet.fixed(event.t, 2) + " s "), event.text)));
  }

  function describeSettings() {
    const run = view.run, s = run.settings;
    const total = run.messages.reduce((sum, frame) => sum + frame.length, 0);
    $("swim-settings").textContent =
      "Run " + run.key + ": " + run.n + " nodes and a joiner, seed " + run.seed +
      ", probe interval " + s.probe_interval + " s, suspicion timeout " + s.suspicion_timeout +
      " s, gossip to " + s.gossip_nodes + " nodes every " + s.gossip_interval + " s, delay " +
      s.delay * 1000 + " ms + " + s.jitter_kind + " jitter " + s.jitter * 1000 + " ms, loss " +
      Math.round(s.loss * 100) + " %; " + total + " messages logged" +
      (run.messages_dropped ? " (" + run.messages_dropped + " more left out: the log's limit)" : "") +
      "; trace fingerprint " + run.trace_hash + ".";
  }

  function sumUpTo(list, frame) {
    let total = 0;
    for (let k = 0; k <= frame; k++) total += list[k];
    return total;
  }

  /* Where an arrow leaves and meets the node circles, bent sideways so that the two
     directions of a pair, and repeated messages, stay apart. */
  function arrowPath(from, to, count, lane) {
    const [x1, y1] = position(from, count), [x2, y2] = position(to, count);
    const dx = x2 - x1, dy = y2 - y1, length = Math.hypot(dx, dy) || 1;
    const ux = dx / length, uy = dy / length;
    const bend = 14 + 9 * lane;
    const mx = (x1 + x2) / 2 - uy * bend, my = (y1 + y2) / 2 + ux * bend;
    const gap = NODE_R + 3;
    const sx = x1 + ux * gap - uy * 6, sy = y1 + uy * gap + ux * 6;
    const ex = x2 - ux * (gap + 2) - uy * 6, ey = y2 - uy * (gap + 2) + ux * 6;
    return { d: "M" + sx + "," + sy + " Q" + mx + "," + my + " " + ex + "," + ey, mid: [(sx + 2 * mx + ex) / 4, (sy + 2 * my + ey) / 4] };
  }

  function markers() {
    const defs = Booklet.svg("defs", {});
    for (const name of ["probe", "indirect", "notice", "gossip", "join", "sync", "other", "lost", "undeliverable"]) {
      defs.append(Booklet.svg("marker", { id: "swim-head-" + name, viewBox: "0 0 10 10", refX: 9, refY: 5, markerWidth: 7, markerHeight: 7, orient: "auto-start-reverse", class: "head " + name },
        Booklet.svg("path", { d: "M0,0 L10,5 L0,10 z" })));
    }
    return defs;
  }

  function frameMessages(frame) {
    return view.run.messages[frame].map(message);
  }

  function draw() {
    const run = view.run, frame = view.frame, t = run.times[frame];
    const previous = frame > 0 ? run.times[frame - 1] : 0;
    $("swim-time").value = String(frame);
    figure.setAttribute("data-frame", String(frame));
    figure.setAttribute("data-time", String(t));
    figure.setAttribute("data-run", run.key);
    const count = run.nodes;
    const parts = [markers()];
    const suspectedBy = new Map();
    for (const [observer, member] of run.suspected[frame]) {
      suspectedBy.set(member, (suspectedBy.get(member) || 0) + 1);
    }
    const declared = new Set();
    for (const [at, , target] of run.declarations) if (seconds(at) <= t + 1e-9) declared.add(target);
    const knowsJoiner = new Set(run.join_learned_by.filter(([delay]) => seconds(run.join_at) + delay <= t + 1e-9).map(([, node]) => node));
    const knowsCrash = new Set((run.down_learned_by || []).filter(([delay]) => seconds(run.crash_at) + delay <= t + 1e-9).map(([, node]) => node));

    const messages = frameMessages(frame);
    const lanes = new Map();
    const arrows = Booklet.svg("g", { class: "messages" });
    for (const m of messages) {
      if (m.to === null || m.to >= count) continue;
      const pair = m.from + ">" + m.to;
      const lane = lanes.get(pair) || 0;
      lanes.set(pair, lane + 1);
      const { d, mid } = arrowPath(m.from, m.to, count, Math.min(lane, 6));
      const style = group(m);
      const head = m.fate === "delivered" ? style : m.fate === "lost" ? "lost" : "undeliverable";
      const arrow = Booklet.svg("g", {
        class: "msg " + style + " fate-" + m.fate, "data-kind": m.kind, "data-group": style,
        "data-from": m.from, "data-to": m.to, "data-fate": m.fate, "data-about": m.about,
      }, Booklet.svg("title", { text: describeMessage(m) }),
      Booklet.svg("path", { d, class: "line", "marker-end": "url(#swim-head-" + head + ")" }));
      if (m.fate !== "delivered") {
        arrow.append(Booklet.svg("text", { x: mid[0], y: mid[1] + 5, "text-anchor": "middle", class: "cross", text: "×" }));
      }
      arrows.append(arrow);
    }
    parts.push(arrows);

    for (let node = 0; node < count; node++) {
      const [x, y] = position(node, count);
      const known = run.known[frame][node];
      const joinerAbsent = node === run.joiner && t < seconds(run.join_at) + 1e-9 && known < 0;
      let state = "running";
      if (joinerAbsent) state = "absent";
      else if (known < 0) state = "crashed";
      else if (suspectedBy.has(node)) state = "suspected";
      const group = Booklet.svg("g", {
        class: "node " + state, "data-node": node, "data-known": known, "data-state": state,
        "data-suspected-by": suspectedBy.get(node) || 0, "data-declared": declared.has(node) ? "yes" : "no",
      });
      if (declared.has(node)) group.append(Booklet.svg("circle", { cx: x, cy: y, r: NODE_R + 6, class: "declared-ring" }));
      group.append(Booklet.svg("circle", { cx: x, cy: y, r: NODE_R, class: "body" }));
      group.append(Booklet.svg("text", { x, y: y + 5, "text-anchor": "middle", class: "label", text: String(node) }));
      let caption = known >= 0 ? "knows " + known : state === "absent" ? "not yet" : "stopped";
      if (suspectedBy.has(node)) caption += " · suspect to " + suspectedBy.get(node);
      group.append(Booklet.svg("text", { x, y: y + 38, "text-anchor": "middle", class: "caption", text: caption }));
      if (knowsJoiner.has(node)) group.append(Booklet.svg("circle", { cx: x - 15, cy: y - 16, r: 5, class: "knows-joiner" }));
      if (knowsCrash.has(node)) group.append(Booklet.svg("circle", { cx: x + 15, cy: y - 16, r: 5, class: "knows-crash" }));
      parts.push(group);
    }
    parts.push(Booklet.svg("text", { x: CENTER, y: CENTER - 6, "text-anchor": "middle", class: "clock", text: Booklet.fixed(t, 2) + " s" }));
    parts.push(Booklet.svg("text", { x: CENTER, y: CENTER + 20, "text-anchor": "middle", class: "caption", text: "frame " + (frame + 1) + " of " + run.times.length + " · " + Booklet.fixed(t - previous, 2) + " s · " + messages.length + (messages.length === 1 ? " message" : " messages") }));
    figure.replaceChildren(...parts);

    $("swim-messages").replaceChildren(...messages.map((m) =>
      Booklet.el("li", { class: "msg-" + group(m) + " fate-" + m.fate, "data-kind": m.kind, "data-from": m.from, "data-to": m.to, "data-fate": m.fate, "data-about": m.about }, describeMessage(m))));
    drawStats(frame, messages);
    for (const item of $("swim-log").children) {
      const at = Number(item.getAttribute("data-t"));
      item.classList.toggle("future", at > t + 1e-9);
      item.classList.toggle("current", at > previous + 1e-9 && at <= t + 1e-9);
    }
    const log = $("swim-log"), last = [...log.children].filter((item) => !item.classList.contains("future")).pop();
    if (last) log.scrollTop = last.offsetTop - log.offsetTop - log.clientHeight + last.clientHeight + 8;
    drawCurve(t);
  }

  function drawStats(frame, messages) {
    const run = view.run;
    const fates = (list) => {
      const tally = { delivered: 0, lost: 0, undeliverable: 0, cut: 0 };
      for (const m of list) tally[m.fate] += 1;
      return list.length + " sent: " + tally.delivered + " delivered, " + tally.lost + " lost, " + tally.undeliverable + " to a stopped node";
    };
    let sent = 0, lost = 0;
    for (let k = 0; k <= frame; k++) {
      for (const entry of run.messages[k]) {
        sent += 1;
        if (run.message_fates[entry[4]] === "lost") lost += 1;
      }
    }
    const rows = [
      ["messages this frame", fates(messages)],
      ["messages so far", sent + " sent, " + lost + " lost"],
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
    }, 400 / Number($("swim-speed").value));
  }

  for (const id of ["swim-n", "swim-loss", "swim-crash"]) $(id).addEventListener("change", choose);
  $("swim-speed").addEventListener("change", () => { if (view.timer !== null) { stop(); play(); } });
  $("swim-step").addEventListener("click", () => { stop(); go(view.frame + 1); });
  $("swim-back").addEventListener("click", () => { stop(); go(view.frame - 1); });
  $("swim-reset").addEventListener("click", () => { stop(); go(0); });
  $("swim-end").addEventListener("click", () => { stop(); go(view.run.times.length - 1); });
  $("swim-play").addEventListener("click", play);
  $("swim-time").addEventListener("input", (event) => { stop(); go(Number(event.target.value)); });
  choose();
})();
