/* The cache stepper: the toy model's prefill and decode steps, one button press each, with every
   layer's K and V cache per head, the new token's q row, its scores and softmax weights, the
   greedy token, and (switched on) the same step without a cache, its recomputed rows marked.
   Every number is from GPT2Model's trace, exported by kvtutor.book.widgets.cache_stepper;
   this file only lays them out. Needs kv-widgets.js first. */
(function () {
  "use strict";
  const W = window.kvtutorWidgets;
  const { el, fill, fixed, grouped } = W;
  const MAX_DIMS = 8; // head dims shown per row; wider heads are cut, with a note

  const LABELS = {
    en: {
      title: "Cache stepper: the toy model on \u201c{prompt}\u201d",
      controls: "Stepper controls",
      prefill: "Prefill",
      next: "Next token",
      back: "Back",
      noCache: "Without a cache",
      empty: "The cache is empty. Press Prefill to run the prompt \u201c{prompt}\u201d through the model.",
      afterPrefill: "Prefill: the {n} prompt tokens went through the model in one pass. Each layer's " +
        "cache now holds their keys and values, {shape} each. Greedy next token: \u201c{next}\u201d.",
      afterStep: "Decode step {i} of {n}: \u201c{token}\u201d, fed in at position {pos}, attends to " +
        "S = {s} keys; its K and V rows were appended in every layer, {shape} each. Greedy next " +
        "token: \u201c{next}\u201d.",
      recomputed: "Without a cache the same step runs all S = {s} tokens again: in every layer " +
        "{old} of the {s} K and V rows and {old} of the {s} score rows are recomputed (hatched), " +
        "the same numbers as the cached ones, and only the last row is used.",
      prefillBoth: "Prefill computes every row with or without a cache: there is nothing to reuse yet.",
      sequence: "Sequence",
      nextToken: "next (greedy)",
      layer: "Layer {l}",
      layerShape: "K and V: [H, S, K] = {shape} each",
      emptyShape: "K and V: [H, S, K] = {shape}: nothing cached yet",
      head: "head {h}",
      position: "position {pos}: \u201c{token}\u201d",
      wasted: "recomputed",
      masked: "masked: \u2212\u221e before the softmax",
      scoreRow: "q\u00b7k (raw)",
      queryRow: "q{t}\u00b7k (raw)",
      weightRow: "softmax(q\u00b7k/\u221a{d})",
      scaling: "The q\u00b7k rows are the raw dot products; the softmax row is softmax(q\u00b7k / \u221ad_h), with \u221ad_h = \u221a{d} {root}.",
      query: "q of \u201c{token}\u201d, the new token",
      rowSum: "weights sum to {sum}",
      dimsCut: "the first {shown} of {k} head dims are shown",
      costs: "Work so far: matmul FLOPs (the LM head on the last position only) and bytes moved",
      withCache: "with the cache",
      withoutCache: "without a cache",
      stepFlops: "this pass: FLOPs",
      stepBytes: "this pass: bytes",
      totalFlops: "so far: FLOPs",
      totalBytes: "so far: bytes",
      wastedFlops: "so far: FLOPs of recomputed rows",
      costNote: "FLOPs: every matrix product of the pass, that is the Q, K, V and output projections " +
        "and the FFN of each layer, the attention products q\u00b7k and a\u00b7V, and the LM head on the " +
        "last position only, whose logits give the next token (a prefill that also computes the " +
        "earlier positions' logits does more). Bytes: the weights read and the K/V read and written " +
        "({dtype}). Both as kvtutor.measure.costs.generation_costs counts them. Without a cache each " +
        "pass reads no K/V, but redoes every earlier token's work.",
      precision: "Numbers are printed with {d} decimals.",
    },
    zh: {
      title: "缓存步进器：玩具模型与提示词“{prompt}”",
      controls: "步进器控制",
      prefill: "预填充",
      next: "下一个词元",
      back: "后退",
      noCache: "不用缓存",
      empty: "缓存是空的。按“预填充”，让提示词“{prompt}”通过模型。",
      afterPrefill: "预填充：{n} 个提示词元一次性通过模型。每一层的缓存现在保存着它们的键和值，" +
        "各为 {shape}。贪心选出的下一个词元：“{next}”。",
      afterStep: "解码第 {i} 步（共 {n} 步）：在位置 {pos} 输入的“{token}”关注 S = {s} 个键；" +
        "它的 K 行和 V 行已追加到每一层，各为 {shape}。贪心选出的下一个词元：“{next}”。",
      recomputed: "不用缓存时，同一步要把全部 S = {s} 个词元重新算一遍：每一层 {s} 行 K 和 V 中的 " +
        "{old} 行、{s} 行分数中的 {old} 行都是重算的（斜线标出），数值与缓存里的相同，真正用到的只有最后一行。",
      prefillBoth: "无论有没有缓存，预填充都要计算每一行：此时还没有可以复用的东西。",
      sequence: "序列",
      nextToken: "下一个（贪心）",
      layer: "第 {l} 层",
      layerShape: "K 和 V：[H, S, K] = {shape}，各一份",
      emptyShape: "K 和 V：[H, S, K] = {shape}：尚未缓存任何内容",
      head: "第 {h} 个头",
      position: "位置 {pos}：“{token}”",
      wasted: "重算",
      masked: "已掩码：softmax 之前为 \u2212\u221e",
      scoreRow: "q\u00b7k（原始）",
      queryRow: "q{t}\u00b7k（原始）",
      weightRow: "softmax(q\u00b7k/\u221a{d})",
      scaling: "q\u00b7k 行是原始点积；softmax 行是 softmax(q\u00b7k / \u221ad_h)，其中 \u221ad_h = \u221a{d} {root}。",
      query: "新词元“{token}”的 q",
      rowSum: "权重之和为 {sum}",
      dimsCut: "只显示 {k} 个头维度中的前 {shown} 个",
      costs: "到目前为止的工作量：矩阵乘法的 FLOPs（LM 头只算最后一个位置）和搬运的字节数",
      withCache: "用缓存",
      withoutCache: "不用缓存",
      stepFlops: "这一遍：FLOPs",
      stepBytes: "这一遍：字节",
      totalFlops: "累计：FLOPs",
      totalBytes: "累计：字节",
      wastedFlops: "累计：重算各行的 FLOPs",
      costNote: "FLOPs：这一遍的所有矩阵乘法，即每一层的 Q、K、V 和输出投影与 FFN、注意力中的 q\u00b7k 和 a\u00b7V，" +
        "以及只在最后一个位置上的 LM 头（它的 logits 给出下一个词元；若预填充还计算前面各位置的 logits，工作量更大）。" +
        "字节：读取的权重和读写的 K/V（{dtype}）。两者都按 kvtutor.measure.costs.generation_costs 的算法计数。" +
        "不用缓存时每一遍不读 K/V，但要重做之前每个词元的工作。",
      precision: "数值保留 {d} 位小数。",
    },
  };

  function shape(dims) {
    return `[${dims.join(", ")}]`;
  }

  function render(root, data) {
    const t = W.labels(LABELS);
    const last = data.steps.length + 1; // states: 0 empty, 1 prefilled, 1 + i after decode step i
    const promptText = data.prompt.text;
    let state = 0;
    let recompute = false;

    const button = (action, label) =>
      el("button", { type: "button", class: "kvw-button", dataset: { action }, text: label });
    const prefillButton = button("prefill", t("prefill"));
    const nextButton = button("next", t("next"));
    const backButton = button("back", t("back"));
    const switchButton = el("button", {
      type: "button", role: "switch", class: "kvw-switch", "aria-checked": "false",
      dataset: { action: "no-cache" },
    }, [el("span", { class: "kvw-switch-track", "aria-hidden": "true" }), t("noCache")]);
    const status = el("p", { class: "kvw-status", role: "status", "aria-live": "polite" });
    const body = el("div", { class: "kvw-body" });

    const actions = {
      prefill: () => { state = 1; },
      next: () => { state = Math.min(last, state === 0 ? 1 : state + 1); },
      back: () => { state = Math.max(0, state - 1); },
      "no-cache": () => { recompute = !recompute; },
    };
    for (const b of [prefillButton, nextButton, backButton, switchButton]) {
      b.addEventListener("click", () => {
        if (b.getAttribute("aria-disabled") === "true") return;
        actions[b.dataset.action]();
        update();
      });
    }

    root.classList.add("kvw-stepper");
    root.append(
      el("p", { class: "kvw-title", text: fill(t("title"), { prompt: promptText }) }),
      el("div", { class: "kvw-controls", role: "group", "aria-label": t("controls") },
        [prefillButton, nextButton, backButton, switchButton]),
      status,
      body,
    );

    /* Aria-disabled rather than disabled, so that a button keeps the focus at the ends. */
    function enable(b, on) {
      b.setAttribute("aria-disabled", on ? "false" : "true");
    }

    function update() {
      enable(prefillButton, state !== 1);
      enable(nextButton, state < last);
      enable(backButton, state > 0);
      switchButton.setAttribute("aria-checked", String(recompute));
      root.dataset.state = String(state);
      root.dataset.mode = recompute ? "no-cache" : "cache";
      status.textContent = statusText();
      body.replaceChildren(...view());
      showNewest();
    }

    /* A head's table wider than its box (a phone) scrolls inside it: the row labels and the new
       token's q column stay put (sticky, CSS), and the box opens scrolled to its right end, the
       newest position, so the step just taken is in view; earlier positions are a swipe away. */
    function showNewest() {
      for (const box of body.querySelectorAll(".kvw-head .kvw-scroll")) {
        const table = box.querySelector("table");
        const labels = table.querySelector("thead th.kvw-corner");
        table.style.setProperty("--kvw-label-width", `${labels ? labels.getBoundingClientRect().width : 0}px`);
        box.classList.toggle("kvw-scrolls", box.scrollWidth > box.clientWidth + 1);
        box.scrollLeft = box.scrollWidth;
      }
    }
    // again when the width changes (not when a phone's address bar comes and goes on a scroll)
    let width = window.innerWidth;
    window.addEventListener("resize", () => {
      if (window.innerWidth === width) return;
      width = window.innerWidth;
      showNewest();
    });

    /* Tokens by position: the prompt, then the token each decode step was fed. */
    const tokens = data.prompt.tokens.concat(data.steps.map((s) => s.token));
    const step = () => (state >= 2 ? data.steps[state - 2] : null);
    const nKeys = () => (state === 0 ? 0 : state === 1 ? data.prompt.tokens.length : step().n_keys);
    const nextToken = () => (state === 1 ? data.prefill.next_token : step().next_token);
    const cacheShape = () => shape([data.model.n_kv_heads, nKeys(), data.model.d_head]);

    function statusText() {
      if (state === 0) return fill(t("empty"), { prompt: promptText });
      if (state === 1) {
        const text = fill(t("afterPrefill"), {
          n: data.prompt.tokens.length, shape: cacheShape(), next: nextToken(),
        });
        return recompute ? `${text} ${t("prefillBoth")}` : text;
      }
      const s = step();
      const text = fill(t("afterStep"), {
        i: state - 1, n: data.steps.length, token: s.token, pos: s.position, s: s.n_keys,
        shape: cacheShape(), next: s.next_token,
      });
      return recompute ? `${text} ${fill(t("recomputed"), { s: s.n_keys, old: s.n_keys - 1 })}` : text;
    }

    function view() {
      const parts = [sequenceView()];
      if (state > 0) parts.push(costView());
      for (let l = 0; l < data.model.n_layers; l++) parts.push(layerView(l));
      if (data.model.d_head > MAX_DIMS) {
        parts.push(el("p", { class: "kvw-note", text: fill(t("dimsCut"), { shown: MAX_DIMS, k: data.model.d_head }) }));
      }
      if (state >= 2) {
        const root2 = Math.sqrt(data.model.d_head);
        const root = Number.isInteger(root2) ? `= ${root2}` : `\u2248 ${fixed(root2, 3)}`;
        parts.push(el("p", { class: "kvw-note kvw-scaling", text: fill(t("scaling"), { d: data.model.d_head, root }) }));
      }
      parts.push(el("p", { class: "kvw-note", text: fill(t("precision"), { d: data.digits }) }));
      return parts;
    }

    function sequenceView() {
      const chips = tokens.slice(0, nKeys()).map((token, pos) => {
        const fresh = (state === 1) || (state >= 2 && pos === nKeys() - 1);
        return el("span", { class: `kvw-token${fresh ? " kvw-token-new" : ""}`, dataset: { pos }, text: token });
      });
      if (state > 0) {
        chips.push(el("span", { class: "kvw-arrow", "aria-hidden": "true", text: "\u2192" }));
        chips.push(el("span", { class: "kvw-token kvw-token-next", dataset: { role: "next" }, title: t("nextToken") },
          [el("span", { class: "kvw-token-label", text: `${t("nextToken")}: ` }), nextToken()]));
      }
      return el("div", { class: "kvw-sequence" }, [el("span", { class: "kvw-label", text: `${t("sequence")}: ` }), ...chips]);
    }

    function costView() {
      const entry = state === 1 ? data.prefill : step();
      const wasted = entry.total.recompute.flops - entry.total.cached.flops;
      const rows = [
        ["stepFlops", "step-flops", entry.cost.cached.flops, entry.cost.recompute.flops],
        ["stepBytes", "step-bytes", entry.cost.cached.bytes, entry.cost.recompute.bytes],
        ["totalFlops", "total-flops", entry.total.cached.flops, entry.total.recompute.flops],
        ["totalBytes", "total-bytes", entry.total.cached.bytes, entry.total.recompute.bytes],
      ];
      const cell = (key, mode, n) => el("td", { class: "kvw-num", dataset: { cost: `${mode}-${key}` }, text: grouped(n) });
      const table = el("table", { class: "kvw-costs" }, [
        el("caption", { text: t("costs") }),
        el("thead", {}, el("tr", {}, [
          el("th", { scope: "col", text: "" }),
          el("th", { scope: "col", class: recompute ? "" : "kvw-active", text: t("withCache") }),
          el("th", { scope: "col", class: recompute ? "kvw-active" : "", text: t("withoutCache") }),
        ])),
        el("tbody", {}, rows.map(([label, key, a, b]) => el("tr", {}, [
          el("th", { scope: "row", text: t(label) }), cell(key, "cached", a), cell(key, "recompute", b),
        ])).concat([el("tr", { class: "kvw-wasted-row" }, [
          el("th", { scope: "row", text: t("wastedFlops") }),
          el("td", { class: "kvw-num", text: "0" }),
          el("td", { class: `kvw-num${wasted ? " kvw-wasted" : ""}`, dataset: { cost: "wasted-flops" }, text: grouped(wasted) }),
        ])])),
      ]);
      return el("div", { class: "kvw-cost-box" }, [
        el("div", { class: "kvw-scroll" }, table), el("p", { class: "kvw-note", text: fill(t("costNote"), { dtype: data.model.dtype }) }),
      ]);
    }

    /* The arrays of layer l at this state: the cache (with or without reuse) and, after a decode
       step, the new query's q row, scores and weights. */
    function layerArrays(l) {
      if (state === 1) return { k: data.prefill.k_LHSK[l], v: data.prefill.v_LHSK[l] };
      const s = step();
      const src = recompute ? s.recompute : s;
      const out = { k: src.k_LHSK[l], v: src.v_LHSK[l] };
      if (recompute) {
        const lastRow = s.n_keys - 1;
        out.q = src.q_LHSK[l].map((rows) => rows[lastRow]);
        out.scoreRows = src.scores_LHSS[l];
        out.weights = src.weights_LHSS[l].map((rows) => rows[lastRow]);
      } else {
        out.q = s.q_LHK[l];
        out.scoreRows = s.scores_LHS[l].map((row) => [row]);
        out.weights = s.weights_LHS[l];
      }
      out.sums = s.row_sums_LH[l];
      return out;
    }

    function layerView(l) {
      const head = el("div", { class: "kvw-layer-head" }, [
        el("span", { class: "kvw-layer-name", text: fill(t("layer"), { l }) }), " \u00b7 ",
        el("span", { class: "kvw-shape", dataset: { layer: l }, text: fill(t(state ? "layerShape" : "emptyShape"), { shape: cacheShape() }) }),
      ]);
      if (state === 0) return el("div", { class: "kvw-layer", dataset: { layer: l } }, head);
      const arrays = layerArrays(l);
      const heads = [];
      for (let h = 0; h < data.model.n_kv_heads; h++) heads.push(headView(l, h, arrays));
      return el("div", { class: "kvw-layer", dataset: { layer: l } }, [head, el("div", { class: "kvw-heads" }, heads)]);
    }

    /* One KV head: a table with one column per cached position (the cache grows to the right),
       rows k0.. and v0.., then the new query's score rows and softmax weights. After a decode
       step the new token's q stands in a column of its own beside the keys it is dotted with. */
    function headView(l, h, arrays) {
      const S = nKeys();
      const dims = Math.min(data.model.d_head, MAX_DIMS);
      const d = data.digits;
      const decoding = state >= 2;
      const kind = (pos) => (state === 1 || pos === S - 1 ? "new" : recompute ? "wasted" : "cached");
      const blank = () => (decoding ? el("td", { class: "kvw-blank kvw-qcol-cell" }) : null);
      const header = el("tr", {}, [
        el("th", { scope: "col", class: "kvw-corner", text: "" }),
        decoding ? el("th", { scope: "col", class: "kvw-qcol kvw-qcol-cell", title: fill(t("query"), { token: tokens[S - 1] }) },
          [el("span", { class: "kvw-pos", text: "q" }), el("span", { class: "kvw-tok", text: tokens[S - 1] })]) : null,
      ].concat(tokens.slice(0, S).map((token, pos) => el("th", {
        scope: "col", class: `kvw-col-${kind(pos)}`, title: fill(t("position"), { pos, token }),
      }, [el("span", { class: "kvw-pos", text: String(pos) }), el("span", { class: "kvw-tok", text: token })]))));
      const matrixRows = (name, cols) => {
        const rows = [];
        for (let j = 0; j < dims; j++) {
          const first = name === "k" && decoding
            ? el("td", { class: "kvw-num kvw-qcol kvw-qcol-cell", dataset: { layer: l, head: h, kind: "q", dim: j }, text: fixed(arrays.q[h][j], d) })
            : blank();
          rows.push(el("tr", { class: `kvw-${name}-row` }, [el("th", { scope: "row", text: `${name}${sub(j)}` }), first].concat(
            cols.map((row, pos) => el("td", {
              class: `kvw-num kvw-col-${kind(pos)}`, dataset: { layer: l, head: h, kind: name, pos, dim: j },
              text: fixed(row[j], d),
            })))));
        }
        return rows;
      };
      const bodies = [
        el("tbody", { class: "kvw-k" }, matrixRows("k", arrays.k[h])),
        el("tbody", { class: "kvw-v" }, matrixRows("v", arrays.v[h])),
      ];
      if (decoding) bodies.push(el("tbody", { class: "kvw-attn" }, attentionRows(l, h, arrays, S, blank)));
      const table = el("table", { class: "kvw-head-table", dataset: { layer: l, head: h } }, [
        el("caption", { text: fill(t("head"), { l, h }) }), el("thead", {}, header), ...bodies,
      ]);
      const parts = [el("div", { class: "kvw-scroll" }, table)];
      if (decoding) {
        parts.push(el("p", { class: "kvw-query", dataset: { layer: l, head: h, kind: "sum" },
          text: fill(t("rowSum"), { sum: fixed(arrays.sums[h], d) }) }));
      }
      return el("div", { class: "kvw-head" }, parts);
    }

    function attentionRows(l, h, arrays, S, blank) {
      const d = data.digits;
      const rows = [];
      const scoreRows = arrays.scoreRows[h];
      scoreRows.forEach((row, i) => {
        const t0 = S - scoreRows.length + i; // the query's position
        const wasted = t0 < S - 1;
        const label = recompute ? fill(t("queryRow"), { t: t0 }) : t("scoreRow");
        rows.push(el("tr", { class: `kvw-score-row${wasted ? " kvw-row-wasted" : ""}` }, [
          el("th", { scope: "row", text: label, title: wasted ? t("wasted") : null }), blank(),
        ].concat(row.map((x, pos) => el("td", {
          class: `kvw-num${pos > t0 ? " kvw-masked" : ""}${wasted ? " kvw-col-wasted" : ""}`,
          title: pos > t0 ? t("masked") : null,
          dataset: wasted ? { layer: l, head: h, kind: "score-old", query: t0, pos } : { layer: l, head: h, kind: "score", pos },
          text: fixed(x, d),
        })))));
      });
      rows.push(el("tr", { class: "kvw-weight-row" }, [el("th", { scope: "row", text: fill(t("weightRow"), { d: data.model.d_head }) }), blank()].concat(
        arrays.weights[h].map((x, pos) => el("td", {
          class: "kvw-num kvw-weight", style: `--w: ${Math.max(0, Math.min(1, x))}`,
          dataset: { layer: l, head: h, kind: "weight", pos }, text: fixed(x, d),
        })))));
      return rows;
    }

    update();
  }

  const SUBSCRIPTS = "\u2080\u2081\u2082\u2083\u2084\u2085\u2086\u2087\u2088\u2089";
  function sub(n) {
    return String(n).split("").map((c) => SUBSCRIPTS[Number(c)]).join("");
  }

  W.register("cache-stepper", render);
})();
