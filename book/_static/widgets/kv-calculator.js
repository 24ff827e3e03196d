/* The KV calculator: a bundled model (or typed config numbers), a context length, a batch, the
   KV dtype with its scales, an optional window and a memory budget -> bytes per token, per
   sequence, for the batch, and the largest batch that fits beside the weights. The models and the
   constants (bits per number, scale formats) are exported by kvtutor.book.widgets.kv_calculator;
   this file holds only the arithmetic of kvtutor.measure.memory.kv_memory, in exact integers
   (BigInt), so that every number equals `python -m kvtutor kv-memory ... --json`.
   Needs kv-widgets.js first. */
(function () {
  "use strict";
  const W = window.kvtutorWidgets;
  const { el, fill, grouped, formatBytes } = W;

  const LABELS = {
    en: {
      title: "KV calculator",
      model: "Model",
      custom: "your own numbers",
      n_layers: "layers L",
      n_heads: "query heads H",
      n_kv_heads: "KV heads H_kv",
      d_head: "head dim K",
      kv_lora_rank: "MLA latent (0: none)",
      qk_rope_head_dim: "MLA rotary key",
      params_b: "parameters (billions)",
      settings: "Settings",
      seq_len: "tokens per sequence S",
      batch: "batch B",
      dtype: "KV dtype",
      key_scales: "int keys scaled",
      per_token: "per token",
      per_channel: "per channel",
      group_size: "tokens per key-scale group",
      weights_dtype: "weights dtype",
      window: "window W (empty: none)",
      memory_gib: "memory (GiB)",
      summaryMHA: "MHA: {h} heads, each with its own K and V",
      summaryGQA: "GQA: {h} query heads share {kv} KV heads ({g} per KV head)",
      summaryMQA: "MQA: {h} query heads share 1 KV head",
      summaryMLA: "MLA: one latent of {r} and one rotary key of {rope} per token and layer, shared by {h} heads",
      params: "{p} B parameters",
      context: "context {n} tokens",
      ownWindow: "own window {w} tokens in {n} of {l} layers",
      noWindow: "no window of its own",
      formula: "per token: {text} = {n} B",
      formulaKV: "2 (K and V) \u00d7 {l} layers \u00d7 {kv} KV heads \u00d7 {k} dims \u00d7 {b} B",
      formulaMLA: "{l} layers \u00d7 ({r} latent + {rope} rotary) \u00d7 {b} B",
      scalesInt: "plus one {s} scale per KV head and token, for K and for V",
      scalesMLA: "plus one {s} scale per token and layer (the latent row)",
      scalesChannel: "plus V: one {s} scale per KV head and token; K: one per KV head and channel per {g} tokens, the unfilled group's keys in bf16",
      scalesFp8: "plus one fp32 scale per layer for K and one for V, {n} B for the whole cache",
      kv_bytes_per_token: "KV per token (all layers)",
      kv_scale_bytes_per_token: "of which scales",
      kv_bytes_per_token_decompressed: "if the heads were stored expanded",
      kv_bytes_per_sequence: "KV per sequence ({s} tokens)",
      kv_bytes_per_sequence_full: "without the window",
      kv_bytes_per_sequence_bf16: "the same in bf16",
      kv_scale_bytes_fixed: "fp8 scales (once per cache)",
      kv_bytes_total: "KV for the batch ({b} \u00d7 {s})",
      weights_bytes: "weights",
      total_bytes: "weights + KV",
      memory_bytes: "memory",
      bytes: "bytes",
      max_batch: "Largest batch that fits: {n} sequences of {s} tokens.",
      fits: "Batch {b} fits in {m}.",
      fitsNot: "Batch {b} does NOT fit in {m}.",
      longer: "Note: {s} tokens is more than this model's context ({n}).",
      barWeights: "weights",
      barKV: "KV cache",
      barFree: "free",
      error: "{field}: expected {what}, got \u201c{got}\u201d",
      positiveInt: "a whole number \u2265 {low}",
      positiveNumber: "a number of GiB > 0",
      divisor: "a divisor of the query heads ({h})",
      rope: "1 .. head dim \u2212 1 with a latent",
    },
    zh: {
      title: "KV 计算器",
      model: "模型",
      custom: "自己填写的数值",
      n_layers: "层数 L",
      n_heads: "查询头 H",
      n_kv_heads: "KV 头 H_kv",
      d_head: "头维度 K",
      kv_lora_rank: "MLA 潜向量（0：无）",
      qk_rope_head_dim: "MLA 旋转键",
      params_b: "参数量（十亿）",
      settings: "设置",
      seq_len: "每个序列的词元数 S",
      batch: "批大小 B",
      dtype: "KV 数据类型",
      key_scales: "int 键的缩放",
      per_token: "按词元",
      per_channel: "按通道",
      group_size: "每组键缩放的词元数",
      weights_dtype: "权重数据类型",
      window: "窗口 W（留空：无）",
      memory_gib: "显存（GiB）",
      summaryMHA: "MHA：{h} 个头，各有自己的 K 和 V",
      summaryGQA: "GQA：{h} 个查询头共享 {kv} 个 KV 头（每个 KV 头 {g} 个）",
      summaryMQA: "MQA：{h} 个查询头共享 1 个 KV 头",
      summaryMLA: "MLA：每个词元每层一个 {r} 维潜向量和一个 {rope} 维旋转键，{h} 个头共享",
      params: "{p} B 参数",
      context: "上下文 {n} 个词元",
      ownWindow: "自带窗口：{l} 层中有 {n} 层只保留 {w} 个词元",
      noWindow: "没有自带窗口",
      formula: "每个词元：{text} = {n} 字节",
      formulaKV: "2（K 和 V）\u00d7 {l} 层 \u00d7 {kv} 个 KV 头 \u00d7 {k} 维 \u00d7 {b} 字节",
      formulaMLA: "{l} 层 \u00d7（{r} 维潜向量 + {rope} 维旋转键）\u00d7 {b} 字节",
      scalesInt: "另加每个 KV 头、每个词元一个 {s} 缩放因子，K 和 V 各一个",
      scalesMLA: "另加每个词元、每一层（潜向量那一行）一个 {s} 缩放因子",
      scalesChannel: "另加缩放因子：V 每个 KV 头每个词元一个 {s}；K 每个 KV 头每个通道每 {g} 个词元一个，未满一组的键以 bf16 保存",
      scalesFp8: "另加每层 K 和 V 各一个 fp32 缩放因子，整个缓存共 {n} 字节",
      kv_bytes_per_token: "每个词元的 KV（所有层）",
      kv_scale_bytes_per_token: "其中缩放因子",
      kv_bytes_per_token_decompressed: "若按展开后的各头保存",
      kv_bytes_per_sequence: "每个序列的 KV（{s} 个词元）",
      kv_bytes_per_sequence_full: "不用窗口时",
      kv_bytes_per_sequence_bf16: "同样情形用 bf16",
      kv_scale_bytes_fixed: "fp8 缩放因子（整个缓存一份）",
      kv_bytes_total: "整批的 KV（{b} \u00d7 {s}）",
      weights_bytes: "权重",
      total_bytes: "权重 + KV",
      memory_bytes: "显存",
      bytes: "字节",
      max_batch: "能放下的最大批：{n} 个 {s} 词元的序列。",
      fits: "批大小 {b} 放得进 {m}。",
      fitsNot: "批大小 {b} 放不进 {m}。",
      longer: "注意：{s} 个词元超过了这个模型的上下文（{n}）。",
      barWeights: "权重",
      barKV: "KV 缓存",
      barFree: "空闲",
      error: "{field}：应为{what}，实际为“{got}”",
      positiveInt: " \u2265 {low} 的整数",
      positiveNumber: "大于 0 的 GiB 数",
      divisor: "查询头数（{h}）的约数",
      rope: "有潜向量时为 1 .. 头维度 \u2212 1",
    },
  };

  const CONFIG_FIELDS = ["n_layers", "n_heads", "n_kv_heads", "d_head", "kv_lora_rank", "qk_rope_head_dim", "params_b"];
  const ceil8 = (bits) => (bits + 7n) / 8n; // whole bytes, rounded up (bits >= 0)
  const min = (a, b) => (a < b ? a : b);

  /* [payload, scales, residual] bits of n tokens in one layer (KVQuant.layer_bits); n is a BigInt,
     or null for the cost per token, where per-channel key scales are spread over their group:
     then the result is a fraction, returned as numerators over the denominator `den`. */
  function layerBits(m, q, n) {
    let rows = m.n_kv_heads, kw = m.d_head, vw = m.d_value;
    if (m.kv_lora_rank) [rows, kw, vw] = [1n, 0n, m.kv_lora_rank + m.qk_rope_head_dim];
    const channel = q.kind === "int" && q.key_scales === "per_channel";
    const den = channel && n === null ? q.group_size : 1n;
    const tokens = n === null ? den : n * den; // n (or 1) tokens, scaled by den
    const nq = channel && n !== null ? (n / q.group_size) * q.group_size : tokens;
    const keyScales = channel ? (n === null ? kw : (nq / q.group_size) * kw) : tokens;
    const payload = rows * (tokens * vw + nq * kw) * q.bits;
    const residual = rows * (tokens - nq) * kw * q.float_bits;
    const scales = q.kind === "int" ? rows * (tokens + (kw ? keyScales : 0n)) * q.scale_bits : 0n;
    return { parts: [payload, scales, residual], den };
  }

  /* ModelSpec.layer_tokens: (layers, tokens each keeps) for S tokens, own and what-if windows. */
  function layerTokens(m, seq, window) {
    const cap = window === null ? seq : min(seq, window);
    const own = m.sliding_window ? min(cap, m.sliding_window) : cap;
    return [[m.n_layers - m.n_sliding_layers, cap], [m.n_sliding_layers, own]].filter(([layers]) => layers > 0n);
  }

  function sequenceBytes(m, q, seq, window) {
    const total = [0n, 0n, 0n];
    for (const [layers, n] of layerTokens(m, seq, window)) {
      layerBits(m, q, n).parts.forEach((bits, i) => { total[i] += layers * bits; });
    }
    const parts = total.map(ceil8);
    return { payload: parts[0], scales: parts[1], residual: parts[2], total: parts[0] + parts[1] + parts[2] };
  }

  /* kvtutor.measure.memory.kv_memory, the fields the widget shows. */
  function kvMemory(m, s) {
    const q = s.quant;
    const perLayer = layerBits(m, q, null);
    const token = perLayer.parts.map((bits) => (m.n_layers * bits + 8n * perLayer.den - 1n) / (8n * perLayer.den));
    const fixed = q.kind === "fp8" ? (m.kv_lora_rank ? 1n : 2n) * m.n_layers * s.fp8ScaleBytes : 0n;
    const seq = sequenceBytes(m, q, s.seq_len, s.window);
    const full = sequenceBytes({ ...m, sliding_window: null, n_sliding_layers: 0n }, q, s.seq_len, null).total;
    const bf16 = sequenceBytes(m, s.bf16, s.seq_len, s.window).total;
    const total = s.batch * seq.total + fixed;
    const weights = ceil8(m.n_params * s.weights_bits);
    const expanded = ceil8(m.n_layers * m.n_kv_heads * (m.d_head + m.d_value) * q.bits);
    const room = s.memory - weights - fixed;
    return {
      kv_bytes_per_token: token[0] + token[1] + token[2], kv_scale_bytes_per_token: token[1],
      kv_payload_bytes_per_token: token[0],
      kv_bytes_per_token_decompressed: expanded, kv_bytes_per_sequence: seq.total,
      kv_bytes_per_sequence_full: full, kv_bytes_per_sequence_bf16: bf16, kv_scale_bytes_fixed: fixed,
      kv_bytes_total: total, weights_bytes: weights, total_bytes: weights + total, memory_bytes: s.memory,
      max_batch: room > 0n ? room / seq.total : 0n, fits: weights + total <= s.memory,
    };
  }

  let counter = 0;

  function render(root, data) {
    const t = W.labels(LABELS);
    const id = `kvw-calc-${++counter}`;
    const models = Object.fromEntries(data.models.map((m) => [m.name, m]));
    const d = data.defaults;
    root.classList.add("kvw-calculator");

    const input = (name, value, attrs) => el("input", {
      id: `${id}-${name}`, name, type: "number", inputmode: "numeric", value: value === null ? "" : String(value),
      dataset: { field: name }, ...attrs,
    });
    const select = (name, options, value) => el("select", { id: `${id}-${name}`, name, dataset: { field: name } },
      options.map(([v, text]) => el("option", { value: v, selected: v === value, text })));
    const field = (name, control) => el("div", { class: "kvw-field" }, [
      el("label", { for: control.id, text: t(name) }), control,
    ]);

    const modelOptions = data.models.map((m) => [m.name, `${m.name} (${m.attention})`]).concat([["custom", t("custom")]]);
    const controls = {
      model: select("model", modelOptions, d.model),
      n_layers: input("n_layers", null, { min: 1, step: 1 }),
      n_heads: input("n_heads", null, { min: 1, step: 1 }),
      n_kv_heads: input("n_kv_heads", null, { min: 1, step: 1 }),
      d_head: input("d_head", null, { min: 1, step: 1 }),
      kv_lora_rank: input("kv_lora_rank", null, { min: 0, step: 1 }),
      qk_rope_head_dim: input("qk_rope_head_dim", null, { min: 0, step: 1 }),
      params_b: input("params_b", null, { min: 0, step: "any", inputmode: "decimal" }),
      seq_len: input("seq_len", d.seq_len, { min: 1, step: 1 }),
      batch: input("batch", d.batch, { min: 1, step: 1 }),
      dtype: select("dtype", data.kv_dtypes.map((x) => [x, x]), d.dtype),
      key_scales: select("key_scales", data.key_scales.map((x) => [x, t(x)]), d.key_scales),
      group_size: input("group_size", d.group_size, { min: 1, step: 1 }),
      weights_dtype: select("weights_dtype", data.weights_dtypes.map((x) => [x, x]), d.weights_dtype),
      window: input("window", d.window, { min: 1, step: 1 }),
      memory_gib: input("memory_gib", d.memory_gib, { min: 0, step: "any", inputmode: "decimal" }),
    };
    const summary = el("p", { class: "kvw-summary" });
    const formula = el("p", { class: "kvw-formula" });
    const message = el("p", { class: "kvw-error", role: "alert" });
    const results = el("table", { class: "kvw-results" });
    const bar = el("div", { class: "kvw-bar", "aria-hidden": "true" });
    const verdict = el("p", { class: "kvw-verdict", role: "status", "aria-live": "polite" });
    const legend = () => el("p", { class: "kvw-legend" }, [["weights", "barWeights"], ["kv", "barKV"], ["free", "barFree"]]
      .map(([cls, key]) => el("span", { class: "kvw-legend-item" }, [el("span", { class: `kvw-swatch kvw-seg-${cls}` }), t(key)])));

    root.append(
      el("p", { class: "kvw-title", text: t("title") }),
      el("div", { class: "kvw-forms" }, [
        el("fieldset", { class: "kvw-fieldset" }, [el("legend", { text: t("model") }), field("model", controls.model), summary,
          el("div", { class: "kvw-grid" }, CONFIG_FIELDS.map((name) => field(name, controls[name])))]),
        el("fieldset", { class: "kvw-fieldset" }, [el("legend", { text: t("settings") }),
          el("div", { class: "kvw-grid" }, ["seq_len", "batch", "dtype", "key_scales", "group_size", "weights_dtype", "window", "memory_gib"]
            .map((name) => field(name, controls[name])))]),
      ]),
      formula, message, results, bar, legend(), verdict,
    );

    function fillConfig(m) {
      controls.n_layers.value = m.n_layers;
      controls.n_heads.value = m.n_heads;
      controls.n_kv_heads.value = m.n_kv_heads;
      controls.d_head.value = m.d_head;
      controls.kv_lora_rank.value = m.kv_lora_rank;
      controls.qk_rope_head_dim.value = m.qk_rope_head_dim;
      controls.params_b.value = String(m.n_params / 1e9);
    }

    controls.model.addEventListener("change", () => {
      if (controls.model.value !== "custom") fillConfig(models[controls.model.value]);
      update();
    });
    for (const name of CONFIG_FIELDS) {
      controls[name].addEventListener("input", () => { controls.model.value = "custom"; update(); });
    }
    for (const name of ["seq_len", "batch", "dtype", "key_scales", "group_size", "weights_dtype", "window", "memory_gib"]) {
      controls[name].addEventListener(controls[name].tagName === "SELECT" ? "change" : "input", update);
    }

    class InputError extends Error {}
    const bad = (name, what, got) => { throw new InputError(fill(t("error"), { field: t(name), what, got })); };
    function integer(name, low, optional) {
      const text = controls[name].value.trim();
      if (optional && text === "") return null;
      if (!/^\d+$/.test(text) || BigInt(text) < BigInt(low) || BigInt(text) > BigInt(data.max_count)) {
        bad(name, fill(t("positiveInt"), { low }), text);
      }
      return BigInt(text);
    }

    /* The model of the form: a bundled one as exported, or one from the typed numbers. */
    function currentModel() {
      const name = controls.model.value;
      if (name !== "custom") {
        const m = models[name];
        return { ...Object.fromEntries(["n_layers", "n_heads", "n_kv_heads", "d_head", "d_value", "kv_lora_rank",
          "qk_rope_head_dim", "n_sliding_layers", "n_params"].map((k) => [k, BigInt(m[k])])),
        sliding_window: m.sliding_window === null ? null : BigInt(m.sliding_window), attention: m.attention,
        max_seq_len: BigInt(m.max_seq_len), name };
      }
      const m = { name, sliding_window: null, n_sliding_layers: 0n, max_seq_len: null };
      for (const k of ["n_layers", "n_heads", "d_head"]) m[k] = integer(k, 1);
      for (const k of ["kv_lora_rank", "qk_rope_head_dim"]) m[k] = integer(k, 0);
      const params = Number(controls.params_b.value);
      if (controls.params_b.value.trim() === "" || !Number.isFinite(params) || params < 0) bad("params_b", t("positiveNumber"), controls.params_b.value);
      m.n_params = BigInt(Math.round(params * 1e9));
      m.d_value = m.d_head;
      if (m.kv_lora_rank) {
        if (!(m.qk_rope_head_dim >= 1n && m.qk_rope_head_dim < m.d_head)) bad("qk_rope_head_dim", t("rope"), controls.qk_rope_head_dim.value);
        m.n_kv_heads = m.n_heads;
        m.attention = "MLA";
      } else {
        m.n_kv_heads = integer("n_kv_heads", 1);
        if (m.n_heads % m.n_kv_heads) bad("n_kv_heads", fill(t("divisor"), { h: m.n_heads }), controls.n_kv_heads.value);
        m.attention = m.n_kv_heads === m.n_heads ? "MHA" : m.n_kv_heads === 1n ? "MQA" : "GQA";
      }
      return m;
    }

    function quant(dtype, keyScales, groupSize) {
      const info = data.dtypes[dtype];
      const channel = info.kind === "int" && keyScales === "per_channel";
      return { kind: info.kind, bits: BigInt(info.bits), scale_bits: BigInt(data.scale_bits),
        float_bits: BigInt(data.float_bits), key_scales: channel ? "per_channel" : "per_token", group_size: groupSize };
    }

    function currentSettings(m) {
      const memoryGib = Number(controls.memory_gib.value);
      if (controls.memory_gib.value.trim() === "" || !(memoryGib > 0) || memoryGib > data.max_memory_gib) {
        bad("memory_gib", t("positiveNumber"), controls.memory_gib.value);
      }
      const memory = BigInt(Math.trunc(memoryGib * data.gib)); // int(memory_gib * GIB), as Python rounds it
      if (memory < 1n) bad("memory_gib", t("positiveNumber"), controls.memory_gib.value);
      const dtype = controls.dtype.value;
      const channelAllowed = data.dtypes[dtype].kind === "int" && !m.kv_lora_rank;
      controls.key_scales.disabled = !channelAllowed;
      const keyScales = channelAllowed ? controls.key_scales.value : "per_token";
      controls.group_size.disabled = keyScales !== "per_channel";
      const groupSize = keyScales === "per_channel" ? integer("group_size", 1) : BigInt(data.group_size);
      return {
        seq_len: integer("seq_len", 1), batch: integer("batch", 1), window: integer("window", 1, true),
        quant: quant(dtype, keyScales, groupSize), bf16: quant("bf16", "per_token", groupSize),
        weights_bits: BigInt(data.dtypes[controls.weights_dtype.value].bits), memory,
        fp8ScaleBytes: BigInt(data.fp8_scale_bytes), dtype, keyScales, memoryGib,
      };
    }

    function update() {
      const config = controls.model.value === "custom";
      controls.n_kv_heads.disabled = false;
      let m, s, r;
      try {
        m = currentModel();
        controls.n_kv_heads.disabled = Boolean(m.kv_lora_rank);
        if (m.kv_lora_rank) controls.n_kv_heads.value = String(m.n_heads);
        s = currentSettings(m);
        r = kvMemory(m, s);
      } catch (err) {
        if (!(err instanceof InputError)) throw err;
        message.textContent = err.message;
        root.dataset.valid = "false";
        return;
      }
      message.textContent = "";
      root.dataset.valid = "true";
      root.dataset.model = m.name;
      showSummary(m, config);
      showFormula(m, s, r);
      showResults(m, s, r);
    }

    function showSummary(m, config) {
      const kind = fill(t(`summary${m.attention}`), {
        h: m.n_heads, kv: m.n_kv_heads, g: m.kv_lora_rank ? 1 : m.n_heads / m.n_kv_heads,
        r: m.kv_lora_rank, rope: m.qk_rope_head_dim,
      });
      const parts = [kind, fill(t("params"), { p: W.fixed(Number(m.n_params) / 1e9, 2) })];
      if (!config) {
        parts.push(fill(t("context"), { n: grouped(m.max_seq_len) }));
        parts.push(m.sliding_window ? fill(t("ownWindow"), { w: grouped(m.sliding_window), n: m.n_sliding_layers, l: m.n_layers }) : t("noWindow"));
      }
      summary.textContent = parts.join(" \u00b7 ");
    }

    function showFormula(m, s, r) {
      const b = Number(s.quant.bits) / 8;
      const text = m.kv_lora_rank
        ? fill(t("formulaMLA"), { l: m.n_layers, r: m.kv_lora_rank, rope: m.qk_rope_head_dim, b })
        : fill(t("formulaKV"), { l: m.n_layers, kv: m.n_kv_heads, k: m.d_head, b });
      const lines = [fill(t("formula"), { text, n: grouped(r.kv_payload_bytes_per_token) })];
      if (s.quant.kind === "int") {
        lines.push(s.quant.key_scales === "per_channel"
          ? fill(t("scalesChannel"), { s: data.scale_dtype, g: s.quant.group_size })
          : fill(t(m.kv_lora_rank ? "scalesMLA" : "scalesInt"), { s: data.scale_dtype }));
      } else if (s.quant.kind === "fp8") {
        lines.push(fill(t("scalesFp8"), { n: grouped(r.kv_scale_bytes_fixed) }));
      }
      formula.replaceChildren(...lines.map((line, i) => (i ? [el("br"), line] : [line])).flat());
    }

    function showResults(m, s, r) {
      const S = grouped(s.seq_len);
      const rows = [["kv_bytes_per_token", {}]];
      if (r.kv_scale_bytes_per_token) rows.push(["kv_scale_bytes_per_token", {}, true]);
      if (m.kv_lora_rank) rows.push(["kv_bytes_per_token_decompressed", {}, true]);
      rows.push(["kv_bytes_per_sequence", { s: S }]);
      if (r.kv_bytes_per_sequence_full !== r.kv_bytes_per_sequence) rows.push(["kv_bytes_per_sequence_full", {}, true]);
      if (r.kv_bytes_per_sequence_bf16 !== r.kv_bytes_per_sequence) rows.push(["kv_bytes_per_sequence_bf16", {}, true]);
      if (r.kv_scale_bytes_fixed) rows.push(["kv_scale_bytes_fixed", {}]);
      rows.push(["kv_bytes_total", { b: s.batch, s: S }], ["weights_bytes", {}], ["total_bytes", {}], ["memory_bytes", {}]);
      results.replaceChildren(
        el("thead", {}, el("tr", {}, [el("th", { scope: "col" }), el("th", { scope: "col", class: "kvw-num", text: t("bytes") }), el("th", { scope: "col" })])),
        el("tbody", {}, rows.map(([key, values, sub]) => el("tr", { class: sub ? "kvw-sub" : "" }, [
          el("th", { scope: "row", text: fill(t(key), values) }),
          el("td", { class: "kvw-num", dataset: { key }, text: grouped(r[key]) }),
          el("td", { class: "kvw-num kvw-human", text: formatBytes(r[key]) }),
        ]))),
      );
      const memoryText = formatBytes(s.memory);
      const lines = [
        el("span", { dataset: { key: "fits", value: String(r.fits) }, text: fill(t(r.fits ? "fits" : "fitsNot"), { b: s.batch, m: memoryText }) }),
        " ",
        el("span", { dataset: { key: "max_batch", value: String(r.max_batch) }, text: fill(t("max_batch"), { n: grouped(r.max_batch), s: S }) }),
      ];
      if (m.max_seq_len !== null && s.seq_len > m.max_seq_len) {
        lines.push(" ", el("span", { class: "kvw-warn", text: fill(t("longer"), { s: S, n: grouped(m.max_seq_len) }) }));
      }
      verdict.replaceChildren(...lines);
      verdict.classList.toggle("kvw-no-fit", !r.fits);
      const used = r.weights_bytes + r.kv_bytes_total;
      const whole = used > s.memory ? used : s.memory;
      const pct = (n) => `${(Number((n * 100000n) / whole) / 1000).toFixed(3)}%`;
      const seg = (cls, n, label) => el("span", { class: `kvw-seg ${cls}`, style: `width: ${pct(n)}`, title: `${label}: ${formatBytes(n)}` });
      bar.replaceChildren(
        seg("kvw-seg-weights", r.weights_bytes, t("barWeights")),
        seg("kvw-seg-kv", r.kv_bytes_total, t("barKV")),
        seg("kvw-seg-free", used < s.memory ? s.memory - used : 0n, t("barFree")),
      );
    }

    const start = models[d.model] || data.models[0];
    controls.model.value = start.name;
    fillConfig(start);
    update();
  }

  W.register("kv-calculator", render);
})();
