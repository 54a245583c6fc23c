/* Scoring chapter: shows explanations computed by Grid's scoring pipeline, from the
   served booklet's API or, opened from a file, from tables computed at build time. */
"use strict";

(function () {
  const data = window.GRID_BOOKLET.scoring;
  const $ = (id) => document.getElementById(id);
  const keys = Object.keys(data.sliders);
  const values = {};
  const inputs = {};
  let live = false, sequence = 0, timer = null;
  const SIGNAL_LABELS = {
    queueDepth: "queue depth", kvCacheUtilization: "KV cache used",
    prefixCacheHitRatio: "prefix hit ratio", p99LatencyMs: "p99 latency ms",
  };

  function format(key, value) {
    const step = data.sliders[key].step;
    return step < 1 ? Number(value).toFixed(2) : String(Number(value));
  }

  function slider(key, label) {
    const spec = data.sliders[key];
    const input = Booklet.el("input", {
      type: "range", min: spec.low, max: spec.high, step: spec.step, value: spec.value,
      "data-key": key, "aria-label": key,
    });
    const output = Booklet.el("output", { "data-for": key }, format(key, spec.value));
    input.addEventListener("input", () => moved(key));
    inputs[key] = { input, output };
    values[key] = spec.value;
    return Booklet.el("label", { class: "slider" }, Booklet.el("span", {}, label), input, output);
  }

  function build() {
    const weights = keys.filter((key) => key.startsWith("weight."));
    const weightCard = Booklet.el("div", { class: "panel", id: "scoring-weights" },
      Booklet.el("h2", {}, "weights"), ...weights.map((key) => slider(key, key.slice(7).replace("_", " "))));
    const providers = [...new Set(keys.filter((key) => !key.startsWith("weight.")).map((key) => key.slice(0, key.lastIndexOf("."))))];
    $("scoring-providers").replaceChildren(weightCard, ...providers.map((provider) =>
      Booklet.el("div", { class: "panel", "data-provider-card": provider },
        Booklet.el("h2", {}, provider), Booklet.el("div", { class: "muted", "data-provider-place": provider }),
        ...keys.filter((key) => key.startsWith(provider + ".")).map((key) => slider(key, SIGNAL_LABELS[key.slice(provider.length + 1)])))));
    $("scoring-thresholds").textContent = "Admission: past a queue depth of " + data.queue_threshold +
      " requests or a KV cache " + Math.round(data.kv_threshold * 100) + " % full, a provider takes existing sessions only. " +
      "Locality and cost follow from where a provider sits and its price, not from what it reports.";
  }

  function nearestStop(key, value) {
    const stops = data.sliders[key].stops;
    let best = 0;
    stops.forEach((stop, index) => { if (Math.abs(stop - value) < Math.abs(stops[best] - value)) best = index; });
    return best;
  }

  function moved(key) {
    const value = Number(inputs[key].input.value);
    if (live) {
      values[key] = value;
      inputs[key].output.textContent = format(key, value);
      clearTimeout(timer);
      timer = setTimeout(ask, 60);
      return;
    }
    // From a file: one slider at a time, on the stops computed at build time.
    for (const other of keys) {
      if (other === key) continue;
      values[other] = data.sliders[other].value;
      inputs[other].input.value = String(values[other]);
      inputs[other].output.textContent = format(other, values[other]);
    }
    const stop = nearestStop(key, value);
    values[key] = data.sliders[key].stops[stop];
    inputs[key].input.value = String(values[key]);
    inputs[key].output.textContent = format(key, values[key]);
    show(data.documents[data.sliders[key].documents[stop]], "table:" + key + "=" + values[key]);
  }

  function query() {
    return keys.filter((key) => values[key] !== data.sliders[key].value)
      .map((key) => encodeURIComponent(key) + "=" + encodeURIComponent(values[key])).join("&");
  }

  async function ask() {
    const mine = ++sequence;
    const q = query();
    try {
      const response = await fetch("api/scoring" + (q ? "?" + q : ""), { headers: { Accept: "application/json" } });
      const answer = await response.json();
      if (mine !== sequence) return;
      if (!response.ok) throw new Error(answer.error || response.statusText);
      show(answer.explain, "api:" + q);
    } catch (error) {
      if (mine === sequence) $("scoring-mode").textContent = "The server did not answer: " + error.message;
    }
  }

  function cell(text, attributes) {
    return Booklet.el("td", attributes || {}, text);
  }

  function show(document, source) {
    const base = data.documents[data.base];
    const baseRank = {};
    for (const candidate of base.candidates) baseRank[candidate.provider] = candidate.rank;
    const rows = document.candidates.map((candidate) => {
      const b = candidate.score_breakdown;
      return Booklet.el("tr", {
        "data-provider": candidate.provider, "data-rank": candidate.rank,
        class: baseRank[candidate.provider] !== candidate.rank ? "moved" : null,
      },
        cell(String(candidate.rank), { class: "num" }),
        cell(candidate.provider, { "data-col": "provider" }),
        cell(candidate.site, { "data-col": "site" }),
        cell(Booklet.el("span", { class: "badge " + candidate.admission }, candidate.admission), { "data-col": "admission" }),
        cell(candidate.group, { "data-col": "group" }),
        cell(candidate.tier, { "data-col": "tier" }),
        cell(candidate.fresh ? "yes" : "no", { "data-col": "fresh" }),
        cell(Booklet.fixed(candidate.score, 6), { class: "num", "data-col": "score" }),

        ...["locality", "queue_depth", "kv_cache", "prefix_cache", "latency", "cost", "total"].map((name) =>
          cell(Booklet.fixed(b[name], 6), { class: "num", "data-col": name })));
    });
    const table = $("scoring-table");
    table.tBodies[0].replaceChildren(...rows);
    table.setAttribute("data-source", source);
    table.setAttribute("data-ready", "yes");
    $("scoring-why").replaceChildren(...document.order.map((pair) =>
      Booklet.el("li", { "data-decided-by": pair.decided_by },
        document.candidates[pair.above].provider + " above " + document.candidates[pair.below].provider + " by ",
        Booklet.el("strong", {}, pair.decided_by), ": " + pair.why)));
    const leftOut = document.left_out.map((entry) => Booklet.el("li", {}, entry.provider + " (" + entry.site + "): " + entry.reason + ", " + entry.detail));
    $("scoring-left-out").replaceChildren(...(leftOut.length ? [Booklet.el("h2", {}, "Left out"), Booklet.el("ul", {}, ...leftOut)] : []));
    for (const candidate of document.candidates) {
      const place = window.document.querySelector('[data-provider-place="' + candidate.provider + '"]');
      if (place) place.textContent = candidate.backend_kind + " at " + candidate.site + ", " + candidate.tier + ", rank " + candidate.rank;
    }
    showReproduction();
  }

  function showReproduction() {
    const lines = ["providers:"];
    const providers = [...new Set(keys.filter((key) => !key.startsWith("weight.")).map((key) => key.slice(0, key.lastIndexOf("."))))].sort();
    for (const provider of providers) {
      lines.push("  " + provider + ":");
      for (const key of keys.filter((k) => k.startsWith(provider + ".")).sort()) {
        lines.push("    " + key.slice(provider.length + 1) + ": " + values[key]);
      }
    }
    $("scoring-metrics").textContent = lines.join("\n");
    const weights = keys.filter((key) => key.startsWith("weight.")).map((key) => key.slice(7) + "=" + values[key]).join(", ");
    $("scoring-command").textContent = "# weights: " + weights + "\ngrid explain --resources DIR --site " + data.site +
      " --gateway " + data.scope.gateway + " --now " + data.now + " --metrics metrics.yaml --json";
  }

  /* Tick marks at the values tables were computed for. */
  function markStops() {
    for (const key of keys) {
      const id = "stops-" + key.replace(/[^A-Za-z0-9-]/g, "-");
      const list = Booklet.el("datalist", { id }, ...data.sliders[key].stops.map((stop) => Booklet.el("option", { value: stop })));
      document.body.append(list);
      inputs[key].input.setAttribute("list", id);
    }
  }

  async function start() {
    build();
    if (Booklet.served()) {
      try {
        const response = await fetch("api/scoring", { headers: { Accept: "application/json" } });
        if (response.ok) {
          const answer = await response.json();
          live = true;
          const note = $("scoring-mode");
          note.className = "note live";
          note.textContent = "Served: every change of any slider is scored by Grid on the server, in any combination.";
          show(answer.explain, "api:");
          return;
        }
      } catch (error) {
        /* No API where the pages are served from: fall back to the tables below. */
      }
    }
    markStops();
    $("scoring-mode").textContent = "Opened without the booklet's server, the page uses tables Grid computed when the booklet was built: " +
      "each slider moves alone, from the scenario's values, over its marked stops (moving one puts the others back). " +
      "Serve the booklet (grid booklet --serve, or /booklet on an agent or operator) to combine any values.";
    show(data.documents[data.base], "table:base");
  }

  start();
})();
