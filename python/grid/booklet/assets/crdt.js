/* CRDT chapter: replicas whose every state and transition Grid's CRDT types computed. */
"use strict";

(function () {
  const data = window.GRID_BOOKLET.crdt;
  const $ = (id) => document.getElementById(id);
  const components = Object.keys(data.components);
  let replicas, used, log;

  function reset() {
    replicas = {};
    for (const name of data.replicas) {
      replicas[name] = {};
      for (const component of components) replicas[name][component] = data.components[component].start;
    }
    used = new Set();
    log = [];
    draw();
  }

  function lookup(component, kind, key) {
    const found = data.components[component][kind][key];
    if (found === undefined) throw new Error("no precomputed " + component + " " + kind + " for " + key);
    return found;
  }

  function apply(operation) {
    const replica = replicas[operation.replica];
    replica[operation.component] = lookup(operation.component, "apply", replica[operation.component] + "|" + operation.id);
    used.add(operation.id);
    log.push(operation.replica + ": " + operation.label);
    draw();
  }

  function deliver(receiver, sender) {
    const before = JSON.stringify(replicas[receiver]);
    const dropped = [];
    for (const component of components) {
      const mine = replicas[receiver][component], theirs = replicas[sender][component];
      if (mine === theirs) continue;
      const merged = lookup(component, "merge", mine + "|" + theirs);
      if (component === "set") dropped.push(...droppedDots(mine, theirs, merged));
      replicas[receiver][component] = merged;
    }
    const changed = before !== JSON.stringify(replicas[receiver]);
    let text = receiver + " ← " + sender + (changed ? "" : " (nothing new)");
    if (dropped.length) text += "; dots gone after the merge: " + dropped.join(", ");
    log.push(text);
    draw();
  }

  /* Dots on either side's elements that the merged set no longer carries. */
  function droppedDots(mine, theirs, merged) {
    const values = data.components.set.values;
    const kept = new Set(values[merged].elements.flatMap((e) => e.dots.map((d) => e.element + " " + d.join(""))));
    const before = new Set([mine, theirs].flatMap((id) => values[id].elements.flatMap((e) => e.dots.map((d) => e.element + " " + d.join("")))));
    return [...before].filter((dot) => !kept.has(dot));
  }

  function stateKey(name) {
    return components.map((component) => replicas[name][component]).join("-");
  }

  function drawReplica(name) {
    const replica = replicas[name];
    const set = data.components.set.values[replica.set];
    const register = data.components.register.values[replica.register];
    const counter = data.components.counter.values[replica.counter];
    const ops = data.operations.filter((operation) => operation.replica === name).map((operation) =>
      Booklet.el("button", {
        type: "button", "data-op": operation.id, disabled: used.has(operation.id),
        class: used.has(operation.id) ? "used" : null, onclick: () => apply(operation),
      }, operation.label));
    const merges = data.replicas.filter((other) => other !== name).map((other) =>
      Booklet.el("button", { type: "button", "data-merge": name + "<" + other, onclick: () => deliver(name, other) }, name + " ← " + other));
    const elements = set.elements.length
      ? set.elements.map((entry) => Booklet.el("span", { class: "element", "data-element": entry.element },
          entry.element, ...entry.dots.map((dot) => Booklet.el("span", { class: "dotchip" }, dot[0] + dot[1]))))
      : [Booklet.el("span", { class: "muted" }, "(empty)")];
    const context = data.replicas.map((r) => r + ":" + (set.context[r] || 0)).join(" ");
    const slots = data.replicas.map((r) => r + ":" + (counter.slots[r] || 0)).join(" ");
    const stamp = register.revision === 0 ? "never written" : "revision " + register.revision + ", writer " + register.writer;
    const state = Booklet.el("div", { class: "state", "data-state-key": stateKey(name) },
      Booklet.el("div", {}, Booklet.el("strong", {}, "models "), Booklet.el("span", { class: "muted" }, "ORSet")),
      Booklet.el("div", { class: "set-elements" }, ...elements),
      Booklet.el("div", { class: "mono context" }, "context " + context),
      Booklet.el("div", { class: "register" }, Booklet.el("strong", {}, "route "), Booklet.el("span", { class: "mono" }, register.value), Booklet.el("span", { class: "muted" }, " · " + stamp)),
      Booklet.el("div", { class: "counter" }, Booklet.el("strong", {}, "requests "), Booklet.el("span", { class: "mono" }, String(counter.value)), Booklet.el("span", { class: "muted mono" }, " · slots " + slots)));
    return Booklet.el("section", { class: "replica panel", "data-replica": name },
      Booklet.el("h2", {}, "Replica " + name),
      Booklet.el("div", { class: "ops" }, ...ops),
      Booklet.el("div", { class: "merges" }, ...merges),
      state);
  }

  function draw() {
    $("crdt-replicas").replaceChildren(...data.replicas.map(drawReplica));
    const keys = new Set(data.replicas.map(stateKey));
    const converged = keys.size === 1;
    const badge = $("crdt-converged");
    badge.textContent = converged ? "yes" : "no";
    badge.className = "badge " + (converged ? "yes" : "no");
    badge.setAttribute("data-converged", converged ? "yes" : "no");
    $("crdt-log").replaceChildren(...log.map((line) => Booklet.el("li", {}, line)));
  }

  $("crdt-reset").addEventListener("click", reset);
  const counts = components.map((c) => c + " " + data.components[c].values.length + " states (" + data.components[c].joint_states + " joint)").join(", ");
  $("crdt-summary").textContent = "Precomputed with Grid's CRDT types by exploring every reachable combination of the three replicas: " + counts + ".";
  reset();
})();
