/* kvtutor's page widgets, the shared part: finding the containers, reading their data, building
   elements and formatting numbers as Python prints them; and, on every page, the figures that a
   narrow screen shrinks open at full size on a tap (at the end). The widgets themselves are in
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

  /* Fill "{name}" slots of a label from an object. "{name|one|other}" is the word that agrees
     with the count in values[name]: `one` when it is exactly 1 ("1", not "1.00" or "11"), else
     `other` ("{n} {n|token|tokens}"); the Chinese labels need none. */
  function fill(text, values) {
    return text.replace(/\{(\w+)(?:\|([^|{}]*)\|([^|{}]*))?\}/g, (whole, name, one, other) => {
      if (!(name in values)) return whole;
      if (one === undefined) return String(values[name]);
      return String(values[name]) === "1" ? one : other;
    });
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

  /* ---------------------------------------------------------------- figures at full size
     A figure of a code cell (a PNG, or a diagram drawn as SVG) that the page shows at less than
     nine tenths of its own width, as on a phone, gets a button in its corner, and the figure
     itself opens on a tap too: a full-screen <dialog> shows it at its full size, to scroll and
     pinch; Escape, the Close button or a tap beside it closes it. Nothing is fetched. */
  const FIGURES = "article .cell_output img, article .cell_output svg, article figure img";
  const ZOOM_LABELS = {
    en: { open: "Open the figure at full size", close: "Close" },
    zh: { open: "以原尺寸查看此图", close: "关闭" },
  };

  /* The width a figure is drawn for: an image's own pixels, a diagram's viewBox (else its width). */
  function fullWidth(figure) {
    if (figure instanceof HTMLImageElement) return figure.naturalWidth;
    const box = figure.viewBox && figure.viewBox.baseVal;
    if (box && box.width) return box.width;
    return Number.parseFloat(figure.getAttribute("width")) || 0;
  }

  function scaledDown(figure) {
    const shown = figure.getBoundingClientRect().width;
    return shown > 0 && fullWidth(figure) > 48 && shown < 0.9 * fullWidth(figure);
  }

  let dialog = null;
  function openFull(figure) {
    const t = labels(ZOOM_LABELS);
    if (!dialog) {
      dialog = el("dialog", { class: "kvt-lightbox", "aria-label": t("open") });
      const close = el("button", { type: "button", class: "kvt-lightbox-close", text: t("close") });
      close.addEventListener("click", () => dialog.close());
      dialog.addEventListener("click", (event) => { if (event.target === dialog) dialog.close(); });
      dialog.addEventListener("close", () => dialog.querySelector(".kvt-lightbox-figure").replaceChildren());
      dialog.append(el("div", { class: "kvt-lightbox-bar" }, close), el("div", { class: "kvt-lightbox-figure" }));
      document.body.append(dialog);
    }
    const copy = figure.cloneNode(true);
    copy.removeAttribute("id");
    copy.classList.remove("kvt-zoomable");
    copy.style.width = `${fullWidth(figure)}px`;
    copy.style.maxWidth = "none";
    copy.style.height = "auto";
    dialog.querySelector(".kvt-lightbox-figure").replaceChildren(copy);
    dialog.showModal();
  }

  /* Marks each figure shown scaled down (and unmarks the others), after a load or a resize. */
  function markFigures() {
    const t = labels(ZOOM_LABELS);
    document.querySelectorAll(FIGURES).forEach((figure) => {
      if (figure.closest(".kvtutor-widget, button, .kvt-lightbox")) return;
      const small = scaledDown(figure);
      figure.classList.toggle("kvt-zoomable", small);
      let button = figure.kvtZoomButton;
      if (small && !button) {
        button = el("button", { type: "button", class: "kvt-zoom", "aria-label": t("open"), title: t("open"), text: "\u2922" });
        button.addEventListener("click", () => openFull(figure));
        figure.addEventListener("click", () => { if (figure.classList.contains("kvt-zoomable")) openFull(figure); });
        const holder = figure.parentElement; // the corner button is placed in it
        if (getComputedStyle(holder).position === "static") holder.style.position = "relative";
        figure.after(button);
        figure.kvtZoomButton = button;
      }
      if (button) button.hidden = !small;
    });
  }
  let pending = false;
  const markSoon = () => {
    if (pending) return;
    pending = true;
    requestAnimationFrame(() => { pending = false; markFigures(); });
  };
  window.addEventListener("load", markSoon);
  window.addEventListener("resize", markSoon);
  if (document.readyState !== "loading") markSoon();
  else document.addEventListener("DOMContentLoaded", markSoon);

  window.kvtutorWidgets = { register, init, lang, labels, fill, el, svg, fixed, grouped, formatBytes, markFigures };
})();
