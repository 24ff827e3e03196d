/* kvtutor's page widgets, the shared part: finding the containers, reading their data, building
   elements and formatting numbers as Python prints them. The widgets themselves are in
   kv-stepper.js (the cache stepper) and kv-calculator.js (the KV calculator); each registers
   itself here. No framework and no network: a widget's data is the JSON that
   kvtutor.book.widgets wrote into the page, in a <script type="application/json"> inside a
   <div class="kvtutor-widget" data-kvtutor-widget="NAME">. */
(function () {
  "use strict";

  const renderers = {};

  /* "zh" on the Chinese edition (<html lang="zh-CN">), else "en". */
  function lang() {
    const code = (document.documentElement.getAttribute("lang") || "en").toLowerCase();
    return code.startsWith("zh") ? "zh" : "en";
  }

  /* The label table of the page's language; a key missing there falls back to English. */
  function labels(tables) {
    const own = tables[lang()] || {};
    return (key) => (key in own ? own[key] : tables.en[key]);
  }

  /* Fill "{name}" slots of a label from an object. */
  function fill(text, values) {
    return text.replace(/\{(\w+)\}/g, (whole, name) => (name in values ? String(values[name]) : whole));
  }

  /* el("td", {class: "x", dataset: {k: 1}}, [child, "text"]): an element with its attributes. */
  function el(tag, attrs, children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (key === "dataset") Object.assign(node.dataset, value);
      else if (key === "text") node.textContent = value;
      else if (key === "on") Object.entries(value).forEach(([ev, fn]) => node.addEventListener(ev, fn));
      else node.setAttribute(key, value === true ? "" : value);
    }
    for (const child of [].concat(children || [])) {
      if (child === null || child === undefined || child === false) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  const SVG_NS = "http://www.w3.org/2000/svg";
  function svg(tag, attrs, children) {
    const node = document.createElementNS(SVG_NS, tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (key === "text") node.textContent = value;
      else node.setAttribute(key, value);
    }
    for (const child of [].concat(children || [])) if (child) node.append(child);
    return node;
  }

  /* A float with d decimals as Python's f"{x:.{d}f}" and NumPy print it: the exact binary value
     rounded half to even, "-" kept on a negative that rounds to zero ("-0.000"). */
  function fixed(x, d) {
    if (!Number.isFinite(x) || Math.abs(x) >= 1e21) return String(x);
    const negative = x < 0 || Object.is(x, -0);
    const exact = Math.abs(x).toFixed(100); // every digit of the double (up to 100 decimals)
    const point = exact.indexOf(".");
    let whole = BigInt(exact.slice(0, point) + exact.slice(point + 1, point + 1 + d));
    const rest = exact.slice(point + 1 + d);
    const tie = rest[0] === "5" && /^5?0*$/.test(rest);
    if (rest[0] > "5" || (rest[0] === "5" && !tie) || (tie && whole % 2n === 1n)) whole += 1n;
    return (negative ? "-" : "") + digitsWithPoint(whole, d);
  }

  function digitsWithPoint(n, d) {
    const s = n.toString().padStart(d + 1, "0");
    return d ? `${s.slice(0, s.length - d)}.${s.slice(s.length - d)}` : s;
  }

  /* n / 2**k with two decimals, rounded half to even as Python rounds n / size (exact for every
     n below 2**53, where Python's int / int is exact too). */
  function ratio2(n, size) {
    const scaled = n * 100n;
    let q = scaled / size;
    const twice = 2n * (scaled % size);
    if (twice > size || (twice === size && q % 2n === 1n)) q += 1n;
    return digitsWithPoint(q, 2);
  }

  /* 1234567 -> "1,234,567" (an integer, a BigInt or a string of digits). */
  function grouped(n) {
    const s = String(n);
    const sign = s.startsWith("-") ? "-" : "";
    return sign + s.slice(sign.length).replace(/\B(?=(\d{3})+(?!\d))/g, ",");
  }

  /* memory.format_bytes: 1536 -> "1.50 KiB" (binary units, as GPU memory is quoted). */
  const UNITS = [["TiB", 2n ** 40n], ["GiB", 2n ** 30n], ["MiB", 2n ** 20n], ["KiB", 2n ** 10n]];
  function formatBytes(n) {
    n = BigInt(n);
    const size = n < 0n ? -n : n;
    for (const [unit, step] of UNITS) {
      if (size >= step) return `${n < 0n ? "-" : ""}${ratio2(size, step)} ${unit}`;
    }
    return `${n} B`;
  }

  function readData(container) {
    const script = container.querySelector('script[type="application/json"]');
    if (!script) throw new Error("no <script type=\"application/json\"> with the widget's data");
    return JSON.parse(script.textContent);
  }

  function register(name, render) {
    renderers[name] = render;
    if (document.readyState !== "loading") init();
  }

  /* Render every container on the page whose widget is registered (each one once). */
  function init() {
    document.querySelectorAll(".kvtutor-widget[data-kvtutor-widget]").forEach((container) => {
      const render = renderers[container.dataset.kvtutorWidget];
      if (!render || container.dataset.kvtutorRendered) return;
      container.dataset.kvtutorRendered = "true";
      const data = readData(container);
      const root = el("div", { class: "kvw-root", lang: lang() });
      container.querySelectorAll(".kvtutor-fallback").forEach((node) => node.remove());
      container.append(root);
      render(root, data);
    });
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);

  window.kvtutorWidgets = { register, init, lang, labels, fill, el, svg, fixed, grouped, formatBytes };
})();
