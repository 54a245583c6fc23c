"use strict";
(() => {
  const POLL_MS = 1000;
  const WINDOW_MIN_S = 60; // the member timeline spans the history it has, within these
  const WINDOW_MAX_S = 600;
  const HISTORY_SHOWN = 40;
  const ROWS_SHOWN = 100; // candidates per gateway until "show all" is pressed
  const SIGNALS = ["locality", "queue_depth", "kv_cache", "prefix_cache", "latency", "cost"];
  const SIGNAL_LABELS = ["locality", "queue", "kv cache", "prefix", "latency", "cost"];
  const STATES = ["alive", "suspect", "down", "left"];
  const CERTIFICATE_WARNING_DAYS = 14; // the default of the GridSiteCertificateExpiresSoon alert
  const ANCHORS = { ca: "network CA", pin: "pin only" };
  const sections = new Map(); // "network/part" -> serialized data last drawn
  let offsetMs = 0; // server clock minus this browser's clock
  let rendered = false;
  let lastView = null;
  const expanded = new Set(); // gateways whose every candidate is shown

  // -- small DOM helpers: text only, never markup from the document --------------------
  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (key === "class") node.className = value;
      else if (key === "text") node.textContent = value;
      else node.setAttribute(key, value === true ? "" : String(value));
    }
    for (const child of children) {
      if (child === null || child === undefined) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }
  const svg = (tag, attrs) => {
    const node = document.createElementNS("http://www.w3.org/2000/svg", tag);
    for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, String(value));
    return node;
  };
  const table = (headers, rows, numeric, attrs) => {
    const head = el("tr", {}, ...headers.map((h, i) => el("th", { class: numeric && numeric.has(i) ? "num" : null, text: h })));
    return el("table", attrs || {}, el("thead", {}, head), el("tbody", {}, ...rows));
  };
  const serverNow = () => Date.now() + offsetMs;
  function age(iso) {
    if (!iso) return "never";
    const seconds = Math.max(0, (serverNow() - Date.parse(iso)) / 1000);
    if (seconds < 90) return `${seconds.toFixed(0)} s ago`;
    if (seconds < 5400) return `${(seconds / 60).toFixed(0)} min ago`;
    if (seconds < 172800) return `${(seconds / 3600).toFixed(1)} h ago`;
    return `${(seconds / 86400).toFixed(1)} d ago`;
  }
  const since = (iso) => el("span", { class: "age", "data-since": iso || "", title: iso || "", text: age(iso) });
  const short = (text, length) => (text && text.length > length ? `${text.slice(0, length)}…` : text || "–");
  const number = (value) => (typeof value === "number" ? value.toFixed(4) : "–");
  const yesNo = (flag) => el("span", { class: flag ? "yes" : "no", text: flag ? "yes" : "no" });
  const badge = (state) => el("span", { class: `badge state-${state}`, text: state });
  function expiresIn(iso) {
    const seconds = (Date.parse(iso) - serverNow()) / 1000;
    const hours = Math.abs(seconds) / 3600;
    const span = hours < 48 ? `${hours.toFixed(1)} h` : `${(hours / 24).toFixed(0)} d`;
    return seconds < 0 ? `expired ${span} ago` : `in ${span}`;
  }

  // -- one section at a time, redrawn only when its data changed -------------------------
  function section(container, key, data, draw) {
    const serialized = JSON.stringify(data);
    let holder = container.querySelector(`:scope > [data-part="${key}"]`);
    if (!holder) {
      holder = el("div", { "data-part": key });
      container.append(holder);
    }
    const id = `${container.dataset.network}/${key}`;
    if (sections.get(id) === serialized) return;
    sections.set(id, serialized);
    holder.replaceChildren(...draw(data));
  }

  function drawSwim(network) {
    const swim = network.swim;
    const facts = el("div", { class: "facts" },
      el("span", {}, el("b", { text: "site " }), network.site || "unknown"),
      el("span", {}, el("b", { text: "grid id " }), network.gridId || "–"),
      el("span", {}, el("b", { text: "SWIM " }), swim.running ? yesNo(true) : yesNo(false),
        swim.running ? ` at ${swim.address} (generation ${swim.generation})` : ""),
      el("span", {}, el("b", { text: "key ids " }), el("span", { class: "mono", text: swim.keyIds.join(", ") || "–" })));
    if (swim.running) {
      // A site that just joined routes on a partial view until it has walked a peer's store.
      const waiting = swim.itemsWaiting ? `, ${swim.itemsWaiting} items waiting for their site's certificate` : "";
      facts.append(el("span", { class: "catch-up", "data-caught-up": String(swim.caughtUp) },
        el("b", { text: "items " }), swim.caughtUp ? "complete" : `partial: still catching up${waiting}`));
    }
    if (swim.detectionBoundSeconds !== undefined) {
      facts.append(el("span", { class: "muted", text:
        `probe every ${swim.probeIntervalSeconds} s, suspicion ${swim.suspicionTimeoutSeconds} s: ` +
        `a crash is declared within ${swim.detectionBoundSeconds.toFixed(1)} s at this size` }));
    }
    const parts = [facts];
    if (network.problem) parts.push(el("p", { class: "problem", text: network.problem }));
    if (swim.error) parts.push(el("p", { class: "problem", text: `SWIM: ${swim.error}` }));
    return parts;
  }

  function drawMembers(data) {
    const rows = data.members.map((member) => el("tr", {
      class: "member", "data-site": member.site, "data-state": member.state,
    },
    el("td", {}, member.site, member.self ? el("span", { class: "muted", text: " (this site)" }) : null),
    el("td", {}, badge(member.state)),
    el("td", { class: "mono", text: member.address || "–" }),
    el("td", { class: "num", text: member.generation ?? "–" }),
    el("td", {}, member.self ? "–" : since(member.since)),
    el("td", { class: "timeline-cell", "data-site": member.site })));
    const legend = el("p", { class: "legend" }, ...STATES.map((state) =>
      el("span", {}, el("i", { class: `state-${state}` }), state)), el("span", { class: "muted window" }));
    return [el("h3", { text: `Members (${data.members.length})` }), legend,
      el("div", { class: "scroll" }, table(["site", "state", "address", "generation", "since", "timeline"], rows, new Set([3]), { class: "nowrap" }))];
  }

  function drawTimelines(container, network) {
    const end = serverNow();
    const earliest = Math.min(end, ...network.history.transitions.map((change) => Date.parse(change.at)));
    const span = Math.min(Math.max((end - earliest) * 1.1, WINDOW_MIN_S * 1000), WINDOW_MAX_S * 1000);
    const start = end - span;
    const label = container.querySelector(".window");
    if (label) label.textContent = `timeline: the last ${span < 120000 ? `${Math.round(span / 1000)} s` : `${(span / 60000).toFixed(1)} min`}`;
    const bySite = new Map();
    for (const change of network.history.transitions) {
      if (!bySite.has(change.site)) bySite.set(change.site, []);
      bySite.get(change.site).push(change);
    }
    for (const cell of container.querySelectorAll("td.timeline-cell")) {
      const member = network.members.find((m) => m.site === cell.dataset.site);
      if (!member || member.self) continue;
      const changes = (bySite.get(cell.dataset.site) || []).slice();
      if (!changes.some((c) => c.to === member.state && c.at === member.since)) {
        changes.push({ to: member.state, at: member.since });
      }
      changes.sort((a, b) => Date.parse(a.at) - Date.parse(b.at));
      const picture = svg("svg", { class: "timeline", viewBox: "0 0 1000 10", preserveAspectRatio: "none", role: "img" });
      picture.append(svg("rect", { class: "unknown", x: 0, y: 0, width: 1000, height: 10 }));
      changes.forEach((change, index) => {
        const from = Math.max(Date.parse(change.at), start);
        const to = index + 1 < changes.length ? Date.parse(changes[index + 1].at) : end;
        if (to <= start || from >= end) return;
        const x = ((from - start) / (end - start)) * 1000;
        const width = Math.max(((Math.min(to, end) - from) / (end - start)) * 1000, 1);
        const bar = svg("rect", { class: change.to, x: x.toFixed(1), y: 0, width: width.toFixed(1), height: 10 });
        bar.append(svg("title", {}));
        bar.lastChild.textContent = `${change.to} from ${change.at}`;
        picture.append(bar);
      });
      cell.replaceChildren(picture);
    }
  }

  function drawHistory(history) {
    const recent = history.transitions.slice(-HISTORY_SHOWN).reverse();
    const items = recent.map((change) => el("li", {},
      since(change.at), " ", el("b", { text: change.site }), " ",
      change.from ? badge(change.from) : el("span", { class: "muted", text: "first seen" }), " → ", badge(change.to),
      el("span", { class: "muted", text: ` generation ${change.generation}, ${change.address}` })));
    const note = `${history.transitions.length} recorded (at most ${history.capacity}${history.dropped ? `, ${history.dropped} older dropped` : ""})`;
    return [el("h3", {}, "Recent transitions ", el("small", { class: "muted", text: note })),
      items.length ? el("ol", { class: "history" }, ...items) : el("p", { class: "muted", text: "none yet" })];
  }

  function drawTrust(trust) {
    const rows = trust.map((site) => el("tr", { class: "trust", "data-site": site.site, "data-trusted": site.trusted },
      el("td", { text: site.site }),
      el("td", { text: site.phase }),
      el("td", {}, site.self ? el("span", { class: "muted", text: "self" }) : yesNo(site.trusted)),
      el("td", { class: "mono", title: site.pins.join("\n") || null, text: site.pins.map((p) => short(p, 12)).join(", ") || "–" }),
      el("td", { class: "mono", title: site.observedFingerprint || null, text: short(site.observedFingerprint, 12) }),
      el("td", { text: site.matchedPin || (site.self ? "–" : "none") }),
      el("td", { text: site.why }),
      el("td", {}, site.lastProbe ? since(site.lastProbe.at) : "never",
        site.lastProbe && site.lastProbe.latencyMs !== null ? ` (${site.lastProbe.latencyMs.toFixed(1)} ms)` : "")));
    return [el("h3", { text: "Trust per site" }),
      table(["site", "phase", "trusted", "pins", "observed", "matched pin", "why", "last probe"], rows)];
  }

  function drawCertificates(certificates) {
    const rows = certificates.map((cert) => {
      const days = (Date.parse(cert.notAfter) - serverNow()) / 86400000;
      const expiry = days < 0 ? "expired" : days < CERTIFICATE_WARNING_DAYS ? "soon" : "ok";
      return el("tr", { class: "certificate", "data-site": cert.site, "data-expiry": expiry },
        el("td", {}, cert.site, cert.self ? el("span", { class: "muted", text: " (this site)" }) : null),
        el("td", { class: "mono", title: cert.fingerprint, text: short(cert.fingerprint, 12) }),
        el("td", { text: ANCHORS[cert.anchor] || "nothing now" }),
        el("td", { class: "mono", text: cert.notAfter }),
        el("td", { class: `expiry-${expiry}`, "data-not-after": cert.notAfter, text: expiresIn(cert.notAfter) }),
        el("td", { class: "problem", text: cert.problem || "" }));
    });
    return [el("h3", { text: "Certificates" }), rows.length
      ? table(["site", "fingerprint", "vouched for by", "not after", "expires", "discarded because"], rows)
      : el("p", { class: "muted", text: "no certificate known yet" })];
  }

  function drawBudgets(part) {
    if (!part.budgets.length) return [];
    const rows = part.budgets.map((budget) => {
      const share = budget.cap ? Math.min(budget.used / budget.cap, 1) : 1;
      const bar = el("span", { class: "bar", title: `${(share * 100).toFixed(0)} % of the cap` },
        el("i", { class: `budget-${budget.state}` }));
      bar.firstChild.style.width = `${share * 100}%`;
      return el("tr", { class: "budget", "data-tenant": budget.tenant, "data-state": budget.state },
        el("td", { text: budget.tenant }),
        el("td", { class: `budget-state-${budget.state}`, text: budget.state || "–" }),
        el("td", { class: "num" }, budget.used, budget.complete === false ? el("span", { class: "muted", text: " at least" }) : null),
        el("td", { class: "num", text: budget.cap }),
        el("td", {}, bar),
        el("td", { class: "mono", text: `${budget.windowStart} – ${budget.windowEnd}` }),
        el("td", { class: "num", text: budget.allowance ?? "–" }));
    });
    const unheard = part.unheardSites.map((s) => `${s.site} (${s.since ? `since ${s.since}` : "never heard"})`);
    return [el("h3", { text: "Budgets" }),
      table(["tenant", "state", "spent", "cap", "", "window", "allowance here"], rows, new Set([2, 3, 6])),
      unheard.length
        ? el("p", { class: "muted unheard", text: `Lower bounds: not heard from ${unheard.join(", ")}` })
        : el("p", { class: "muted", text: "Every site heard from: the spend is the mesh's whole spend." })];
  }

  function breakdownBar(breakdown) {
    const total = SIGNALS.reduce((sum, name) => sum + Math.max(breakdown[name] || 0, 0), 0) || 1;
    const bar = el("span", { class: "bar", title: SIGNALS.map((n) => `${n} ${number(breakdown[n])}`).join("\n") });
    for (const name of SIGNALS) {
      const part = el("i", { class: `sig-${name}` });
      part.style.width = `${(Math.max(breakdown[name] || 0, 0) / total) * 100}%`;
      bar.append(part);
    }
    return bar;
  }

  function drawGateway(gateway, key) {
    const why = new Map(gateway.order.map((pair) => [pair.above, `${pair.decided_by}: ${pair.why}`]));
    const all = expanded.has(key);
    const shown = all ? gateway.candidates : gateway.candidates.slice(0, ROWS_SHOWN);
    const rows = shown.map((c) => el("tr", { class: "candidate", "data-site": c.site, "data-rank": c.rank },
      el("td", { class: "num", text: c.rank }),
      el("td", { text: c.model }),
      el("td", { text: c.provider }),
      el("td", { text: c.site }),
      el("td", { class: "mono", text: c.cluster }),
      el("td", { class: `admission-${c.admission}`, text: c.admission }),
      el("td", { text: c.tier }),
      el("td", {}, yesNo(c.fresh)),
      el("td", { class: "num", text: number(c.score) }),
      el("td", {}, breakdownBar(c.score_breakdown)),
      ...SIGNALS.map((name) => el("td", { class: "num", text: number(c.score_breakdown[name]) })),
      el("td", { class: "muted", text: why.get(c.rank) || "" })));
    const title = el("h3", {}, `Gateway ${gateway.namespace}/${gateway.name} `,
      el("small", { class: "muted" }, `revision `, el("span", { class: "mono", title: gateway.revision || null, text: short(gateway.revision, 12) }),
        ", rendered ", since(gateway.renderedAt), `, ${gateway.candidates.length} candidates`,
        gateway.truncated ? `, ${gateway.truncated} cut to fit the overlay` : ""));
    const parts = [title];
    if (gateway.message) parts.push(el("p", { class: "problem", text: `held back: ${gateway.message}` }));
    const legend = el("p", { class: "legend" }, ...SIGNALS.map((name) => el("span", {}, el("i", { class: `sig-${name}` }), name)));
    const numeric = new Set([0, 8, 10, 11, 12, 13, 14, 15]);
    parts.push(legend, el("div", { class: "scroll" }, table(
      ["rank", "model", "provider", "site", "cluster", "admission", "tier", "fresh", "score", "breakdown", ...SIGNAL_LABELS, "above the next by"],
      rows, numeric, { class: "nowrap" })));
    if (gateway.candidates.length > ROWS_SHOWN) {
      const toggle = el("button", { type: "button", text: all ? `show the first ${ROWS_SHOWN}` : `show all ${gateway.candidates.length}` });
      toggle.addEventListener("click", () => {
        if (all) expanded.delete(key); else expanded.add(key);
        sections.clear();
        if (lastView) apply(lastView);
      });
      parts.push(el("p", {}, toggle));
    }
    return parts;
  }

  function drawLeftOut(data) {
    const rows = data.leftOut.map((entry) => el("tr", {}, el("td", { text: entry.provider }), el("td", { text: entry.model }),
      el("td", { text: entry.site }), el("td", { text: entry.reason }), el("td", { text: entry.detail })));
    rows.push(...data.notOffered.map((entry) => el("tr", {}, el("td", { text: entry.provider }), el("td", { text: "–" }),
      el("td", { text: "–" }), el("td", { text: "not_offered" }), el("td", { text: entry.reason }))));
    return [el("h3", { text: `Left out (${rows.length})` }),
      rows.length ? el("div", { class: "scroll" }, table(["provider", "model", "site", "reason", "detail"], rows))
        : el("p", { class: "muted", text: "every provider is in the list" })];
  }

  function drawMatrix(matrix) {
    if (!matrix.viewer) return [el("h3", { text: "Who routes to whom" }), el("p", { class: "muted", text: "no ranking yet" })];
    const header = el("tr", {}, el("th", { text: "consumer \\ site" }), ...matrix.columns.map((c) => el("th", { class: "num", text: c })));
    const rows = matrix.rows.map((row) => {
      const total = Object.values(row.cells).reduce((sum, cell) => sum + cell.candidates, 0) || 1;
      return el("tr", { class: row.computed ? "computed" : null, "data-consumer": row.consumer },
        el("th", { class: row.computed ? "computed" : null, text: row.computed ? row.consumer : `${row.consumer} (this site)` }),
        ...matrix.columns.map((column) => {
          const cell = row.cells[column];
          if (!cell) return el("td", { class: "cell empty", text: "·" });
          const td = el("td", { class: "cell", "data-target": column,
            title: `${cell.candidates} candidates (${cell.admitted} admitting new requests), first choice for ${cell.firstChoices} of ${row.models} models` },
          `${cell.candidates}`, cell.firstChoices ? ` (${cell.firstChoices}★)` : "");
          td.style.backgroundColor = `rgba(9, 105, 218, ${(0.08 + 0.5 * (cell.candidates / total)).toFixed(2)})`;
          return td;
        }));
    });
    const note = `As ${matrix.viewer} sees it: each row is a consuming site, each column where its candidates sit; ` +
      `n (k★) is n candidates, first choice for k models. Rows in italics are computed here with the ranking code ` +
      `from ${matrix.viewer}'s replicated state and trust${matrix.computedAt ? ` (at ${matrix.computedAt})` : ""}.`;
    return [el("h3", { text: "Who routes to whom" }), el("p", { class: "muted", text: note }),
      el("div", { class: "scroll" }, el("table", { class: "matrix" }, el("thead", {}, header), el("tbody", {}, ...rows)))];
  }

  function drawNetwork(container, network) {
    section(container, "title", [network.name, network.site], () => [el("h2", {}, `Network ${network.name} `,
      el("small", { text: network.site ? `as site ${network.site} sees it` : "" }))]);
    section(container, "swim", [network.swim, network.problem, network.site, network.gridId], () => drawSwim(network));
    let columns = container.querySelector(":scope > .columns");
    if (!columns) {
      columns = el("div", { class: "columns" }, el("div", { "data-network": network.name, class: "left" }),
        el("div", { "data-network": network.name, class: "right" }));
      container.append(columns);
    }
    const [left, right] = columns.children;
    section(left, "members", { members: network.members }, drawMembers);
    drawTimelines(left, network);
    section(right, "history", network.history, drawHistory);
    section(container, "trust", network.trust, drawTrust);
    section(container, "certificates", network.certificates, drawCertificates);
    section(container, "budgets", { budgets: network.budgets, unheardSites: network.unheardSites }, drawBudgets);
    const gateways = container.querySelector(":scope > .gateways") || container.appendChild(el("div", { class: "gateways", "data-network": network.name }));
    const seen = new Set();
    for (const gateway of network.gateways) {
      const key = `gateway:${gateway.namespace}/${gateway.name}`;
      seen.add(key);
      section(gateways, key, gateway, (data) => drawGateway(data, `${network.name}/${key}`));
    }
    for (const holder of gateways.querySelectorAll(":scope > [data-part]")) {
      if (!seen.has(holder.dataset.part)) {
        sections.delete(`${network.name}/${holder.dataset.part}`);
        holder.remove();
      }
    }
    if (!network.gateways.length) section(gateways, "none", [], () => [el("h3", { text: "Gateways" }), el("p", { class: "muted", text: "the network lists no gateway" })]);
    section(container, "left-out", { leftOut: network.leftOut, notOffered: network.notOffered }, drawLeftOut);
    section(container, "matrix", network.matrix, drawMatrix);
  }

  function apply(view) {
    lastView = view;
    offsetMs = Date.parse(view.now) - Date.now();
    document.getElementById("role").textContent = `live view (${view.role} ${view.version})`;
    const links = document.getElementById("links");
    const wanted = JSON.stringify(view.links);
    if (links.dataset.drawn !== wanted) {
      links.dataset.drawn = wanted;
      links.replaceChildren(...Object.entries(view.links).map(([name, href]) => el("a", { href, text: name })));
    }
    const main = document.getElementById("networks");
    const names = new Set(view.networks.map((n) => n.name));
    for (const container of main.querySelectorAll(":scope > section.network")) {
      if (!names.has(container.dataset.network)) container.remove();
    }
    for (const network of view.networks) {
      let container = main.querySelector(`:scope > section.network[data-network="${CSS.escape(network.name)}"]`);
      if (!container) {
        container = el("section", { class: "network", "data-network": network.name });
        main.append(container);
      }
      drawNetwork(container, network);
    }
    if (!view.networks.length) main.replaceChildren(el("p", { class: "muted", text: "no network is served here yet" }));
    for (const node of document.querySelectorAll(".age[data-since]")) node.textContent = age(node.dataset.since);
    for (const node of document.querySelectorAll("[data-not-after]")) node.textContent = expiresIn(node.dataset.notAfter);
    document.getElementById("meta").textContent = `Server time ${view.now}.`;
    if (!rendered) {
      rendered = true;
      document.body.getBoundingClientRect(); // lay the page out before saying it is drawn
      performance.mark("grid-view-rendered");
      document.body.dataset.rendered = "true";
    }
  }

  function connection(kind, text) {
    const node = document.getElementById("connection");
    node.className = `connection ${kind}`;
    node.textContent = text;
  }

  async function poll() {
    try {
      const response = await fetch("view.json", { cache: "no-store" });
      if (!response.ok) throw new Error(`the server answered ${response.status}`);
      apply(await response.json());
      connection("live", "live");
    } catch (error) {
      connection("lost", `not updating: ${error.message}; retrying`);
    } finally {
      setTimeout(poll, POLL_MS);
    }
  }
  poll();
})();
