/* The KV calculator: a bundled model, a pasted config.json (read by kv-config.js by the rule table
   of kvtutor.models.families, the one kvtutor.models.hf_config reads by, exported with the data as
   "families") or typed config numbers, a context length, a batch, the KV dtype with
   its scales, an optional window and a memory budget -> bytes per token, per sequence, for the
   batch, and the largest batch that fits beside the weights. The models and the constants (bits
   per number, scale formats) are exported by kvtutor.book.widgets.kv_calculator; this file holds
   only the arithmetic of kvtutor.measure.memory.kv_memory, in exact integers (BigInt), so that
   every number equals `python -m kvtutor kv-memory ... --json`: a hybrid's KV counts its attention
   layers only and its other layers keep a constant state per sequence, reported beside it; a
   state-space model keeps only that state. A refused input blanks every result that depends on
   it (and only those), and the message names the field and its unit; a refused config.json
   lists every bad key and leaves no other model's numbers in the fields. A count may be typed as
   1e6. A context past the model's own is noted beside the per-sequence figure.
   Needs kv-widgets.js and kv-config.js first. */
(function () {
  "use strict";
  const W = window.kvtutorWidgets;
  const { el, fill, grouped, formatBytes } = W;
  const MAX_PARAMS_B = 1000000; // a million billion parameters: far past any model, and exact in BigInt

  const LABELS = {
    en: {
      title: "KV calculator",
      model: "Model",
      custom: "your own numbers",
      pasted: "from config.json: {name}",
      notRead: "from config.json (not read)",
      configBox: "config.json: paste a model's, or load a bundled one to edit",
      loadBundled: "load a bundled config.json",
      loadModels: "bundled models",
      loadExamples: "one of each further family",
      loadNone: "\u2014",
      read: "Read config.json",
      readDone: "Read {name} ({type}).",
      n_layers: "attention layers L",
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
      summaryNone: "no attention: a state-space model keeps no KV cache",
      summaryState: "{s} of {l} layers keep a constant state of {n} numbers per sequence instead of K and V",
      nested: "the language model of a {w} config (its other towers are not counted)",
      noContext: "no context length in its config",
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
      formulaState: "state per sequence: {s} layers \u00d7 {n} numbers \u00d7 {b} B ({d}) = {bytes} B, whatever its length",
      kv_bytes_per_token: "KV per token (all layers)",
      kv_bytes_per_token_hybrid: "KV per token ({n} attention layers)",
      kv_scale_bytes_per_token: "of which scales",
      kv_bytes_per_token_decompressed: "if the heads were stored expanded",
      kv_bytes_per_sequence: "KV per sequence ({s} tokens)",
      kv_bytes_per_sequence_plain: "KV per sequence",
      kv_bytes_per_sequence_full: "without the window",
      kv_bytes_per_sequence_bf16: "the same in bf16",
      kv_scale_bytes_fixed: "fp8 scales (once per cache)",
      state_bytes_per_sequence: "state per sequence ({n} layers)",
      beyond_context: "more than this model's context ({n} tokens)",
      kv_bytes_total: "KV for the batch ({b} \u00d7 {s})",
      kv_bytes_total_plain: "KV for the batch",
      kv_state_total: "KV + state for the batch ({b} \u00d7 {s})",
      kv_state_total_plain: "KV + state for the batch",
      weights_bytes: "weights",
      total_bytes: "weights + KV",
      total_bytes_state: "weights + KV + state",
      memory_bytes: "memory",
      bytes: "bytes",
      max_batch: "Largest batch that fits: {n} sequences of {s} tokens.",
      fits: "Batch {b} fits in {m}.",
      fitsNot: "Batch {b} does NOT fit in {m}.",
      barWeights: "weights",
      barKV: "KV cache",
      barFree: "free",
      error: "{field}: expected {what}, got \u201c{got}\u201d",
      blankNote: "Results that need a refused value are left blank (\u2014).",
      count: "a whole number of {unit} from {low} to {max}",
      countOrNone: "a whole number of {unit} from {low} to {max}, or nothing for no window",
      u_layers: "layers",
      u_heads: "heads",
      u_dims: "dimensions per head",
      u_latent: "latent dimensions",
      u_rotary: "rotary dimensions",
      u_tokens: "tokens",
      u_sequences: "sequences",
      params_what: "a number of billions of parameters above 0 and at most {max}",
      memory_what: "a number of GiB above 0 and at most {max}",
      divisor: "a number of heads that divides the {h} query heads",
      rope: "a whole number of rotary dimensions from 1 to head dim \u2212 1 = {max} with a latent",
    },
    zh: {
      title: "KV 计算器",
      model: "模型",
      custom: "自己填写的数值",
      pasted: "来自 config.json：{name}",
      notRead: "来自 config.json（未能读取）",
      configBox: "config.json：粘贴一个模型的配置，或载入一个内置配置来修改",
      loadBundled: "载入内置的 config.json",
      loadModels: "内置模型",
      loadExamples: "其他架构族各一例",
      loadNone: "\u2014",
      read: "读取 config.json",
      readDone: "已读取 {name}（{type}）。",
      n_layers: "注意力层数 L",
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
      summaryNone: "没有注意力：状态空间模型不保留 KV 缓存",
      summaryState: "{l} 层中有 {s} 层不存 K 和 V，而是为每个序列保留 {n} 个数的固定大小状态",
      nested: "一个 {w} 配置中的语言模型（其他塔不计入）",
      noContext: "配置中没有给出上下文长度",
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
      formulaState: "每个序列的状态：{s} 层 \u00d7 {n} 个数 \u00d7 {b} 字节（{d}）= {bytes} 字节，与长度无关",
      kv_bytes_per_token: "每个词元的 KV（所有层）",
      kv_bytes_per_token_hybrid: "每个词元的 KV（{n} 个注意力层）",
      kv_scale_bytes_per_token: "其中缩放因子",
      kv_bytes_per_token_decompressed: "若按展开后的各头保存",
      kv_bytes_per_sequence: "每个序列的 KV（{s} 个词元）",
      kv_bytes_per_sequence_plain: "每个序列的 KV",
      kv_bytes_per_sequence_full: "不用窗口时",
      kv_bytes_per_sequence_bf16: "同样情形用 bf16",
      kv_scale_bytes_fixed: "fp8 缩放因子（整个缓存一份）",
      state_bytes_per_sequence: "每个序列的状态（{n} 层）",
      beyond_context: "超过了这个模型的上下文（{n} 个词元）",
      kv_bytes_total: "整批的 KV（{b} \u00d7 {s}）",
      kv_bytes_total_plain: "整批的 KV",
      kv_state_total: "整批的 KV 与状态（{b} \u00d7 {s}）",
      kv_state_total_plain: "整批的 KV 与状态",
      weights_bytes: "权重",
      total_bytes: "权重 + KV",
      total_bytes_state: "权重 + KV + 状态",
      memory_bytes: "显存",
      bytes: "字节",
      max_batch: "能放下的最大批：{n} 个 {s} 词元的序列。",
      fits: "批大小 {b} 放得进 {m}。",
      fitsNot: "批大小 {b} 放不进 {m}。",
      barWeights: "权重",
      barKV: "KV 缓存",
      barFree: "空闲",
      error: "{field}：应为{what}，实际为“{got}”",
      blankNote: "凡是用到被拒绝数值的结果都留空（\u2014）。",
      count: " {low} 到 {max} 之间的整数（单位：{unit}）",
      countOrNone: " {low} 到 {max} 之间的整数（单位：{unit}），或留空表示无窗口",
      u_layers: "层",
      u_heads: "头",
      u_dims: "每个头的维数",
      u_latent: "潜向量维数",
      u_rotary: "旋转维数",
      u_tokens: "词元",
      u_sequences: "序列",
      params_what: "大于 0、至多 {max} 的十亿参数数",
      memory_what: "大于 0、至多 {max} 的 GiB 数",
      divisor: "能整除 {h} 个查询头的头数",
      rope: "有潜向量时为 1 到头维度 \u2212 1 = {max} 之间的整数（单位：旋转维数）",
    },
  };

  const CONFIG_FIELDS = ["n_layers", "n_heads", "n_kv_heads", "d_head", "kv_lora_rank", "qk_rope_head_dim", "params_b"];
  const SETTING_FIELDS = ["seq_len", "batch", "dtype", "key_scales", "group_size", "weights_dtype", "window", "memory_gib"];
  const UNITS = { n_layers: "u_layers", n_heads: "u_heads", n_kv_heads: "u_heads", d_head: "u_dims", kv_lora_rank: "u_latent",
    qk_rope_head_dim: "u_rotary", seq_len: "u_tokens", batch: "u_sequences", group_size: "u_tokens", window: "u_tokens" };
  const ROW_FIELDS = ["n_layers", "n_heads", "n_kv_heads", "d_head", "d_value", "kv_lora_rank", "qk_rope_head_dim",
    "n_sliding_layers", "n_params", "max_seq_len", "n_state_layers", "state_numbers_per_layer"];
  const ceil8 = (bits) => (bits + 7n) / 8n; // whole bytes, rounded up (bits >= 0)
  const min = (a, b) => (a < b ? a : b);
  const known = (...xs) => xs.every((x) => x !== undefined);

  /* A whole number typed as digits, or in decimal or exponent notation (1e6, 2.5e3), exactly; null
     for anything else or a number that is not whole. */
  function wholeNumber(text) {
    const m = /^(\d*)(?:\.(\d*))?(?:[eE]([+-]?\d{1,4}))?$/.exec(text);
    if (!m || !(m[1] || m[2])) return null;
    const exp = Number(m[3] || 0) - (m[2] || "").length;
    const n = BigInt((m[1] || "") + (m[2] || ""));
    if (exp >= 0) return n * 10n ** BigInt(exp);
    const d = 10n ** BigInt(-exp);
    return n % d === 0n ? n / d : null;
  }

  /* [payload, scales, residual] bits of n tokens in one layer (KVQuant.layer_bits); n is a BigInt,
     or null for the cost per token, where per-channel key scales are spread over their group:
     then the result is a fraction, returned as numerators over the denominator `den`. */
  function layerBits(m, q, n) {
    let rows = m.n_kv_heads, kw = m.d_head, vw = m.d_value; // per attention layer
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

  /* ModelSpec.layer_tokens: (attention layers, tokens each keeps) for S tokens, own and what-if windows. */
  function layerTokens(m, seq, window) {
    const cap = window === null ? seq : min(seq, window);
    const own = m.sliding_window ? min(cap, m.sliding_window) : cap;
    return [[m.n_attention_layers - m.n_sliding_layers, cap], [m.n_sliding_layers, own]].filter(([layers]) => layers > 0n);
  }

  function sequenceBytes(m, q, seq, window) {
    const total = [0n, 0n, 0n];
    for (const [layers, n] of layerTokens(m, seq, window)) {
      layerBits(m, q, n).parts.forEach((bits, i) => { total[i] += layers * bits; });
    }
    return total.map(ceil8).reduce((a, b) => a + b, 0n);
  }

  /* kvtutor.measure.memory.kv_memory's fields, each computed only from inputs that were accepted:
     undefined where one it needs was refused. `m` is the model's KV sizes, `params` its weight
     count, `s` the settings (each one undefined when refused). */
  function kvMemory(m, params, s) {
    const r = {};
    const q = s.quant;
    if (known(m, q)) {
      const perLayer = layerBits(m, q, null);
      const token = perLayer.parts.map((bits) => (m.n_attention_layers * bits + 8n * perLayer.den - 1n) / (8n * perLayer.den));
      Object.assign(r, { kv_bytes_per_token: token[0] + token[1] + token[2], kv_scale_bytes_per_token: token[1],
        kv_payload_bytes_per_token: token[0] });
    }
    if (known(m)) {
      r.kv_bytes_per_token_decompressed = ceil8(m.n_attention_layers * m.n_kv_heads * (m.d_head + m.d_value) * s.bits);
      r.kv_scale_bytes_fixed = s.kind === "fp8" ? (m.kv_lora_rank ? 1n : 2n) * m.n_attention_layers * s.fp8ScaleBytes : 0n;
      // kv_stored.state_bytes_per_sequence: a float cache's own format, else bf16 (KVQuant.float_dtype)
      r.state_bytes_per_sequence = ceil8(m.n_state_layers * m.state_numbers_per_layer * s.state_bits);
    }
    if (known(m, q, s.seq_len, s.window)) r.kv_bytes_per_sequence = sequenceBytes(m, q, s.seq_len, s.window);
    if (known(m, q, s.seq_len)) {
      r.kv_bytes_per_sequence_full = sequenceBytes({ ...m, sliding_window: null, n_sliding_layers: 0n }, q, s.seq_len, null);
    }
    if (known(m, s.seq_len, s.window)) r.kv_bytes_per_sequence_bf16 = sequenceBytes(m, s.bf16, s.seq_len, s.window);
    if (known(r.kv_bytes_per_sequence, r.state_bytes_per_sequence)) r.cache = r.kv_bytes_per_sequence + r.state_bytes_per_sequence;
    if (known(r.cache, s.batch, r.kv_scale_bytes_fixed)) r.kv_bytes_total = s.batch * r.cache + r.kv_scale_bytes_fixed;
    if (known(params)) r.weights_bytes = ceil8(params * s.weights_bits);
    if (known(r.weights_bytes, r.kv_bytes_total)) r.total_bytes = r.weights_bytes + r.kv_bytes_total;
    r.memory_bytes = s.memory;
    if (known(s.memory, r.weights_bytes, r.kv_scale_bytes_fixed, r.cache)) {
      const room = s.memory - r.weights_bytes - r.kv_scale_bytes_fixed;
      r.max_batch = room > 0n ? room / r.cache : 0n;
    }
    if (known(r.total_bytes, s.memory)) r.fits = r.total_bytes <= s.memory;
    return r;
  }

  let counter = 0;

  function render(root, data) {
    const t = W.labels(LABELS);
    const id = `kvw-calc-${++counter}`;
    const models = Object.fromEntries(data.models.map((m) => [m.name, m]));
    const d = data.defaults;
    const maxCount = grouped(data.max_count);
    root.classList.add("kvw-calculator");
    let pasted = null; // the model read from the box, or a ConfigError
    let readStatus = "";

    const input = (name, value, mode) => el("input", {
      id: `${id}-${name}`, name, type: "text", inputmode: mode || "numeric", autocomplete: "off", spellcheck: "false",
      value: value === null ? "" : String(value), dataset: { field: name },
    });
    const select = (name, options, value) => el("select", { id: `${id}-${name}`, name, dataset: { field: name } },
      options.map(([v, text]) => el("option", { value: v, selected: v === value, text })));
    const field = (name, control) => el("div", { class: "kvw-field" }, [
      el("label", { for: control.id, text: t(name) }), control,
    ]);

    const pastedOption = el("option", { value: "pasted", text: t("notRead"), disabled: true });
    const modelOptions = data.models.map((m) => [m.name, `${m.name} (${m.attention})`]).concat([["custom", t("custom")]]);
    const controls = {
      model: select("model", modelOptions, d.model),
      ...Object.fromEntries(CONFIG_FIELDS.map((name) => [name, input(name, null, name === "params_b" ? "decimal" : "numeric")])),
      seq_len: input("seq_len", d.seq_len),
      batch: input("batch", d.batch),
      dtype: select("dtype", data.kv_dtypes.map((x) => [x, x]), d.dtype),
      key_scales: select("key_scales", data.key_scales.map((x) => [x, t(x)]), d.key_scales),
      group_size: input("group_size", d.group_size),
      weights_dtype: select("weights_dtype", data.weights_dtypes.map((x) => [x, x]), d.weights_dtype),
      window: input("window", d.window),
      memory_gib: input("memory_gib", d.memory_gib, "decimal"),
    };
    controls.model.append(pastedOption);
    const box = el("textarea", { id: `${id}-config`, rows: 5, spellcheck: "false", autocomplete: "off", class: "kvw-config",
      dataset: { field: "config" }, placeholder: "{\"model_type\": \"llama\", \"hidden_size\": 4096, ...}" });
    const configs = { ...data.configs, ...data.examples };
    const loader = el("select", { id: `${id}-load`, name: "load", dataset: { field: "load" } }, [
      el("option", { value: "", text: t("loadNone") }),
      ...[["loadModels", data.configs], ["loadExamples", data.examples]].map(([label, group]) => el("optgroup", { label: t(label) },
        Object.keys(group).map((n) => el("option", { value: n, text: n })))),
    ]);
    const readButton = el("button", { type: "button", class: "kvw-button", dataset: { action: "read" }, text: t("read") });
    const readLine = el("p", { class: "kvw-read-status", role: "status", "aria-live": "polite" });
    const summary = el("p", { class: "kvw-summary" });
    const formula = el("p", { class: "kvw-formula", dataset: { key: "formula" } });
    const message = el("div", { class: "kvw-error", role: "alert" });
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
          el("div", { class: "kvw-grid" }, SETTING_FIELDS.map((name) => field(name, controls[name])))]),
      ]),
      el("details", { class: "kvw-config-box" }, [
        el("summary", { text: t("configBox") }),
        el("div", { class: "kvw-field" }, [el("label", { for: box.id, class: "kvw-visually-hidden", text: "config.json" }), box]),
        el("div", { class: "kvw-config-actions" }, [readButton, field("loadBundled", loader)]),
        readLine,
      ]),
      formula, message, results, bar, legend(), verdict,
    );

    /* A model row (exported, or read from a config) with BigInt sizes. */
    function fromRow(row) {
      const m = Object.fromEntries(ROW_FIELDS.map((k) => [k, BigInt(row[k])]));
      return { ...m, sliding_window: row.sliding_window === null ? null : BigInt(row.sliding_window),
        n_attention_layers: m.n_layers - m.n_state_layers, attention: row.attention, name: row.name, nested_in: row.nested_in };
    }

    /* The typed-config fields show the model's attention layers (the ones that keep K and V). */
    function fillConfig(m) {
      controls.n_layers.value = String(m.n_layers - m.n_state_layers);
      for (const k of ["n_heads", "n_kv_heads", "d_head", "kv_lora_rank", "qk_rope_head_dim"]) controls[k].value = String(m[k]);
      controls.params_b.value = String(Number(m.n_params) / 1e9);
    }

    function readBox() {
      try {
        const spec = W.readConfig(box.value, data.families);
        pasted = { ...spec, name: spec.name };
        pastedOption.textContent = fill(t("pasted"), { name: spec.name });
        readStatus = fill(t("readDone"), { name: spec.name, type: spec.model_type });
        fillConfig(pasted);
      } catch (err) {
        if (!(err instanceof W.ConfigError)) throw err;
        pasted = err;
        pastedOption.textContent = t("notRead");
        readStatus = "";
        for (const k of CONFIG_FIELDS) controls[k].value = ""; // no other model's numbers stay
      }
      pastedOption.disabled = false;
      controls.model.value = "pasted";
      update();
    }
    readButton.addEventListener("click", readBox);
    box.addEventListener("keydown", (ev) => { if (ev.key === "Enter" && (ev.ctrlKey || ev.metaKey)) readBox(); });
    loader.addEventListener("change", () => {
      if (!loader.value) return;
      box.value = configs[loader.value];
      readBox();
    });
    controls.model.addEventListener("change", () => {
      const name = controls.model.value;
      if (name === "pasted") { if (!(pasted instanceof W.ConfigError) && pasted) fillConfig(pasted); }
      else if (name !== "custom") fillConfig(models[name]);
      update();
    });
    for (const name of CONFIG_FIELDS) {
      controls[name].addEventListener("input", () => { controls.model.value = "custom"; update(); });
    }
    for (const name of SETTING_FIELDS) {
      controls[name].addEventListener(controls[name].tagName === "SELECT" ? "change" : "input", update);
    }

    /* Each refused field: its message, and the field marked. */
    let errors = [];
    function refuse(name, what) {
      errors.push(fill(t("error"), { field: t(name), what, got: controls[name].value }));
      controls[name].setAttribute("aria-invalid", "true");
      return undefined;
    }
    function integer(name, low, optional) {
      const text = controls[name].value.trim();
      if (optional && text === "") return null;
      const n = wholeNumber(text);
      if (n !== null && n >= BigInt(low) && n <= BigInt(data.max_count)) return n;
      return refuse(name, fill(t(optional ? "countOrNone" : "count"), { unit: t(UNITS[name]), low, max: maxCount }));
    }
    function decimal(name, most, what) {
      const text = controls[name].value.trim();
      const x = Number(text);
      if (/^(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$/.test(text) && x > 0 && x <= most) return x;
      return refuse(name, fill(t(what), { max: grouped(most) }));
    }

    /* The model of the form: a bundled one, the pasted one, or one from the typed numbers, with
       its weight count apart (a refused parameter count blanks only the weights). */
    function currentModel() {
      const name = controls.model.value;
      if (name === "pasted") {
        if (pasted instanceof W.ConfigError || pasted === null) return { m: undefined, params: undefined };
        const m = fromRow(pasted);
        return { m, params: m.n_params, row: pasted };
      }
      if (name !== "custom") {
        const m = fromRow(models[name]);
        return { m, params: m.n_params, row: models[name] };
      }
      const m = { name, sliding_window: null, n_sliding_layers: 0n, max_seq_len: null, n_state_layers: 0n,
        state_numbers_per_layer: 0n };
      for (const k of ["n_layers", "n_heads", "d_head"]) m[k] = integer(k, 1);
      m.n_attention_layers = m.n_layers;
      for (const k of ["kv_lora_rank", "qk_rope_head_dim"]) m[k] = integer(k, 0);
      const paramsB = decimal("params_b", MAX_PARAMS_B, "params_what");
      const params = paramsB === undefined ? undefined : BigInt(Math.round(paramsB * 1e9));
      m.d_value = m.d_head;
      if (m.kv_lora_rank) {
        if (known(m.qk_rope_head_dim, m.d_head) && !(m.qk_rope_head_dim >= 1n && m.qk_rope_head_dim < m.d_head)) {
          m.qk_rope_head_dim = refuse("qk_rope_head_dim", fill(t("rope"), { max: m.d_head - 1n }));
        }
        m.n_kv_heads = m.n_heads;
        m.attention = "MLA";
      } else {
        m.n_kv_heads = integer("n_kv_heads", 1);
        if (known(m.n_heads, m.n_kv_heads) && m.n_heads % m.n_kv_heads) {
          m.n_kv_heads = refuse("n_kv_heads", fill(t("divisor"), { h: m.n_heads }));
        }
        if (known(m.n_heads, m.n_kv_heads)) m.attention = m.n_kv_heads === m.n_heads ? "MHA" : m.n_kv_heads === 1n ? "MQA" : "GQA";
      }
      const sizes = ["n_layers", "n_heads", "n_kv_heads", "d_head", "kv_lora_rank", "qk_rope_head_dim"];
      return { m: sizes.every((k) => m[k] !== undefined) ? m : undefined, params };
    }

    function quant(dtype, keyScales, groupSize) {
      const info = data.dtypes[dtype];
      const channel = info.kind === "int" && keyScales === "per_channel";
      if (channel && groupSize === undefined) return undefined;
      return { kind: info.kind, bits: BigInt(info.bits), scale_bits: BigInt(data.scale_bits),
        float_bits: BigInt(data.float_bits), key_scales: channel ? "per_channel" : "per_token",
        group_size: channel ? groupSize : BigInt(data.group_size) };
    }

    function currentSettings(m) {
      const memoryGib = decimal("memory_gib", data.max_memory_gib, "memory_what");
      // int(memory_gib * GIB), as Python rounds it: at least one byte
      const memory = memoryGib === undefined ? undefined : BigInt(Math.trunc(memoryGib * data.gib));
      if (memory === 0n) refuse("memory_gib", fill(t("memory_what"), { max: grouped(data.max_memory_gib) }));
      const dtype = controls.dtype.value;
      const channelAllowed = data.dtypes[dtype].kind === "int" && !(m && m.kv_lora_rank);
      controls.key_scales.disabled = !channelAllowed;
      const keyScales = channelAllowed ? controls.key_scales.value : "per_token";
      controls.group_size.disabled = keyScales !== "per_channel";
      const groupSize = keyScales === "per_channel" ? integer("group_size", 1) : BigInt(data.group_size);
      return {
        seq_len: integer("seq_len", 1), batch: integer("batch", 1), window: integer("window", 1, true),
        quant: quant(dtype, keyScales, groupSize), bf16: quant("bf16", "per_token", 1n), kind: data.dtypes[dtype].kind,
        bits: BigInt(data.dtypes[dtype].bits), weights_bits: BigInt(data.dtypes[controls.weights_dtype.value].bits),
        memory: memory === 0n ? undefined : memory, fp8ScaleBytes: BigInt(data.fp8_scale_bytes), dtype, keyScales,
        state_bits: data.dtypes[dtype].kind === "float" ? BigInt(data.dtypes[dtype].bits) : BigInt(data.float_bits),
        state_dtype: data.dtypes[dtype].kind === "float" ? dtype : data.float_dtype,
      };
    }

    function update() {
      errors = [];
      root.querySelectorAll("[aria-invalid]").forEach((node) => node.removeAttribute("aria-invalid"));
      const config = controls.model.value === "custom";
      const { m, params, row } = currentModel();
      controls.n_kv_heads.disabled = Boolean(m && m.kv_lora_rank);
      if (m && m.kv_lora_rank && config) controls.n_kv_heads.value = String(m.n_heads);
      const s = currentSettings(m);
      const r = kvMemory(m, params, s);
      const lines = controls.model.value === "pasted" && pasted instanceof W.ConfigError ? pasted.problems.map((p) => p.message) : [];
      lines.push(...errors);
      if (lines.length) lines.push(t("blankNote"));
      message.replaceChildren(...lines.map((line) => el("p", { text: line })));
      readLine.textContent = controls.model.value === "pasted" && !(pasted instanceof W.ConfigError) ? readStatus : "";
      root.dataset.valid = lines.length ? "false" : "true";
      root.dataset.model = m ? m.name : "";
      showSummary(m, params, row);
      showFormula(m, s, r);
      showResults(m, s, r);
    }

    function showSummary(m, params, row) {
      const parts = [];
      if (m) {
        const attention = m.attention === "none" ? "None" : m.attention;
        parts.push(fill(t(`summary${attention}`), {
          h: m.n_heads, kv: m.n_kv_heads, g: m.kv_lora_rank || !m.n_kv_heads ? 1 : m.n_heads / m.n_kv_heads,
          r: m.kv_lora_rank, rope: m.qk_rope_head_dim,
        }));
        if (m.n_state_layers) {
          parts.push(fill(t("summaryState"), { s: m.n_state_layers, l: m.n_layers, n: grouped(m.state_numbers_per_layer) }));
        }
      }
      if (params !== undefined) parts.push(fill(t("params"), { p: W.fixed(Number(params) / 1e9, 2) }));
      if (row) {
        if (row.nested_in) parts.push(fill(t("nested"), { w: row.nested_in }));
        parts.push(BigInt(row.max_seq_len) ? fill(t("context"), { n: grouped(row.max_seq_len) }) : t("noContext"));
        parts.push(row.sliding_window ? fill(t("ownWindow"), { w: grouped(row.sliding_window), n: row.n_sliding_layers, l: row.n_layers }) : t("noWindow"));
      }
      summary.textContent = parts.join(" \u00b7 ");
    }

    function showFormula(m, s, r) {
      if (!m || r.kv_payload_bytes_per_token === undefined) { formula.replaceChildren(); return; }
      const b = Number(s.quant.bits) / 8;
      const l = m.n_attention_layers;
      const text = m.kv_lora_rank
        ? fill(t("formulaMLA"), { l, r: m.kv_lora_rank, rope: m.qk_rope_head_dim, b })
        : fill(t("formulaKV"), { l, kv: m.n_kv_heads, k: m.d_head, b });
      const lines = m.attention === "none" ? [] : [fill(t("formula"), { text, n: grouped(r.kv_payload_bytes_per_token) })];
      if (m.n_state_layers) {
        lines.push(fill(t("formulaState"), { s: m.n_state_layers, n: grouped(m.state_numbers_per_layer),
          b: Number(s.state_bits) / 8, d: s.state_dtype, bytes: grouped(r.state_bytes_per_sequence) }));
      }
      if (s.quant.kind === "int" && m.attention !== "none") {
        lines.push(s.quant.key_scales === "per_channel"
          ? fill(t("scalesChannel"), { s: data.scale_dtype, g: s.quant.group_size })
          : fill(t(m.kv_lora_rank ? "scalesMLA" : "scalesInt"), { s: data.scale_dtype }));
      } else if (s.quant.kind === "fp8" && m.attention !== "none") {
        lines.push(fill(t("scalesFp8"), { n: grouped(r.kv_scale_bytes_fixed) }));
      }
      formula.replaceChildren(...lines.map((line, i) => (i ? [el("br"), line] : [line])).flat());
    }

    function showResults(m, s, r) {
      const S = s.seq_len === undefined ? null : grouped(s.seq_len);
      const has = (key) => r[key] !== undefined;
      const hybrid = Boolean(m && m.n_state_layers);
      const rows = [hybrid ? ["kv_bytes_per_token_hybrid", { n: m.n_attention_layers }, false, "kv_bytes_per_token"]
        : ["kv_bytes_per_token", {}]];
      if (s.kind === "int" && !(m && m.attention === "none")) rows.push(["kv_scale_bytes_per_token", {}, true]);
      if (m && m.kv_lora_rank) rows.push(["kv_bytes_per_token_decompressed", {}, true]);
      rows.push(S === null ? ["kv_bytes_per_sequence_plain", {}, false, "kv_bytes_per_sequence"] : ["kv_bytes_per_sequence", { s: S }]);
      if (m && m.max_seq_len && s.seq_len !== undefined && s.seq_len > m.max_seq_len) {
        rows.push(["beyond_context", { n: grouped(m.max_seq_len) }, true, null]); // beside the figure it concerns
      }
      if (has("kv_bytes_per_sequence_full") && has("kv_bytes_per_sequence")
        && r.kv_bytes_per_sequence_full !== r.kv_bytes_per_sequence) rows.push(["kv_bytes_per_sequence_full", {}, true]);
      if (has("kv_bytes_per_sequence_bf16") && has("kv_bytes_per_sequence")
        && r.kv_bytes_per_sequence_bf16 !== r.kv_bytes_per_sequence) rows.push(["kv_bytes_per_sequence_bf16", {}, true]);
      if (m && m.n_state_layers) rows.push(["state_bytes_per_sequence", { n: m.n_state_layers }]);
      if (s.kind === "fp8") rows.push(["kv_scale_bytes_fixed", {}]);
      const total = m && m.n_state_layers ? "kv_state_total" : "kv_bytes_total";
      rows.push(S === null || s.batch === undefined ? [`${total}_plain`, {}, false, "kv_bytes_total"]
        : [total, { b: s.batch, s: S }, false, "kv_bytes_total"]);
      rows.push(["weights_bytes", {}], [hybrid ? "total_bytes_state" : "total_bytes", {}, false, "total_bytes"],
        ["memory_bytes", {}]);
      results.replaceChildren(
        el("thead", {}, el("tr", {}, [el("th", { scope: "col" }), el("th", { scope: "col", class: "kvw-num", text: t("bytes") }), el("th", { scope: "col" })])),
        el("tbody", {}, rows.map(([label, values, sub, key = label]) => (key === null
          ? el("tr", { class: "kvw-sub kvw-warn-row" }, [el("th", { scope: "row", colspan: 3, class: "kvw-warn", dataset: { note: label },
            text: fill(t(label), values) })])
          : el("tr", { class: sub ? "kvw-sub" : "" }, [
          el("th", { scope: "row", text: fill(t(label), values) }),
          has(key) ? el("td", { class: "kvw-num", dataset: { key }, text: grouped(r[key]) })
            : el("td", { class: "kvw-num kvw-blank", dataset: { key, blank: "true" }, text: "\u2014" }),
          el("td", { class: "kvw-num kvw-human", text: has(key) ? formatBytes(r[key]) : "" }),
        ])))),
      );
      const lines = [];
      if (has("fits") && has("max_batch")) {
        const memoryText = formatBytes(s.memory);
        lines.push(
          el("span", { dataset: { key: "fits", value: String(r.fits) }, text: fill(t(r.fits ? "fits" : "fitsNot"), { b: s.batch, m: memoryText }) }),
          " ",
          el("span", { dataset: { key: "max_batch", value: String(r.max_batch) }, text: fill(t("max_batch"), { n: grouped(r.max_batch), s: S }) }),
        );
      }
      verdict.replaceChildren(...lines);
      verdict.classList.toggle("kvw-no-fit", r.fits === false);
      if (!has("total_bytes") || s.memory === undefined) { bar.replaceChildren(); return; }
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
