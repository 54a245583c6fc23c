/* The Grid Booklet: helpers shared by the chapters. Nothing here computes Grid's
   results: the chapters draw data produced by Grid's own code (embedded at build time,
   or answered by the served booklet's API). */
"use strict";

window.GRID_BOOKLET = window.GRID_BOOKLET || {};

const Booklet = {
  /* An element with attributes and children (strings become text nodes). */
  el(tag, attributes, ...children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attributes || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (name === "text") node.textContent = value;
      else if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
      else node.setAttribute(name, value === true ? "" : String(value));
    }
    for (const child of children.flat()) {
      if (child === null || child === undefined) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  },

  /* The SVG namespace, as the HTML parser assigns it to an <svg> element. */
  svgNamespace() {
    if (!Booklet._svgNamespace) {
      const probe = document.createElement("div");
      probe.innerHTML = "<svg></svg>";
      Booklet._svgNamespace = probe.firstChild.namespaceURI;
    }
    return Booklet._svgNamespace;
  },

  /* An SVG element with attributes. */
  svg(tag, attributes, ...children) {
    const node = document.createElementNS(Booklet.svgNamespace(), tag);
    for (const [name, value] of Object.entries(attributes || {})) {
      if (value === null || value === undefined) continue;
      if (name === "text") node.textContent = value;
      else node.setAttribute(name, String(value));
    }
    for (const child of children.flat()) if (child) node.append(child);
    return node;
  },

  /* Loads a data script once (script elements work from file://, fetch does not). */
  loadScript(src) {
    Booklet._scripts = Booklet._scripts || {};
    if (!Booklet._scripts[src]) {
      Booklet._scripts[src] = new Promise((resolve, reject) => {
        const script = document.createElement("script");
        script.src = src;
        script.onload = () => resolve();
        script.onerror = () => reject(new Error("cannot load " + src));
        document.head.append(script);
      });
    }
    return Booklet._scripts[src];
  },

  /* Whether the page came from a server (which may answer the booklet's API). */
  served() {
    return location.protocol === "http:" || location.protocol === "https:";
  },

  fixed(value, digits) {
    return Number(value).toFixed(digits);
  },
};

window.Booklet = Booklet;
