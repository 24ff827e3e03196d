/* Reading a Hugging Face config.json in the page, by the rule table of kvtutor.models.families,
   which kvtutor.models.hf_config.spec_from_dict reads configs by too: the table comes with the
   calculator's data (kv_calculator_data's "families"), so the page and the command line read
   every family by the same keys and rules. This file holds only the table's interpreter: its
   expressions (a key, a flag, a field, arithmetic), its rules (which layers slide, which hold
   experts, which attend and which keep a state-space state), the keys a family refuses, and the
   weight count of kvtutor.models.model_spec (ModelSpec.n_params). A refusal lists every bad key,
   each named as Python names it. tests/browser/test_widget_pages.py checks it against the Python
   for every bundled config, every family example and a set of edge configs.

   The JSON is parsed here too, by Python's json rules: an integer stays an integer (a BigInt,
   exact) and 32.0 or 1e3 is a float, which a size refuses, as Python does.
   Needs kv-widgets.js first; kv-calculator.js uses it through kvtutorWidgets.readConfig. */
(function () {
  "use strict";
  const W = window.kvtutorWidgets;

  const MAX_COUNT = 2n ** 40n; // kvtutor.validate.MAX_COUNT

  /* A refusal: ``problems`` lists {key, message} for every bad key found (key null when it is the
     JSON itself); ``key`` is the first key named. Messages are in English (the field names and
     values are the config's own). */
  class ConfigError extends Error {
    constructor(problems) {
      super(problems.map((p) => p.message).join("\n"));
      this.problems = problems;
      this.key = problems.length ? problems[0].key : null;
    }
  }
  const refused = (key, message) => new ConfigError([{ key, message }]);

  // ---------------------------------------------------------------- JSON, as Python reads it

  const FLOAT = Symbol("float");
  const isFloat = (v) => v !== null && typeof v === "object" && v[FLOAT] === true;
  const isInt = (v) => typeof v === "bigint";
  const isObject = (v) => v !== null && typeof v === "object" && !Array.isArray(v) && !isFloat(v);

  function parseJSON(text) {
    let i = 0, depth = 0;
    const fail = (what) => {
      const before = text.slice(0, i);
      const line = before.split("\n").length;
      const column = i - before.lastIndexOf("\n");
      throw refused(null, `config.json: not valid JSON: ${what} at line ${line}, column ${column}`);
    };
    const space = () => { while (i < text.length && " \t\n\r".includes(text[i])) i++; };
    function value() {
      space();
      const c = text[i];
      if (c === "{") return object();
      if (c === "[") return array();
      if (c === "\"") return string();
      for (const [word, v] of [["true", true], ["false", false], ["null", null],
        ["NaN", NaN], ["Infinity", Infinity], ["-Infinity", -Infinity]]) {
        if (text.startsWith(word, i)) {
          i += word.length;
          return typeof v === "number" ? { [FLOAT]: true, value: v } : v;
        }
      }
      const m = /^-?(?:0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?/.exec(text.slice(i, i + 4400));
      if (!m) fail(i >= text.length ? "the text ends where a value should be" : `unexpected ${JSON.stringify(c)}`);
      i += m[0].length;
      return m[1] === undefined && m[2] === undefined ? BigInt(m[0]) : { [FLOAT]: true, value: Number(m[0]) };
    }
    function nested(open) {
      if (++depth > 500) fail("the JSON nests too deep (a malformed config)");
      i++;
      space();
      return open;
    }
    function object() {
      const out = nested(Object.create(null));
      if (text[i] === "}") { i++; depth--; return out; }
      for (;;) {
        space();
        if (text[i] !== "\"") fail("expected a key in double quotes");
        const key = string();
        space();
        if (text[i] !== ":") fail("expected ':'");
        i++;
        out[key] = value();
        space();
        if (text[i] === ",") { i++; continue; }
        if (text[i] === "}") { i++; depth--; return out; }
        fail("expected ',' or '}'");
      }
    }
    function array() {
      const out = nested([]);
      if (text[i] === "]") { i++; depth--; return out; }
      for (;;) {
        out.push(value());
        space();
        if (text[i] === ",") { i++; continue; }
        if (text[i] === "]") { i++; depth--; return out; }
        fail("expected ',' or ']'");
      }
    }
    function string() {
      const start = ++i;
      let out = "";
      for (;;) {
        if (i >= text.length) { i = start - 1; fail("a string is not closed"); }
        const c = text[i];
        if (c === "\"") { i++; return out; }
        if (c < " ") fail("a control character inside a string");
        if (c === "\\") {
          const e = text[i + 1];
          const simple = { "\"": "\"", "\\": "\\", "/": "/", b: "\b", f: "\f", n: "\n", r: "\r", t: "\t" };
          if (e in simple) { out += simple[e]; i += 2; continue; }
          if (e === "u" && /^[0-9a-fA-F]{4}$/.test(text.slice(i + 2, i + 6))) {
            out += String.fromCharCode(parseInt(text.slice(i + 2, i + 6), 16));
            i += 6;
            continue;
          }
          fail("a bad escape in a string");
        }
        out += c;
        i++;
      }
    }
    const v = value();
    space();
    if (i < text.length) fail("extra text after the JSON");
    return v;
  }

  /* A value as Python's repr shows it in a message ('gemma2', True, None, 32.0, [1, 2]). */
  function shown(v) {
    if (v === null || v === undefined) return "None";
    if (v === true) return "True";
    if (v === false) return "False";
    if (isInt(v)) return v.toString();
    if (isFloat(v)) {
      const x = v.value;
      if (Number.isNaN(x)) return "nan";
      if (!Number.isFinite(x)) return x > 0 ? "inf" : "-inf";
      const [mant, exp] = x.toExponential().split("e");
      const e = Number(exp);
      if (e < -4 || e >= 16) return `${mant}e${e < 0 ? "-" : "+"}${String(Math.abs(e)).padStart(2, "0")}`;
      const s = String(x);
      return s.includes(".") || s.includes("e") ? s : `${s}.0`;
    }
    if (typeof v === "string") return `'${v.replace(/\\/g, "\\\\").replace(/'/g, "\\'")}'`;
    if (Array.isArray(v)) return `[${v.map(shown).join(", ")}]`;
    return `{${Object.entries(v).map(([k, x]) => `${shown(k)}: ${shown(x)}`).join(", ")}}`;
  }
  const cut = (v) => {
    const text = shown(v);
    return text.length <= 200 ? text : `${text.slice(0, 150)}... (${text.length.toLocaleString("en-US")} characters)`;
  };

  /* Python's truth value of a JSON value. */
  const truthy = (v) => !(v === null || v === undefined || v === false || v === 0n || v === ""
    || (isFloat(v) && v.value === 0) || (Array.isArray(v) && v.length === 0) || (isObject(v) && Object.keys(v).length === 0));
  /* hf_config._is_off: None, false, 0, [] or "" changes nothing. */
  const isOff = (v) => v === null || v === undefined || v === false || v === 0n || v === ""
    || (Array.isArray(v) && v.length === 0);

  // ---------------------------------------------------------------- the rule table's interpreter

  const MISSING = Symbol("missing"); // a value that could not be read: its problem is recorded
  const big = (v) => (typeof v === "number" ? BigInt(v) : v); // the table's numbers as BigInts
  const truth = (v) => v === true || (typeof v === "bigint" && v !== 0n);
  const ARITHMETIC = { add: (a, b) => a + b, sub: (a, b) => a - b, mul: (a, b) => a * b, eq: (a, b) => a === b,
    div: (a, b) => a / b, ceil_div: (a, b) => (a + b - 1n) / b }; // BigInts >= 0: "/" truncates, as // does

  /* One config read by its family's row (hf_config._Reader): every problem names its key, and
     reading goes on past it, so that every bad key is found. */
  class Reader {
    constructor(cfg, defaults) {
      this.cfg = cfg;
      this.defaults = defaults;
      this.problems = [];
      this.values = Object.create(null);
      this.sources = Object.create(null); // field -> the key it was read from
      this.row = null;
    }
    label(key) { return `config['${key}']`; }
    fail(key, message) { this.problems.push({ key, message }); return MISSING; }
    raw(key) { return key in this.cfg ? this.cfg[key] : undefined; }
    get(key) {
      const v = this.raw(key);
      if (v !== null && v !== undefined) return v;
      return key in this.defaults ? big(this.defaults[key]) : undefined;
    }
    int(key, low = 1n) {
      const v = this.get(key);
      if (!isInt(v) || v < low) {
        return this.fail(key, `${this.label(key)}: expected ${low === 1n ? "a positive int" : `an int >= ${low}`}, got ${cut(v)}`);
      }
      if (v > MAX_COUNT) return this.fail(key, `${this.label(key)}: expected at most ${W.grouped(MAX_COUNT)}, got ${W.grouped(v)}`);
      return v;
    }
    bool(key, fallback) {
      const v = this.get(key);
      if (v === undefined) return fallback;
      if (typeof v !== "boolean") return this.fail(key, `${this.label(key)}: expected true or false, got ${cut(v)}`);
      return v;
    }
    layerList(key, nLayers) {
      const v = this.get(key);
      if (v === undefined) return [];
      if (!Array.isArray(v) || !v.every((x) => isInt(x) && x >= 0n && x < nLayers)) {
        return this.fail(key, `${this.label(key)}: expected a list of layer indices 0 .. ${nLayers - 1n}, got ${cut(v)}`);
      }
      return v;
    }
    field(name) {
      if (!(name in this.values)) {
        this.values[name] = MISSING; // read once, even where it failed
        this.values[name] = this.eval(this.row.fields[name], name);
      }
      return this.values[name];
    }
    source(expr) {
      if (expr && typeof expr === "object" && "key" in expr) return expr.key;
      if (expr && typeof expr === "object" && "field" in expr) { this.field(expr.field); return this.sources[expr.field]; }
      return undefined;
    }
    eval(expr, name, explicit) {
      if (expr === null || typeof expr !== "object") return big(expr);
      if ("key" in expr) return this.key(expr, name);
      if ("flag" in expr) return this.bool(expr.flag, expr.default);
      if ("field" in expr) return this.field(expr.field);
      const [op, args] = Object.entries(expr)[0];
      if (op === "if") {
        const condition = this.eval(args[0]);
        return condition === MISSING ? MISSING : this.eval(truth(condition) ? args[1] : args[2], name);
      }
      const [a, b] = args.map((arg) => this.eval(arg));
      if (a === MISSING || b === MISSING) return MISSING;
      if (op === "div" && !(b && a % b === 0n)) {
        const top = this.source(args[0]), bottom = this.source(args[1]);
        if (top === undefined) return this.fail(explicit, `${this.label(explicit)}: ${a} is not a multiple of ${bottom}=${b}`);
        const also = explicit ? ` (or an explicit ${explicit})` : "";
        return this.fail(top, `${this.label(top)}: expected a multiple of ${bottom}=${b}${also}, got ${a}`);
      }
      return ARITHMETIC[op](a, b);
    }
    key(expr, name) {
      let key = expr.key;
      if (this.get(key) === undefined && expr.else_key && this.get(expr.else_key) !== undefined) key = expr.else_key;
      const v = this.get(key);
      if (v === undefined) {
        if ("default" in expr) return this.eval(expr.default, undefined, key);
        return this.fail(key, `config: missing key '${key}'`);
      }
      if (name !== undefined) this.sources[name] = key;
      if (v === "auto" && "auto" in expr) return this.eval(expr.auto, undefined, key);
      return this.int(key, BigInt(expr.low === undefined ? 1 : expr.low));
    }
  }

  /* hf_config._check_honoured: a sizing key the family's rules do not read, set to anything but
     "off", is a problem; so is a key the row refuses when true. */
  function checkHonoured(r, table, modelType) {
    const honoured = table.honoured[modelType];
    for (const key of table.sizing_keys) {
      const v = r.raw(key);
      if (honoured.includes(key) || isOff(v)) continue;
      r.fail(key, `${r.label(key)}: model_type '${modelType}' does not use this key, and the calculator `
        + `cannot honour ${key}=${cut(v)}: it would change the sizes in a way it does not model`);
    }
    for (const { key, what } of r.row.refuse_true || []) {
      if (r.bool(key, false) === true) r.fail(key, `${r.label(key)}: ${what} are not modelled; expected false`);
    }
  }

  /* Layers i with i % period == offset (the period rule of layers and of experts). */
  function every(r, rule, nLayers) {
    const period = r.eval(rule.period), offset = r.eval(rule.offset);
    if (period === MISSING || offset === MISSING) return MISSING;
    if (offset >= period) {
      const key = r.source(rule.offset);
      return r.fail(key, `${r.label(key)}: expected 0 .. ${period - 1n} (below ${r.source(rule.period)}), got ${offset}`);
    }
    let n = 0n;
    for (let i = 0n; i < nLayers; i++) if (i % period === offset) n++;
    return n;
  }

  function attentionLayers(r, nLayers) {
    const rule = r.row.layers || { rule: "all" };
    if (rule.rule === "all") return nLayers;
    if (rule.rule === "none") return 0n;
    if (rule.rule === "indices") {
      const listed = r.layerList(rule.indices, nLayers);
      return listed === MISSING ? MISSING : BigInt(new Set(listed.map(String)).size);
    }
    return every(r, rule, nLayers);
  }

  /* [window or null, layers that use it]: the row's window rule, or the config's layer_types. */
  function slidingLayers(r, nLayers, nAttention) {
    const rule = r.row.window;
    if (!rule || !nAttention) return [null, 0n];
    const size = r.eval(rule.size);
    const window = size === MISSING || !size ? null : size; // transformers writes 0 for "no window"
    if (rule.on !== undefined) { // a switch the config turns off wins over its layer_types
      const on = r.eval(rule.on);
      if (on !== MISSING && !truth(on)) return [null, 0n];
    }
    const layerTypes = rule.layer_types ? r.raw("layer_types") : undefined;
    if (layerTypes !== null && layerTypes !== undefined) {
      if (!Array.isArray(layerTypes) || BigInt(layerTypes.length) !== nLayers) {
        return [r.fail("layer_types", `${r.label("layer_types")}: expected a list of ${nLayers} strings, got ${cut(layerTypes)}`), 0n];
      }
      const unknown = layerTypes.filter((x) => x !== "sliding_attention" && x !== "full_attention");
      if (unknown.length) {
        return [r.fail("layer_types", `${r.label("layer_types")}: expected 'sliding_attention' or 'full_attention' entries, got ${cut(unknown[0])} (not modelled)`), 0n];
      }
      const n = BigInt(layerTypes.filter((x) => x === "sliding_attention").length);
      if (n && window === null && size !== MISSING) {
        return [r.fail("layer_types", `${r.label("layer_types")}: sliding layers listed but no sliding_window`), 0n];
      }
      return window && n ? [window, n] : [null, 0n];
    }
    if (window === null) return [null, 0n];
    const on = r.eval(rule.on === undefined ? true : rule.on);
    if (on === MISSING || !truth(on)) return [null, 0n];
    let n;
    if (rule.rule === "every_layer") n = nAttention;
    else if (rule.rule === "alternate") n = (nLayers + 1n) / 2n; // layers 0, 2, 4, ... slide
    else if (rule.rule === "pattern") { const p = r.eval(rule.pattern); n = p === MISSING ? p : nLayers - nLayers / p; }
    else { const start = r.eval(rule.start); n = start === MISSING ? start : nLayers - (start < nLayers ? start : nLayers); }
    return n !== MISSING && n ? [window, n] : [null, 0n];
  }

  /* The mixture-of-experts fields (empty for a dense model), by the row's experts rule. */
  function experts(r, nLayers) {
    const rule = r.row.experts;
    if (!rule) return {};
    const n = r.eval(rule.n);
    if (n === MISSING || n <= 1n) return {};
    const perToken = r.eval(rule.per_token);
    let nDense = 0n;
    if (rule.rule === "period") {
      const nMoe = every(r, rule, nLayers);
      nDense = nMoe === MISSING ? MISSING : nLayers - nMoe;
    } else if (rule.rule === "sparse_step") {
      const dense = r.layerList(rule.dense_list, nLayers), step = r.eval(rule.step);
      if (dense === MISSING || step === MISSING) return {};
      const listed = new Set(dense.map(String));
      for (let i = 0n; i < nLayers; i++) if (listed.has(String(i)) || (i + 1n) % step) nDense++;
    } else if (rule.rule === "first_k_freq") {
      const first = r.eval(rule.first), freq = r.eval(rule.freq);
      if (first === MISSING || freq === MISSING) return {};
      for (let i = 0n; i < nLayers; i++) if (!(i >= first && i % freq === 0n)) nDense++;
    }
    const out = { n_experts: n, n_experts_per_token: perToken, n_dense_layers: nDense,
      d_ff_expert: r.eval(rule.width === undefined ? 0 : rule.width), d_ff_shared: r.eval(rule.shared === undefined ? 0 : rule.shared) };
    if (rule.shared_gate && out.d_ff_shared !== MISSING) out.shared_expert_gate = out.d_ff_shared > 0n;
    if (perToken !== MISSING && perToken > n) {
      const perKey = r.source(rule.per_token), nKey = r.source(rule.n);
      r.fail(perKey, `${r.label(perKey)}: expected <= ${nKey}=${n}, got ${perToken}`);
    }
    return out;
  }

  /* Alias keys (written by transformers beside the key the row reads) must say the same. */
  function agree(r) {
    for (const entry of r.row.agree || []) {
      if (isOff(r.raw(entry.key))) continue;
      const v = r.int(entry.key, 0n);
      const wanted = entry.equals.map((expr) => r.eval(expr));
      if (v === MISSING || wanted.includes(MISSING) || wanted.includes(v)) continue;
      r.fail(entry.key, `${r.label(entry.key)}: expected ${wanted.join(" or ")} (from ${entry.from}), got ${v}`);
    }
  }

  /* [the language model's config, what it is nested in ("" when not a wrapper)]. */
  function nested(config, table) {
    const mt = config.model_type;
    const wrapper = typeof mt === "string" && Object.hasOwn(table.wrappers, mt) ? table.wrappers[mt] : null;
    if (!wrapper && (truthy(config.hidden_size) || truthy(config.n_embd) || !isObject(config.text_config))) return [config, ""];
    const key = wrapper ? wrapper.nested : "text_config";
    const inner = config[key];
    if (!isObject(inner)) throw refused(key, `config['${key}']: expected the language model's config (an object), got ${cut(inner)}`);
    const innerType = truthy(inner.model_type) ? inner.model_type : wrapper ? wrapper.model_type : null;
    return [Object.assign(Object.create(null), inner, { model_type: innerType }), typeof mt === "string" ? mt : "text_config"];
  }

  function modelTypeOf(r, config, table) {
    const mt = "model_type" in config ? config.model_type : undefined;
    const known = table.model_types.join(", ");
    if (mt === null || mt === undefined) {
      throw refused("model_type", `config: missing key 'model_type'; expected one of ${known} (add "model_type": "llama" for a Llama-style model)`);
    }
    if (typeof mt !== "string") throw refused("model_type", `${r.label("model_type")}: expected a string, got ${cut(mt)}`);
    if (!Object.hasOwn(table.families, mt)) {
      throw refused("model_type", `${r.label("model_type")}: expected one of ${known}, got ${cut(mt)} (its cache layout is not known to the calculator, and a guess could be wrong)`);
    }
    return mt;
  }

  const SPEC_FIELDS = ["arch", "n_layers", "d_model", "n_heads", "n_kv_heads", "d_head", "d_ff", "vocab_size", "max_seq_len",
    "sliding_window", "n_sliding_layers", "tie_word_embeddings", "attention_bias", "n_experts", "norms_per_layer",
    "n_experts_per_token", "d_ff_expert", "n_dense_layers", "d_ff_shared", "shared_expert_gate", "qk_norm", "kv_lora_rank",
    "q_lora_rank", "qk_rope_head_dim", "v_head_dim", "norm_params", "mlp_gated", "mlp_bias", "position_rows", "d_embed",
    "final_norm", "qk_norm_width", "n_state_layers", "state_numbers_per_layer", "state_params_per_layer"];
  const COUNTS = ["n_layers", "d_model", "n_heads", "n_kv_heads", "d_head", "d_ff", "vocab_size", "max_seq_len", "n_experts",
    "n_experts_per_token", "d_ff_expert", "n_dense_layers", "d_ff_shared", "kv_lora_rank", "q_lora_rank", "qk_rope_head_dim",
    "v_head_dim", "d_embed", "n_state_layers", "state_numbers_per_layer", "state_params_per_layer"];

  /* ModelSpec's defaults, its arch's presets and the checks a config can break (a count past
     MAX_COUNT), then what the calculator reads: d_value, the attention kind, the weight count. */
  function modelSpec(f, table) {
    const s = { sliding_window: null, n_sliding_layers: 0n, tie_word_embeddings: false, attention_bias: null, n_experts: 1n,
      norms_per_layer: 2n, n_experts_per_token: 1n, d_ff_expert: 0n, n_dense_layers: 0n, d_ff_shared: 0n,
      shared_expert_gate: false, qk_norm: false, kv_lora_rank: 0n, q_lora_rank: 0n, qk_rope_head_dim: 0n, v_head_dim: 0n,
      norm_params: null, mlp_gated: null, mlp_bias: null, position_rows: null, d_embed: 0n, final_norm: true,
      qk_norm_width: false, n_state_layers: 0n, state_numbers_per_layer: 0n, state_params_per_layer: 0n, ...f };
    const preset = table.arch_presets[s.arch];
    for (const key of ["norm_params", "mlp_gated", "mlp_bias", "attention_bias"]) if (s[key] === null) s[key] = big(preset[key]);
    if (s.position_rows === null) s.position_rows = preset.positions ? s.max_seq_len : 0n;
    for (const key of COUNTS) {
      if (s[key] > MAX_COUNT) throw refused(null, `${key}: expected at most ${W.grouped(MAX_COUNT)}, got ${W.grouped(s[key])}`);
    }
    s.n_attention_layers = s.n_layers - s.n_state_layers;
    s.d_value = s.v_head_dim || s.d_head;
    s.attention = !s.n_attention_layers ? "none" : s.kv_lora_rank ? "MLA" : s.n_kv_heads === s.n_heads ? "MHA"
      : s.n_kv_heads === 1n ? "MQA" : "GQA";
    s.n_params = nParams(s);
    return s;
  }

  /* ModelSpec.n_params: the weights, tied matrices counted once. */
  function nParams(s) {
    const d = s.d_model, f = s.d_ff, v = s.vocab_size, e = s.d_embed || s.d_model;
    const embed = v * e + s.position_rows * d + (e !== d ? 2n * d * e : 0n);
    const head = s.tie_word_embeddings ? 0n : v * e;
    const qWidth = s.n_heads * s.d_head, kv = s.n_kv_heads * s.d_head;
    let attention;
    if (s.kv_lora_rank) {
      const [rq, rkv, rope, h, k] = [s.q_lora_rank, s.kv_lora_rank, s.qk_rope_head_dim, s.n_heads, s.d_head];
      const q = rq ? d * rq + rq + rq * h * k : d * h * k;
      attention = q + d * (rkv + rope) + rkv + rkv * h * (k - rope + s.d_value) + h * s.d_value * d;
    } else {
      const bias = { "": 0n, qkv: qWidth + 2n * kv, qkvo: qWidth + 2n * kv + d }[s.attention_bias];
      attention = d * qWidth + 2n * d * kv + qWidth * d + bias;
    }
    const qkNorm = s.qk_norm_width ? (s.n_heads + s.n_kv_heads) * s.d_head : 2n * s.d_head;
    const norms = s.norms_per_layer * s.norm_params * d + (s.qk_norm ? qkNorm : 0n);
    let dense = (s.mlp_gated ? 3n : 2n) * d * f;
    if (s.mlp_bias) dense += (s.mlp_gated ? 2n * f : f) + d;
    const expert = 3n * d * (s.d_ff_expert || f);
    const moe = s.n_experts * expert + d * s.n_experts + 3n * d * s.d_ff_shared + (s.shared_expert_gate ? d : 0n);
    const nMoe = s.n_experts > 1n ? s.n_layers - s.n_dense_layers : 0n;
    const mixers = s.n_attention_layers * attention + s.n_state_layers * s.state_params_per_layer;
    return embed + mixers + s.n_layers * norms + (s.n_layers - nMoe) * dense + nMoe * moe
      + (s.final_norm ? s.norm_params * d : 0n) + head;
  }

  /* spec_from_dict: a parsed config (an object) and the rule table -> the model's sizes, or a
     ConfigError listing every bad key. */
  function specFromDict(outer, table) {
    if (!isObject(outer)) {
      throw refused(null, `config: expected a JSON object, got a JSON ${Array.isArray(outer) ? "list" : typeof outer === "string" ? "string" : "value"}`);
    }
    const [config, wrapper] = nested(outer, table);
    const r = new Reader(config, {});
    const modelType = modelTypeOf(r, config, table);
    r.row = table.families[modelType];
    if (wrapper) r.defaults = r.row.class_defaults || {};
    const given = [outer._name_or_path, config._name_or_path].find(truthy);
    const name = given === undefined ? wrapper || modelType : typeof given === "string" ? given : shown(given);
    checkHonoured(r, table, modelType);
    for (const field of r.row.order) r.field(field); // the table's order: the page's JSON sorts its keys
    const nLayers = r.field("n_layers");
    const spec = Object.fromEntries(SPEC_FIELDS.filter((k) => k in r.values).map((k) => [k, r.values[k]]));
    if (nLayers !== MISSING) {
      const nAttention = attentionLayers(r, nLayers);
      if (nAttention !== MISSING) {
        spec.n_state_layers = nLayers - nAttention;
        if (nAttention < nLayers) {
          spec.state_numbers_per_layer = r.eval(r.row.state.numbers);
          spec.state_params_per_layer = r.eval(r.row.state.params);
        }
        [spec.sliding_window, spec.n_sliding_layers] = slidingLayers(r, nLayers, nAttention);
      }
      Object.assign(spec, experts(r, nLayers));
    }
    const heads = spec.n_heads, kv = spec.n_kv_heads;
    if (isInt(heads) && isInt(kv) && kv && heads % kv) {
      const key = r.sources.n_kv_heads || "num_key_value_heads";
      r.fail(key, `${r.label(key)}: expected a divisor of ${r.sources.n_heads}=${heads}, got ${kv}`);
    }
    agree(r);
    if (r.problems.length) throw new ConfigError(r.problems);
    return { name, model_type: modelType, nested_in: wrapper, ...modelSpec(spec, table) };
  }

  /* config.json text and the rule table -> the model's sizes (BigInts), or a ConfigError. */
  function readConfig(text, table) {
    if (!text.trim()) throw refused(null, "config.json: the box is empty: paste a config.json");
    return specFromDict(parseJSON(text), table);
  }

  Object.assign(W, { readConfig, ConfigError });
})();
