/* Reading a Hugging Face config.json in the page, by the rules of kvtutor.models.hf_config
   (spec_from_dict) and the weight count of kvtutor.models.model_spec (ModelSpec.n_params): the
   families it knows by model_type, explicit head_dim (else a family's default, else hidden / heads),
   KV heads, MLA's latent rank and rotary key, each family's sliding-window rules, mixtures of
   experts (which change the weights, never the cache), and a refusal naming the key for anything
   missing, mistyped or not modelled. tests/browser/test_widget_pages.py checks it against the
   Python for every bundled config and a set of edge configs.

   The JSON is parsed here too, by Python's json rules: an integer stays an integer (a BigInt,
   exact) and 32.0 or 1e3 is a float, which a size refuses, as Python does.
   Needs kv-widgets.js first; kv-calculator.js uses it through kvtutorWidgets.readConfig. */
(function () {
  "use strict";
  const W = window.kvtutorWidgets;

  const MAX_COUNT = 2n ** 40n; // kvtutor.validate.MAX_COUNT
  const LLAMA_STYLE = ["llama", "mistral", "mixtral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3_text"];
  const QWEN_MOE = ["qwen2_moe", "qwen3_moe"];
  const DEEPSEEK = ["deepseek_v2", "deepseek_v3"];
  const GPT2_STYLE = ["gpt2", "gpt_bigcode"];
  const MODEL_TYPES = [...GPT2_STYLE, ...LLAMA_STYLE, ...QWEN_MOE, ...DEEPSEEK];
  const TIED_BY_DEFAULT = new Set(["gpt2", "gpt_bigcode", "gemma", "gemma2", "gemma3_text"]);
  const FOUR_NORMS = new Set(["gemma2", "gemma3_text"]);
  const QK_NORM = new Set(["qwen3", "qwen3_moe", "gemma3_text"]);
  const HEAD_DIM_DEFAULT = { qwen3: 128n, gemma: 256n, gemma2: 256n, gemma3_text: 256n };
  const SIZING_KEYS = [
    "multi_query", "head_dim", "num_key_value_heads", "attention_bias", "qkv_bias", "mlp_bias",
    "sliding_window", "use_sliding_window", "max_window_layers", "layer_types", "sliding_window_pattern",
    "num_local_experts", "num_experts", "num_experts_per_tok", "moe_intermediate_size",
    "shared_expert_intermediate_size", "decoder_sparse_step", "mlp_only_layers",
    "n_routed_experts", "n_shared_experts", "first_k_dense_replace", "moe_layer_freq",
    "kv_lora_rank", "q_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim",
    "num_nextn_predict_layers", "attention_chunk_size", "cross_attention_layers", "no_rope_layers",
  ];
  const WINDOW_KEYS = ["sliding_window", "use_sliding_window", "layer_types"];
  const QWEN_MOE_KEYS = ["head_dim", "num_key_value_heads", "max_window_layers", "num_experts", "num_experts_per_tok",
    "moe_intermediate_size", "decoder_sparse_step", "mlp_only_layers", "num_local_experts", ...WINDOW_KEYS];
  const DEEPSEEK_KEYS = ["num_key_value_heads", "kv_lora_rank", "q_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim",
    "v_head_dim", "n_routed_experts", "n_shared_experts", "num_experts_per_tok", "moe_intermediate_size",
    "first_k_dense_replace", "moe_layer_freq", "head_dim"];
  const HONOURED = {
    gpt2: [],
    gpt_bigcode: ["multi_query", "num_key_value_heads"],
    llama: ["head_dim", "num_key_value_heads", "attention_bias", "mlp_bias", ...WINDOW_KEYS],
    mistral: ["head_dim", "num_key_value_heads", ...WINDOW_KEYS],
    mixtral: ["head_dim", "num_key_value_heads", "num_local_experts", "num_experts_per_tok", ...WINDOW_KEYS],
    qwen2: ["head_dim", "num_key_value_heads", "max_window_layers", ...WINDOW_KEYS],
    qwen3: ["head_dim", "num_key_value_heads", "attention_bias", "max_window_layers", ...WINDOW_KEYS],
    gemma: ["head_dim", "num_key_value_heads", "attention_bias"],
    gemma2: ["head_dim", "num_key_value_heads", "attention_bias", ...WINDOW_KEYS],
    gemma3_text: ["head_dim", "num_key_value_heads", "attention_bias", "sliding_window_pattern", ...WINDOW_KEYS],
    qwen2_moe: [...QWEN_MOE_KEYS, "qkv_bias", "shared_expert_intermediate_size"],
    qwen3_moe: [...QWEN_MOE_KEYS, "attention_bias"],
    deepseek_v2: DEEPSEEK_KEYS,
    deepseek_v3: [...DEEPSEEK_KEYS, "num_nextn_predict_layers"],
  };

  /* A refusal: ``key`` is the config key it names (null when it is the JSON itself); ``text`` is
     the message, in English (the field names and values are the config's own). */
  class ConfigError extends Error {
    constructor(key, text) {
      super(text);
      this.key = key;
    }
  }

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
      throw new ConfigError(null, `config.json: not valid JSON: ${what} at line ${line}, column ${column}`);
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

  // ---------------------------------------------------------------- hf_config's reader

  class Reader {
    constructor(cfg) { this.cfg = cfg; }
    get(key) { return key in this.cfg ? this.cfg[key] : undefined; }
    has(key) { const v = this.get(key); return v !== null && v !== undefined; }
    label(key) { return `config['${key}']`; }
    int(key, fallback, low = 1n) {
      const v = this.get(key);
      if (v === null || v === undefined) {
        if (fallback !== undefined && fallback !== null) return fallback;
        throw new ConfigError(key, `config: missing key '${key}'`);
      }
      if (!isInt(v) || v < low) {
        throw new ConfigError(key, `${this.label(key)}: expected ${low === 1n ? "a positive int" : `an int >= ${low}`}, got ${cut(v)}`);
      }
      if (v > MAX_COUNT) {
        throw new ConfigError(key, `${this.label(key)}: expected at most ${W.grouped(MAX_COUNT)}, got ${W.grouped(v)}`);
      }
      return v;
    }
    bool(key, fallback) {
      const v = this.get(key);
      if (v === null || v === undefined) return fallback;
      if (typeof v !== "boolean") throw new ConfigError(key, `${this.label(key)}: expected true or false, got ${cut(v)}`);
      return v;
    }
    layerList(key, nLayers) {
      const v = this.get(key);
      if (v === null || v === undefined) return [];
      if (!Array.isArray(v) || !v.every((x) => isInt(x) && x >= 0n && x < nLayers)) {
        throw new ConfigError(key, `${this.label(key)}: expected a list of layer indices 0 .. ${nLayers - 1n}, got ${cut(v)}`);
      }
      return v;
    }
  }

  function checkHonoured(r, modelType) {
    const honoured = HONOURED[modelType];
    for (const key of SIZING_KEYS) {
      const v = r.get(key);
      if (honoured.includes(key) || isOff(v)) continue;
      throw new ConfigError(key, `${r.label(key)}: model_type '${modelType}' does not use this key, and the calculator `
        + `cannot honour ${key}=${cut(v)}: it would change the sizes in a way it does not model`);
    }
    if (r.bool("mlp_bias", false)) throw new ConfigError("mlp_bias", `${r.label("mlp_bias")}: biases on the MLP are not modelled; expected false`);
  }

  /* [window or null, layers that use it], by each config class's rules. */
  function slidingLayers(r, modelType, nLayers) {
    const window = r.int("sliding_window", 0n, 0n) || null;
    const layerTypes = r.get("layer_types");
    if (layerTypes !== null && layerTypes !== undefined) {
      if (!Array.isArray(layerTypes) || BigInt(layerTypes.length) !== nLayers) {
        throw new ConfigError("layer_types", `${r.label("layer_types")}: expected a list of ${nLayers} strings, got ${cut(layerTypes)}`);
      }
      const unknown = layerTypes.filter((x) => x !== "sliding_attention" && x !== "full_attention");
      if (unknown.length) {
        throw new ConfigError("layer_types", `${r.label("layer_types")}: expected 'sliding_attention' or 'full_attention' entries, got ${cut(unknown[0])} (not modelled)`);
      }
      const n = BigInt(layerTypes.filter((x) => x === "sliding_attention").length);
      if (n && window === null) throw new ConfigError("layer_types", `${r.label("layer_types")}: sliding layers listed but no sliding_window`);
      return window && n ? [window, n] : [null, 0n];
    }
    if (window === null) return [null, 0n];
    if (["qwen2", "qwen3", ...QWEN_MOE].includes(modelType)) {
      if (!r.bool("use_sliding_window", false)) return [null, 0n];
      const start = [r.int("max_window_layers", 28n, 0n), nLayers].reduce((a, b) => (a < b ? a : b));
      return start < nLayers ? [window, nLayers - start] : [null, 0n];
    }
    if (!r.bool("use_sliding_window", true)) return [null, 0n];
    if (modelType === "gemma2") return [window, (nLayers + 1n) / 2n];
    if (modelType === "gemma3_text") return [window, nLayers - nLayers / r.int("sliding_window_pattern", 6n)];
    return [window, nLayers];
  }

  function modelTypeOf(r, config) {
    const mt = "model_type" in config ? config.model_type : undefined;
    const known = MODEL_TYPES.join(", ");
    if (mt === null || mt === undefined) {
      throw new ConfigError("model_type", `config: missing key 'model_type'; expected one of ${known} (add "model_type": "llama" for a Llama-style model)`);
    }
    if (typeof mt !== "string") throw new ConfigError("model_type", `${r.label("model_type")}: expected a string, got ${cut(mt)}`);
    if (!MODEL_TYPES.includes(mt)) {
      throw new ConfigError("model_type", `${r.label("model_type")}: expected one of ${known}, got ${cut(mt)} (its cache layout is not known to the calculator, and a guess could be wrong)`);
    }
    return mt;
  }

  function gpt2Spec(r, modelType) {
    const d = r.int("n_embd"), h = r.int("n_head"), l = r.int("n_layer");
    if (d % h) throw new ConfigError("n_embd", `${r.label("n_embd")}: expected a multiple of n_head=${h}, got ${d}`);
    const maxSeq = r.has("n_ctx") && !r.has("n_positions") ? r.int("n_ctx") : r.int("n_positions");
    let kv = h;
    if (modelType === "gpt_bigcode" && r.bool("multi_query", true)) kv = 1n;
    if (r.int("num_key_value_heads", kv) !== kv) {
      throw new ConfigError("num_key_value_heads", `${r.label("num_key_value_heads")}: expected ${kv} (from multi_query), got ${cut(r.get("num_key_value_heads"))}`);
    }
    return { arch: "gpt2", n_layers: l, d_model: d, n_heads: h, n_kv_heads: kv, d_head: d / h, d_ff: r.int("n_inner", 4n * d),
      vocab_size: r.int("vocab_size"), max_seq_len: maxSeq, tie_word_embeddings: r.bool("tie_word_embeddings", true) };
  }

  function moeFields(r, modelType, nLayers) {
    if (modelType === "mixtral") {
      const n = r.int("num_local_experts", 8n);
      if (n === 1n) return {};
      return { n_experts: n, n_experts_per_token: r.int("num_experts_per_tok", 2n), experts_key: "num_experts_per_tok" };
    }
    if (QWEN_MOE.includes(modelType)) {
      const alias = r.int("num_local_experts", 0n, 0n);
      const n = r.int("num_experts", alias, 0n);
      if (alias && alias !== n) throw new ConfigError("num_local_experts", `${r.label("num_local_experts")}: expected num_experts=${n}, got ${alias}`);
      if (n === 0n) return {};
      const dense = new Set(r.layerList("mlp_only_layers", nLayers).map(String));
      const step = r.int("decoder_sparse_step", 1n);
      let nDense = 0n;
      for (let i = 0n; i < nLayers; i++) if (dense.has(String(i)) || (i + 1n) % step) nDense++;
      const shared = modelType === "qwen2_moe" ? r.int("shared_expert_intermediate_size", 0n, 0n) : 0n;
      return { n_experts: n, n_experts_per_token: r.int("num_experts_per_tok"), d_ff_expert: r.int("moe_intermediate_size"),
        n_dense_layers: nDense, d_ff_shared: shared, shared_expert_gate: shared > 0n, experts_key: "num_experts_per_tok" };
    }
    if (DEEPSEEK.includes(modelType)) {
      const n = r.int("n_routed_experts", 0n, 0n);
      if (n === 0n) return {};
      const first = r.int("first_k_dense_replace", 0n, 0n), freq = r.int("moe_layer_freq", 1n);
      let nDense = 0n;
      for (let i = 0n; i < nLayers; i++) if (!(i >= first && i % freq === 0n)) nDense++;
      const dExpert = r.int("moe_intermediate_size");
      return { n_experts: n, n_experts_per_token: r.int("num_experts_per_tok"), d_ff_expert: dExpert, n_dense_layers: nDense,
        d_ff_shared: r.int("n_shared_experts", 0n, 0n) * dExpert, experts_key: "num_experts_per_tok" };
    }
    return {};
  }

  function mlaFields(r, nHeads) {
    const rope = r.int("qk_rope_head_dim"), nope = r.int("qk_nope_head_dim");
    if (r.has("head_dim") && ![rope, nope + rope].includes(r.int("head_dim"))) {
      throw new ConfigError("head_dim", `${r.label("head_dim")}: expected qk_rope_head_dim=${rope} or qk_nope_head_dim + qk_rope_head_dim=${nope + rope}, got ${cut(r.get("head_dim"))}`);
    }
    return { n_kv_heads: nHeads, d_head: nope + rope, kv_lora_rank: r.int("kv_lora_rank"), q_lora_rank: r.int("q_lora_rank", 0n, 0n),
      qk_rope_head_dim: rope, v_head_dim: r.int("v_head_dim") };
  }

  /* ModelSpec's defaults and its own checks (what a config can break: a count past MAX_COUNT, more
     experts per token than experts). */
  function modelSpec(f) {
    const s = { sliding_window: null, n_sliding_layers: 0n, tie_word_embeddings: false, attention_bias: "", n_experts: 1n,
      norms_per_layer: 2n, n_experts_per_token: 1n, d_ff_expert: 0n, n_dense_layers: 0n, d_ff_shared: 0n,
      shared_expert_gate: false, qk_norm: false, kv_lora_rank: 0n, q_lora_rank: 0n, qk_rope_head_dim: 0n, v_head_dim: 0n, ...f };
    for (const key of ["n_layers", "d_model", "n_heads", "n_kv_heads", "d_head", "d_ff", "vocab_size", "max_seq_len", "n_experts",
      "n_experts_per_token", "d_ff_expert", "n_dense_layers", "d_ff_shared", "kv_lora_rank", "q_lora_rank", "qk_rope_head_dim", "v_head_dim"]) {
      if (s[key] > MAX_COUNT) throw new ConfigError(null, `${key}: expected at most ${W.grouped(MAX_COUNT)}, got ${W.grouped(s[key])}`);
    }
    if (s.n_experts_per_token > s.n_experts) {
      throw new ConfigError(s.experts_key, `config['${s.experts_key}']: expected at most the ${s.n_experts} experts, got ${s.n_experts_per_token}`);
    }
    s.d_value = s.v_head_dim || s.d_head;
    s.attention = s.kv_lora_rank ? "MLA" : s.n_kv_heads === s.n_heads ? "MHA" : s.n_kv_heads === 1n ? "MQA" : "GQA";
    s.n_params = nParams(s);
    return s;
  }

  /* ModelSpec.n_params: the weights, tied matrices counted once. */
  function nParams(s) {
    const d = s.d_model, f = s.d_ff, v = s.vocab_size;
    const head = s.tie_word_embeddings ? 0n : v * d;
    const qWidth = s.n_heads * s.d_head, kv = s.n_kv_heads * s.d_head;
    if (s.arch === "gpt2") {
      const perLayer = 2n * d + d * (qWidth + 2n * kv) + (qWidth + 2n * kv) + qWidth * d + d + 2n * d + d * f + f + f * d + d;
      return v * d + s.max_seq_len * d + s.n_layers * perLayer + 2n * d + head;
    }
    let attention;
    if (s.kv_lora_rank) {
      const [rq, rkv, rope, h, k] = [s.q_lora_rank, s.kv_lora_rank, s.qk_rope_head_dim, s.n_heads, s.d_head];
      const q = rq ? d * rq + rq + rq * h * k : d * h * k;
      attention = q + d * (rkv + rope) + rkv + rkv * h * (k - rope + s.d_value) + h * s.d_value * d;
    } else {
      const bias = { "": 0n, qkv: qWidth + 2n * kv, qkvo: qWidth + 2n * kv + d }[s.attention_bias];
      attention = d * qWidth + 2n * d * kv + qWidth * d + bias;
    }
    const norms = s.norms_per_layer * d + (s.qk_norm ? 2n * s.d_head : 0n);
    const expert = 3n * d * (s.d_ff_expert || f);
    const moe = s.n_experts * expert + d * s.n_experts + 3n * d * s.d_ff_shared + (s.shared_expert_gate ? d : 0n);
    const nMoe = s.n_experts > 1n ? s.n_layers - s.n_dense_layers : 0n;
    return v * d + s.n_layers * (attention + norms) + (s.n_layers - nMoe) * 3n * d * f + nMoe * moe + d + head;
  }

  /* spec_from_dict: a parsed config (an object) -> the model's sizes, or a ConfigError. */
  function specFromDict(config) {
    if (!isObject(config)) {
      throw new ConfigError(null, `config: expected a JSON object, got a JSON ${Array.isArray(config) ? "list" : typeof config === "string" ? "string" : "value"}`);
    }
    if (!truthy(config.hidden_size) && !truthy(config.n_embd) && isObject(config.text_config)) config = config.text_config;
    const r = new Reader(config);
    const modelType = modelTypeOf(r, config);
    const name = truthy(config._name_or_path) ? (typeof config._name_or_path === "string" ? config._name_or_path : shown(config._name_or_path)) : modelType;
    checkHonoured(r, modelType);
    if (GPT2_STYLE.includes(modelType)) return { name, model_type: modelType, ...modelSpec(gpt2Spec(r, modelType)) };
    const d = r.int("hidden_size"), h = r.int("num_attention_heads"), l = r.int("num_hidden_layers");
    let fields;
    if (DEEPSEEK.includes(modelType) && r.has("kv_lora_rank")) {
      fields = mlaFields(r, h);
    } else {
      if (DEEPSEEK.includes(modelType)) throw new ConfigError("kv_lora_rank", "config: missing key 'kv_lora_rank'");
      const kv = r.int("num_key_value_heads", h);
      if (h % kv) throw new ConfigError("num_key_value_heads", `${r.label("num_key_value_heads")}: expected a divisor of num_attention_heads=${h}, got ${kv}`);
      const fallback = modelType in HEAD_DIM_DEFAULT ? HEAD_DIM_DEFAULT[modelType] : d / h;
      if (!r.has("head_dim") && !(modelType in HEAD_DIM_DEFAULT) && d % h) {
        throw new ConfigError("hidden_size", `${r.label("hidden_size")}: expected a multiple of num_attention_heads=${h} (or an explicit head_dim), got ${d}`);
      }
      fields = { n_kv_heads: kv, d_head: r.int("head_dim", fallback) };
    }
    const [window, nSliding] = DEEPSEEK.includes(modelType) ? [null, 0n] : slidingLayers(r, modelType, l);
    const bias = modelType === "qwen2" ? "qkv" : modelType === "qwen2_moe" ? (r.bool("qkv_bias", true) ? "qkv" : "")
      : r.bool("attention_bias", false) ? "qkvo" : "";
    const spec = { arch: "gated", n_layers: l, d_model: d, n_heads: h, d_ff: r.int("intermediate_size"), vocab_size: r.int("vocab_size"),
      max_seq_len: r.int("max_position_embeddings"), sliding_window: window, n_sliding_layers: nSliding,
      tie_word_embeddings: r.bool("tie_word_embeddings", TIED_BY_DEFAULT.has(modelType)), attention_bias: bias,
      norms_per_layer: FOUR_NORMS.has(modelType) ? 4n : 2n, qk_norm: QK_NORM.has(modelType), ...fields };
    return { name, model_type: modelType, ...modelSpec({ ...spec, ...moeFields(r, modelType, l) }) };
  }

  /* config.json text -> the model's sizes (BigInts), or a ConfigError naming the key. */
  function readConfig(text) {
    if (!text.trim()) throw new ConfigError(null, "config.json: the box is empty: paste a config.json");
    return specFromDict(parseJSON(text));
  }

  Object.assign(W, { readConfig, ConfigError });
})();
