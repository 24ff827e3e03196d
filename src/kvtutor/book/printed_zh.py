"""The Chinese of what the book's code cells print (``kvtutor.book.printed``): ``PRINTED`` maps an
English phrase, column heading or line to its Chinese; ``PRINTED_LINES`` a line or column with
``{field}``s, which match any text and are carried over as they are (or as these tables translate
them). Terms as in the glossary: 预填充 prefill, 解码 decode, KV 缓存, 词元 token, 批大小 batch
size, 屋顶线 roofline, 步耗时 step time. ``kvtutor.book.labels.ZH`` (the figures' and tables'
words) is looked up too."""

from __future__ import annotations

from . import printed_zh_serving, printed_zh_walkthrough

__all__ = ["PRINTED", "PRINTED_LINES", "VERBATIM"]

_PRINTED: dict[str, str] = {
    # ---- words every chapter prints
    "recorded on": "记录于",
    "recorded": "记录于",
    "torch threads": "个 torch 线程",
    "same logits": "logits 相同",
    "same next token": "下一个词元相同",
    "same tokens": "词元相同",
    "same tokens at every budget": "每个预算下词元都相同",
    "same tokens at every n": "每个 n 下词元都相同",
    "same as the model's output": "与模型的输出相同",
    "same as four separate GEMVs": "与四次单独的 GEMV 相同",
    "same again": "再次相同",
    "equal": "相同",
    "identical": "完全相同",
    "measured": "实测",
    "total": "总计",
    "speedup": "加速比",
    "cached": "缓存",
    "uncached": "不缓存",
    "cache": "缓存",
    "keys": "键",
    "values": "值",
    "bytes": "字节",
    "layer": "层",
    "layers": "层",
    "steps": "步数",
    "step": "步",
    "tokens": "词元",
    "tokens/step": "词元/步",
    "max": "最大",
    "none": "无",
    "model": "模型",
    "formula": "公式",
    "prefill": "预填充",
    "decode": "解码",
    "draft": "草稿",
    "target": "目标",
    "policy": "策略",
    "static": "静态批处理",
    "continuous": "连续批处理",
    "alone": "单独运行",
    "budget": "预算",
    "context": "上下文",
    "position": "位置",
    "positions": "位置",
    "array": "数组",
    "shape": "形状",
    "numbers": "元素数",
    "right": "正确",
    "wrong": "错误",
    "bug": "有错",
    "refused": "拒绝",
    "accepted": "接受",
    "keep": "保留",
    "reject": "拒绝",
    "split": "分段",
    "block": "块",
    "blocks": "块数",
    "weight": "权重",
    "output": "输出",
    "and": "和",
    "sinks": "汇聚点",
    "share": "占比",
    "uniform": "均匀",
    "agrees": "一致",
    "agree": "一致",
    "scales": "缩放因子",
    "held": "保留",
    # ---- cache versus recompute
    "cached MFLOP": "缓存 MFLOP",
    "uncached MFLOP": "不缓存 MFLOP",
    "FLOP ratio": "FLOP 之比",
    "cached tok/s": "缓存 tok/s",
    "recompute tok/s": "重算 tok/s",
    "CUDA graph tok/s": "CUDA 图 tok/s",
    "key buckets": "键桶",
    # ---- continuous batching
    "FLOPs per byte": "每字节 FLOPs",
    "step (ms)": "步耗时 (ms)",
    "arrival steps": "到达的步",
    "prompt lengths": "提示词长度",
    "new tokens wanted": "要生成的词元数",
    "chunk": "块大小",
    "chunks": "块数",
    "most tokens": "最多词元",
    "long request": "长请求",
    "short requests' gaps": "短请求的间隔",
    "budget steps": "  预算  步数",
    "in a step": "单步中",
    "short ones": "短请求",
    "modelled, ms most tokens long request": "模型估算, ms 最多词元 长请求",
    "all requests": "所有请求",
    "gap p50": "间隔 p50",
    "longest gap p99": "最长间隔 p99",
    "a step with its": "含其提示词的",
    "prompt (median)": "一步（中位数）",
    "short requests'": "短请求的",
    "longest gap": "最长间隔",
    "rounds, ms": "中位数, ms",
    "modelled, ms": "模型估算, ms",
    "One slot: a request runs alone from prefill to last token": (
        "一个槽位：请求从预填充到最后一个词元都独自运行，"
    ),
    "under both policies, nothing to refill.": "两种策略都一样，没有空出的槽位可补。",
    "The waste of static batching comes from requests": "静态批处理的浪费来自长度",
    "of different lengths (and arrival times).": "（以及到达时间）各不相同的请求。",
    # ---- flash attention
    "one layer": "一层",
    "scores": "分数",
    "scores held": "保留的分数",
    "acc": "acc",
    "lse": "lse",
    "of": "/",
    "factor": "因子",
    "keys  K, V MiB": "键数  K, V MiB",
    "plain": "普通",
    "o (its keys only)": "o（只用它的键）",
    "running max": "运行最大值",
    "running sum": "运行和",
    "batch B": "批大小 B",
    # ---- sharing keys and values
    "cache bytes": "缓存字节",
    "preallocated": "预分配",
    "after 100 tokens": "100 个词元后",
    # ---- how it was recorded
    "full sizes": "完整尺寸",
    "median round": "一轮的中位数",
    "whole =": "整步 =",
    "products x the rest": "乘法 x 其余",
    # ---- pitfalls
    "predicted": "预测",
    "shapes": "形状",
    "at": "在",
    "capacity": "容量",
    # ---- prealloc versus concat
    "bit-identical logits": "logits 逐位相同",
    "bit-identical keys and values": "键和值逐位相同",
    "every layer": "每一层",
    "prealloc s": "预分配 s",
    "concat s": "拼接 s",
    "extra s": "多出 s",
    "copies s": "复制 s",
    "in place, µs": "原地写, µs",
    "4 times fewer bytes": "字节数降到 1/4",
    # ---- the questions
    "logits allclose": "logits allclose",
    "caches allclose": "缓存 allclose",
    "half the KV cache again, for rows nobody reads": "又是 KV 缓存的一半，存的是没人读的行",
    "under 50 FLOPs per byte, at any batch size.": "都低于每字节 50 FLOPs，无论批大小多大。",
    # ---- RoPE
    "query at": "查询位置",
    "key at": "键位置",
    "score": "分数",
    "KV/token": "KV/词元",
    "full context": "完整上下文",
    "bytes/token": "字节/词元",
    "learned positions": "学习的位置向量",
    # ---- the same answer
    "token": "词元",
    "new tokens": "新词元",
    "logit rows": "logit 行",
    "largest |logit|": "最大 |logit|",
    "with a cache": "用缓存",
    "without a cache": "不用缓存",
    "with a cache    without   ratio": "用缓存           不用缓存   比值",
    # ---- speculative decoding
    "layer cut (1 of 2 layers)": "截层（2 层取 1）",
    "prompt lookup": "提示词查找",
    "guesses kept": "保留的猜测",
    "passes": "遍数",
    "tokens per pass": "每遍词元",
    "E round by round": "逐轮 E",
    "a set": "a 取值",
    "past some k it is a loss.": "k 超过某个值后就得不偿失。",
    # ---- the toy model
    "token embedding, also the LM head": "词元嵌入，也是 LM 头",
    "position embedding": "位置嵌入",
    "final LayerNorm": "最后的层归一化",
    # ---- smaller caches
    "full cache": "完整缓存",
    "full": "完整",
    "window": "窗口",
    "banded": "带状",
    "argmax agrees": "argmax 一致",
    "mean |dlogit|": "平均 |dlogit|",
    "mean KL": "平均 KL",
    "on position 0": "位置 0 上",
    "in the window": "窗口内",
    "|err|:normal": "|err|:正常",
    "outlier err/bound": "离群 err/界",
    "agree max|dlogit|": "一致 max|dlogit|",
    "int8 numbers": "int8 数值",
    "float residual": "浮点残差",
    "int8 cache": "int8 缓存",
    "bf16 cache": "bf16 缓存",
}

_PRINTED_LINES: dict[str, str] = {
    # ---- cache versus recompute
    "{n} operations:": "{n} 个操作：",
    "cache length {n_}: the step attends over {m_} slots": "缓存长度 {n_}：这一步在 {m_} 个槽上做注意力",
    "cached {a} GFLOP, uncached {b} GFLOP: {c} times more": (
        "缓存 {a} GFLOP，不缓存 {b} GFLOP：是前者的 {c} 倍"
    ),
    "{a_} layers: {b_} | {c_} layers: {d_} | per extra layer: {e_}": (
        "{a_} 层：{b_} | {c_} 层：{d_} | 每多一层：{e_}"
    ),
    "the roofline predicts {x} at n = {n} ({y})": "屋顶线预测 n = {n} 时快 {x}（{y}）",
    "torch {v}+cpu": "torch {v}+cpu",
    # ---- continuous batching
    "{dev}: {name}, {p} parameters in {dtype}, recorded {date}": (
        "{dev}：{name}，{p} 参数，{dtype}，记录于 {date}"
    ),
    "B = {b_}: step {t_} ms, {r_} tokens/s": "B = {b_}：一步 {t_} ms，{r_} 词元/s",
    "step {i_}: {who_}tokens {n_}, slots held {h_}": "第 {i_} 步：{who_}词元 {n_}，占用槽位 {h_}",
    "{n} steps, {t} tokens, {r} tokens per step": "{n} 步，{t} 个词元，每步 {r} 个词元",
    "{p_}: {a_} of {b_} requests got exactly the tokens of decoding alone": (
        "{p_}：{b_} 个请求中 {a_} 个得到的词元与单独解码完全相同"
    ),
    "{p_}: {n_} steps, {r_} tokens per step,": "{p_}：{n_} 步，每步 {r_} 个词元，",
    "{p_}: {n_} steps, {r_} tokens per step": "{p_}：{n_} 步，每步 {r_} 个词元",
    "latency mean {a} / max {b} steps, first token after {c} steps": (
        "延迟均值 {a} / 最大 {b} 步，第一个词元在 {c} 步后"
    ),
    "{p_}: {t_} ms, {r_} tokens/s, mean latency {l_} ms;": "{p_}：{t_} ms，{r_} 词元/s，平均延迟 {l_} ms；",
    "{p_}: {t_} s, {r_} tokens/s, mean latency {l_} s;": "{p_}：{t_} s，{r_} 词元/s，平均延迟 {l_} s；",
    "median step {a} ms (decode only), {b} ms (with a prefill)": (
        "步耗时中位数 {a} ms（仅解码），{b} ms（含预填充）"
    ),
    "continuous / static: {x} x the tokens per second, mean latency {y} x shorter": (
        "连续 / 静态：每秒词元数是 {x} 倍，平均延迟缩短到 1/{y}"
    ),
    "next {n} tokens": "后 {n} 个词元",
    "median of {n}": "{n} 轮的",
    "a decode-only step: {a} ms measured, {b} ms in the model": "只解码的一步：实测 {a} ms，模型中 {b} ms",
    "max_batch_size {n_}: static {a_} steps, continuous {b_} steps": (
        "max_batch_size {n_}：静态 {a_} 步，连续 {b_} 步"
    ),
    "{p_}: {t_} tokens from {s_} slot-steps held = {pct_}": (
        "{p_}：占用 {s_} 个槽位·步，产出 {t_} 个词元 = {pct_}"
    ),
    # ---- flash attention
    "{name}: H = {h}, Hkv = {kv}, K = {k}, S = {s}; one layer": (
        "{name}：H = {h}，Hkv = {kv}，K = {k}，S = {s}；一层"
    ),
    "MiB{a}prefill, T = S{b}decode, T = 1": "MiB{a}预填充，T = S{b}解码，T = 1",
    "K and V, 2 [Hkv, S, K]": "K 和 V，2 [Hkv, S, K]",
    "plain softmax attention over all six keys: {x}": "对全部六个键做普通 softmax 注意力：{x}",
    "max |online - plain| < {e}": "max |在线 - 普通| < {e}",
    "prefill logits {s}, online softmax vs the model's": "预填充 logits {s}，在线 softmax 对比模型的",
    "attention: max |difference| < {e}: {ok}": "注意力：max |差| < {e}: {ok}",
    "N for {n} SMs": "{n} SM 时的 N",
    "merged: {a}; the online softmax gave {b}": "合并：{a}；在线 softmax 得 {b}",
    "N = 1 .. {n}: max |split-KV - plain| < {e}: {ok}": "N = 1 .. {n}：max |split-KV - 普通| < {e}: {ok}",
    "{n} splits merged backwards: the same to {e}: {ok}": "{n} 段倒序合并：在 {e} 内相同: {ok}",
    "decode logits {s} after {n} cached tokens,": "缓存 {n} 个词元后的解码 logits {s}，",
    "split-KV vs the model's attention: max |difference| < {e}: {ok}": (
        "split-KV 对比模型的注意力：max |差| < {e}: {ok}"
    ),
    "{op}: {n} calls; its kernel:": "{op}：调用 {n} 次；它的内核：",
    "SDPA runs: {op} ({kind})": "SDPA 运行的是：{op}（{kind}）",
    "ceiling: {x} GB/s (GEMV read); K, V bytes/s / ceiling:": (
        "上限：{x} GB/s（GEMV 读取）；K、V 字节/s / 上限："
    ),
    "output: {a} (forwards: {b})": "输出：{a}（正序：{b}）",
    "tree vs in-order merge, the same to {e}: {ok}": "树形合并对比顺序合并，在 {e} 内相同: {ok}",
    # ---- sharing keys and values
    "query head {q} reads KV head {k}: scores match {ok}": "查询头 {q} 读 KV 头 {k}：分数一致 {ok}",
    "cache bytes, GQA: {a} | MHA: {b}": "缓存字节，GQA：{a} | MHA：{b}",
    "n_kv_heads={n} ({k} per group): cache keys {s},": "n_kv_heads={n}（每组 {k} 个）：缓存的键 {s}，",
    "logits match {a}, K/V match {b}, tokens match {c}": "logits 一致 {a}，K/V 一致 {b}，词元一致 {c}",
    "{kind} {a} MiB per layer per step, {b} GiB per step": "{kind} 每层每步 {a} MiB，每步 {b} GiB",
    # ---- how it was recorded
    "{cpu} ({n} torch threads), {date}, torch {v}": "{cpu}（{n} 个 torch 线程），{date}，torch {v}",
    "full sizes, {dtype}, {n} minutes": "完整尺寸，{dtype}，{n} 分钟",
    "load average {a} at the start, {b} at the end": "开始时负载均值 {a}，结束时 {b}",
    "on {n} CPU cores": "{n} 个 CPU 核上",
    # ---- pitfalls
    "fed {tok_} S={s_}: max |logit diff| = {d_}, same next token: {ok_}": (
        "输入 {tok_} S={s_}：max |logit 差| = {d_}，下一个词元相同：{ok_}"
    ),
    "attention rows computed: {a}, rows whose result was used: {b}": (
        "计算的注意力行：{a}，结果被用到的行：{b}"
    ),
    "top-left mask row: {r}": "左上角对齐的掩码行：{r}",
    "right next words: {w}": "正确的下一个词：{w}",
    "wrong next words: {w}": "错误的下一个词：{w}",
    "max |logit diff| : {d}": "max |logit 差| : {d}",
    "max |logit diff|: {d}": "max |logit 差|: {d}",
    "top-left mask: max |logit diff| per new token = {d}": (
        "左上角对齐掩码：每个新词元的 max |logit 差| = {d}"
    ),
    "offset   mask: max |logit diff| per new token = {d}": "偏移的掩码：  每个新词元的 max |logit 差| = {d}",
    "predicted: {p}  allclose: {ok}": "预测：{p}  allclose: {ok}",
    "model          predicted: {p}": "模型           预测：{p}",
    "shapes: q {a}  k {b}  v {c}": "形状：q {a}  k {b}  v {c}",
    "is_causal=True  equals v of {t} (row 0): {ok}": "is_causal=True  等于 {t} 的 v（第 0 行）：{ok}",
    "is_causal=True  equals the model's output: {ok}": "is_causal=True  等于模型的输出：{ok}",
    "mask_TS=causal_mask(1, S) equals the model's output: {ok}": (
        "mask_TS=causal_mask(1, S) 等于模型的输出：{ok}"
    ),
    "head {h}, model     : {x}": "头 {h}，模型      : {x}",
    "head {h}, is_causal : {x}": "头 {h}，is_causal : {x}",
    "buffer rows M = {m}, filled S = {s}; layer 0 k buffer rows {r} all zero: {ok}": (
        "缓冲区行数 M = {m}，已填 S = {s}；第 0 层 k 缓冲区第 {r} 行全为零：{ok}"
    ),
    "layer {l}, attention weight on the empty rows, per head: {w}": (
        "第 {l} 层，每个头落在空行上的注意力权重：{w}"
    ),
    "{p_}  right: {a_}   bug: {b_}": "{p_}  正确：{a_}   有错：{b_}",
    "{p_}  right: {a_} bug: {b_}": "{p_}  正确：{a_} 有错：{b_}",
    "{p_} right: {a_} bug: {b_}": "{p_} 正确：{a_} 有错：{b_}",
    "after the refused step: len(small) = {n} (unchanged)": "被拒绝的一步之后：len(small) = {n}（未变）",
    "capacity {c}: ValueError; len(cache) = {n}": "容量 {c}：ValueError；len(cache) = {n}",
    "capacity {c}: {text}, len(cache) = {n}": "容量 {c}：{text}，len(cache) = {n}",
    "agree on {n} tokens, with and without a cache: {ok}": "用缓存和不用缓存，{n} 个词元一致：{ok}",
    "capacity {c}: whole-buffer decode gives the right logits: {ok}": (
        "容量 {c}：对整个缓冲区解码给出正确的 logits：{ok}"
    ),
    "T = {t}, S = {s}: equal {ok}": "T = {t}，S = {s}：相同 {ok}",
    "{a} | right: {b}": "{a} | 正确：{b}",
    # ---- prealloc versus concat
    "one token's keys and values, all layers: {n} bytes": "一个词元在所有层的键和值：{n} 字节",
    "preallocated: holds {a_} MiB, wrote {b_} rows": "预分配：占 {a_} MiB，写了 {b_} 行",
    "concat: holds {a_} MiB, wrote {b_} rows": "拼接：  占 {a_} MiB，写了 {b_} 行",
    "copy bandwidth {x} GB/s; same tokens at every n: {ok}": "复制带宽 {x} GB/s；每个 n 下词元都相同：{ok}",
    "n = {n_}: prealloc {a_} s, concat {b_} s, speedup {c_}, same tokens {ok_}": (
        "n = {n_}：预分配 {a_} s，拼接 {b_} s，加速比 {c_}，词元相同 {ok_}"
    ),
    "S   cat, µs  in place, µs": "S   拼接, µs 原地写, µs",
    "concat copies {a} GiB; the weights are {b} GiB": "拼接共复制 {a} GiB；权重是 {b} GiB",
    "reserved for {n} tokens: {a} MiB; {m} tokens need {b} MiB": (
        "为 {n} 个词元预留：{a} MiB；{m} 个词元需要 {b} MiB"
    ),
    # ---- the questions
    "tokens processed          : {n}": "处理的词元              : {n}",
    "query rows stored per layer: {n} (each [H={h}, d_h={d}])": (
        "每层存下的查询行      : {n}（每行 [H={h}, d_h={d}]）"
    ),
    "times a stored row was read: {n}": "存下的行被读取的次数  : {n}",
    "max |logit diff| vs model  : {d}": "与模型的 max |logit 差|: {d}",
    "bytes spent on stored rows : {n} (as much as all the cached keys: {m} bytes)": (
        "存这些行花的字节      : {n}（与缓存的全部键一样多：{m} 字节）"
    ),
    "prefill, {a} queries x {b} keys:": "预填充，{a} 个查询 x {b} 个键：",
    "decode, 1 query x {b} keys:": "解码，1 个查询 x {b} 个键：",
    "decode with the (all-True) mask row vs without a mask, max |logit diff|: {d}": (
        "用（全为 True 的）掩码行解码对比不用掩码，max |logit 差|：{d}"
    ),
    "prefill {t_} : len(cache) = {n_}, scores {s_} = [H, T, S]": (
        "预填充 {t_} : len(cache) = {n_}，分数 {s_} = [H, T, S]"
    ),
    "decode  {t_} : len(cache) {a_} -> {b_}, scores {s_}, keys {k_}": (
        "解码    {t_} : len(cache) {a_} -> {b_}，分数 {s_}，键 {k_}"
    ),
    "decode, 1 token at S={s_} : {a_} GFLOP, {b_} MiB moved, {c_} FLOP/byte": (
        "解码，S={s_} 处的 1 个词元: {a_} GFLOP，搬运 {b_} MiB，{c_} FLOP/byte"
    ),
    "prefill of {n_} tokens    : {a_} GFLOP, {b_} MiB moved, {c_} FLOP/byte": (
        "预填充 {n_} 个词元       : {a_} GFLOP，搬运 {b_} MiB，{c_} FLOP/byte"
    ),
    "prefill, T tokens (B = 1)       : 1 row {a_}, {n_} rows {b_} FLOPs per byte": (
        "预填充，T 个词元（B = 1）       : 1 行 {a_}，{n_} 行 {b_} FLOPs/字节"
    ),
    "decode, B sequences at S = {s_}: 1 row {a_}, {n_} rows {b_} FLOPs per byte": (
        "解码，S = {s_} 处的 B 个序列: 1 行 {a_}，{n_} 行 {b_} FLOPs/字节"
    ),
    "logits allclose: {a}  lengths: {b}": "logits allclose: {a}  长度：{b}",
    "query cache {a} MiB, KV cache {b} MiB": "查询缓存 {a} MiB，KV 缓存 {b} MiB",
    "context {c}: smallest compute-bound batch = {b}": "上下文 {c}：最小的计算密集型批大小 = {b}",
    "None: at S = {s} the cache reads alone keep each step": "None：在 S = {s} 处，光是读缓存就让每一步",
    # ---- RoPE
    "pair {j}": "第 {j} 对",
    "layer {l}: cache.keys {s} == apply_rope: {ok}": "第 {l} 层：cache.keys {s} == apply_rope：{ok}",
    "layer {l}, max |stored - unrotated| by position:": "第 {l} 层，按位置的 max |存储值 - 未旋转值|：",
    "largest logit without a cache: {x}": "不用缓存时最大的 logit：{x}",
    "position {p} (the cache length): the same logits to float32": "位置 {p}（缓存长度）：logits 在 float32",
    "rounding (relative difference < {e}): {ok}": "舍入误差内相同（相对差 < {e}）：{ok}",
    "position {p} (off by one): max |difference| {x}": "位置 {p}（差一）：max |差| {x}",
    "next step, right cache: relative difference < {e}: {ok}": "下一步，正确的缓存：相对差 < {e}：{ok}",
    "next step, with the misplaced key: max |difference| {x}": "下一步，位置错的键：max |差| {x}",
    "positions {a} vs {b}: relative difference < {e}: {ok}": "位置 {a} 对比 {b}：相对差 < {e}：{ok}",
    "m - n": "m - n",
    "rope_scaling": "rope_scaling",
    "{model}: accepted, d_head {d}, rope_theta {t}": "{model}：接受，d_head {d}，rope_theta {t}",
    "{model}: refused:": "{model}：拒绝：",
    "tokens: {t}": "词元：{t}",
    "logits at all {n} positions match: {ok}": "全部 {n} 个位置的 logits 一致：{ok}",
    "K/V match: {a} | tokens match: {b}": "K/V 一致：{a} | 词元一致：{b}",
    "cache [L, H_kv, M, d_h] bytes/token": "缓存 [L, H_kv, M, d_h] 字节/词元",
    "formula, fp32: {n} bytes": "公式，fp32：{n} 字节",
    "position weights: GPT-2 {a} | Llama-style {b}": "位置权重：GPT-2 {a} | Llama 式 {b}",
    "every head's key has RMS 1 (within {e}): {ok}": "每个头的键 RMS 都为 1（误差 {e} 内）：{ok}",
    "{model_} L={l_} H_kv={h_} d_h={d_}, QK-norm {q_}: {n_} KiB per token": (
        "{model_} L={l_} H_kv={h_} d_h={d_}，QK-norm {q_}：每词元 {n_} KiB"
    ),
    "after {n} steps off by one: {x}": "差一的 {n} 步之后：{x}",
    "all positions one later: relative difference < {e}: {ok}": "所有位置都后移一位：相对差 < {e}：{ok}",
    "pair {j}: {n} positions per turn": "第 {j} 对：每转一圈 {n} 个位置",
    "{n} pairs (from pair {j}) turn less than once in {m}": (
        "{n} 对（从第 {j} 对起）在 {m} 个位置内转不到一圈"
    ),
    "Llama-style (RoPE)": "Llama 式 (RoPE)",
    "GPT-2 (learned positions)": "GPT-2 (学习的位置)",
    "Llama-style": "Llama 式",
    # ---- the same answer
    "new tokens  : {t_} {text_}": "新词元      : {t_} {text_}",
    "len(cache)  : {n} = {p} prompt + {d} decoded": "len(cache)  : {n} = 提示词 {p} + 解码 {d}",
    "full pass logits: {s}  layers traced: {n}": "完整前向的 logits：{s}  跟踪的层数：{n}",
    "layer {l} keys of the full pass, k_HSK: {s}": "完整前向第 {l} 层的键，k_HSK：{s}",
    "layer {l}: {s}, max |K diff| and |V diff| < {e}: {a}, allclose: {b}": (
        "第 {l} 层：{s}，max |K 差| 和 |V 差| < {e}：{a}，allclose：{b}"
    ),
    "cached logits   : {a}  matching rows of the full pass: {b}": (
        "缓存的 logits  : {a}  完整前向中对应的行：{b}"
    ),
    "max |logit diff| < {e}: {ok}": "max |logit 差| < {e}: {ok}",
    "relative diff   < {e}: {ok}": "相对差          < {e}: {ok}",
    "with a cache   : {t_} {text_}": "用缓存         : {t_} {text_}",
    "without a cache: {t_} {text_}": "不用缓存       : {t_} {text_}",
    "with a cache   : {t_}": "用缓存         : {t_}",
    "without a cache: {t_}": "不用缓存       : {t_}",
    "config: D={d}, H={h}, L={l}, V={v}, {n} parameters": "配置：D={d}，H={h}，L={l}，V={v}，{n} 个参数",
    "sequence: {p} prompt + {n} new tokens, len(cache) = {c}": (
        "序列：提示词 {p} + 新词元 {n}，len(cache) = {c}"
    ),
    "level 1, max |K or V diff| over all layers < {e}: {a}  allclose: {b}": (
        "第 1 层次，所有层的 max |K 或 V 差| < {e}：{a}  allclose：{b}"
    ),
    "level 2, max |logit diff| < {e}: {a}  allclose: {b}": (
        "第 2 层次，max |logit 差| < {e}：{a}  allclose：{b}"
    ),
    "level 3, greedy tokens identical: {ok}": "第 3 层次，贪心词元完全相同：{ok}",
    "level {n}: {ok}": "第 {n} 层次：{ok}",
    "total          : {a} vs {b} ({x})": "总计           : {a} 对 {b}（{x}）",
    "token at length {n_}: {a_} GFLOP with a cache, {b_} GFLOP without ({x_})": (
        "长度 {n_} 处的词元：用缓存 {a_} GFLOP，不用缓存 {b_} GFLOP（{x_}）"
    ),
    "whole generation: {a} TFLOP vs {b} TFLOP ({x})": "整个生成：{a} TFLOP 对 {b} TFLOP（{x}）",
    "every formula equals the count, term by term: {ok}": "每个公式都逐项等于计数：{ok}",
    "per token without a cache: {a} w = (S + (N - 1)/2) w": "不用缓存时每词元：{a} w = (S + (N - 1)/2) w",
    "cache.keys(0): {s} -> {k} key heads shared by {q} query heads": (
        "cache.keys(0)：{s} -> {k} 个键头由 {q} 个查询头共享"
    ),
    "first length with a ratio above {r}: {n} (ratio {x})": "比值首次超过 {r} 的长度：{n}（比值 {x}）",
    "all FLOPs, without / with a cache: {x}": "全部 FLOPs，不用缓存 / 用缓存：{x}",
    "each uncached token reruns the prompt; the cached loop runs it once": (
        "每个不用缓存的词元都重跑一遍提示词；用缓存的循环只跑一次"
    ),
    "token          : {t}": "词元           : {t}",
    "largest |logit| : {x}": "最大 |logit|    : {x}",
    "logit rows  : {s}": "logit 行    : {s}",
    "identical      : {ok}": "完全相同       : {ok}",
    "TFLOP             with a cache    without   ratio": "TFLOP             用缓存          不用      比值",
    # ---- speculative decoding
    "target: {a} layers | draft: {b} layer": "目标模型：{a} 层 | 草稿模型：{b} 层",
    "draft shares the target's embedding: {ok}": "草稿模型共用目标模型的嵌入：{ok}",
    "{p_}  target -> {a_}  draft -> {b_}": "{p_}  目标 -> {a_}  草稿 -> {b_}",
    "{p_} target -> {a_} draft -> {b_}": "{p_} 目标 -> {a_} 草稿 -> {b_}",
    "context: {c} | target cache holds {n} tokens": "上下文：{c} | 目标模型的缓存存有 {n} 个词元",
    "draft guesses: {g} ({n} draft decode steps)": "草稿的猜测：{g}（草稿模型解码 {n} 步）",
    "one target pass over {n} rows at positions {p}; cache now holds {m}": (
        "目标模型对位置 {p} 的 {n} 行做一遍前向；缓存现存 {m} 个"
    ),
    "row {r_}: after {a_} the target says {b_} draft guessed {c_} {v_}": (
        "第 {r_} 行：在 {a_} 之后 目标给出 {b_} 草稿猜了 {c_} {v_}"
    ),
    "row {r_}: after {a_} the target says {b_} draft guessed {c_}": (
        "第 {r_} 行：在 {a_} 之后 目标给出 {b_} 草稿猜了 {c_}"
    ),
    "kept {n} guesses, then the target's own token {t}: {m} new tokens from one pass": (
        "保留 {n} 个猜测，再加目标模型自己的词元 {t}：一遍前向得到 {m} 个新词元"
    ),
    "new text: {t}": "新文本：{t}",
    "cache truncated to {n} = all tokens but the last, ready for the next round": (
        "缓存截断到 {n} = 除最后一个外的所有词元，准备下一轮"
    ),
    "one pass of {n} rows == {m} decode steps: {ok}": "一遍 {n} 行的前向 == {m} 个解码步：{ok}",
    "target's choices, offset mask:   {c}": "目标的选择，偏移的掩码：      {c}",
    "target's choices, top-left mask: {c}": "目标的选择，左上角对齐的掩码：{c}",
    "{a} prompts x {b} drafts x {c} values of k:": "{a} 个提示词 x {b} 个草稿模型 x {c} 个 k 值：",
    "{a} of {b} runs give the target's greedy tokens": "{b} 次运行中 {a} 次给出目标模型的贪心词元",
    "target p  {p}": "目标 p    {p}",
    "draft q   {q}": "草稿 q    {q}",
    "total variation from p: speculative samples {a}, draft q itself {b}": (
        "与 p 的总变差：投机采样 {a}，草稿 q 本身 {b}"
    ),
    "one-layer draft step: c = {a}, prompt lookup: c = {b}": (
        "一层草稿模型的一步：c = {a}，提示词查找：c = {b}"
    ),
    "pass over {n} rows: v = {v} decode steps": "{n} 行的一遍前向：v = {v} 个解码步",
    "weights {a} GiB, decode step {b} ms; draft step c = {c}": (
        "权重 {a} GiB，解码一步 {b} ms；草稿一步 c = {c}"
    ),
    "a pass over T rows, in decode steps:": "T 行的一遍前向，以解码步计：",
    "plain {a} s, speculative {b} s: {x} times as fast": "普通 {a} s，投机 {b} s：速度是 {x} 倍",
    "c = {c}: best k = {k}, speed-up {x}": "c = {c}：最佳 k = {k}，加速 {x}",
    "Each extra guess costs c but is reached only with probability a^k:": (
        "每多猜一个要花 c，但只有以概率 a^k 才用得上："
    ),
    "acceptance rate {a}": "接受率 {a}",
    "tokens identical to the target's: {ok}": "词元与目标模型的完全相同：{ok}",
    "temperature {t}: a = {a}; greedy: a = {b}": "温度 {t}：a = {a}；贪心：a = {b}",
    # ---- the toy model
    "{n} tokens in the vocabulary": "词表中有 {n} 个词元",
    "numbers in one layer: {n} (layer 1 has the same shapes)": "一层的元素数：{n}（第 1 层形状相同）",
    "parameters: {n} | dtype: {d}": "参数：{n} | dtype：{d}",
    "weights stored: {a} bytes | read by a pass: {b}": "存储的权重：{a} 字节 | 一遍前向读取：{b}",
    "keys {a} | values {b}": "键 {a} | 值 {b}",
    "length {n} of capacity {c}": "长度 {n}，容量 {c}",
    "bytes reserved: {n}": "预留字节：{n}",
    "by hand: {a} | from the table: {b}": "手算：{a} | 由表得：{b}",
    # ---- smaller caches
    "len(cache)  slot 0  slot 1  slot 2  slot 3  keys(0)": (
        "len(cache)  槽 0    槽 1    槽 2    槽 3    keys(0)"
    ),
    "prompt: {n} tokens, then {t}": "提示词：{n} 个词元，然后是 {t}",
    "{kind_} predicts {t_} max |logits - banded| {x_}, {n_} bytes": (
        "{kind_} 预测 {t_} max |logits - 带状| {x_}，{n_} 字节"
    ),
    "full cache: attention on position 0 {x}": "完整缓存：位置 0 上的注意力 {x}",
    "W = {w}, {k} sinks: |output - full| / |full| {x}": "W = {w}，{k} 个汇聚点：|输出 - 完整| / |完整| {x}",
    "cache                  tokens argmax agrees mean |dlogit|  mean KL": (
        "缓存                   词元数 argmax 一致  平均 |dlogit|  平均 KL"
    ),
    "model               layer   share  uniform   share  uniform": (
        "模型                层      占比   均匀      占比   均匀"
    ),
    "Llama twin, random": "Llama 孪生，随机",
    "toy GPT-2, trained": "玩具 GPT-2，训练过",
    "outlier channels {c}: bit-identical logits: {ok}": "离群通道 {c}：logits 逐位相同：{ok}",
    "sinks tokens  agrees mean |dlogit|  mean KL": "汇聚点 词元  一致   平均 |dlogit|  平均 KL",
    "held: {p} len {n}": "保留：{p} len {n}",
    "{n} bytes (its own nbytes: {m})": "{n} 字节（它自己的 nbytes：{m}）",
    "{n} bytes: int8 is {x} of it": "{n} 字节：int8 是它的 {x}",
    "W = {w}, {k} sinks": "W = {w}，{k} 个汇聚点",
}


def _merged(*tables: dict[str, str]) -> dict[str, str]:
    """The tables as one; an English text that two of them give different Chinese is an error."""
    out: dict[str, str] = {}
    for table in tables:
        clash = sorted(en for en in table if en in out and out[en] != table[en])
        if clash:
            raise ValueError(f"printed tables: {clash} each have two different Chinese texts")
        out.update(table)
    return out


#: The tables of this module and of the subjects' modules (``printed_zh_walkthrough``, the
#: walkthrough's chapters; ``printed_zh_serving``, the GPU, paged and serving chapters).
PRINTED = _merged(_PRINTED, printed_zh_walkthrough.PRINTED, printed_zh_serving.PRINTED)
PRINTED_LINES = _merged(
    _PRINTED_LINES, printed_zh_walkthrough.PRINTED_LINES, printed_zh_serving.PRINTED_LINES
)

#: Lines printed as they are in both editions: the wrapped lines of the package's own error
#: messages, which a reader's run prints in English (their first line starts with the argument's
#: name, or the exception's, and is kept by ``kvtutor.book.printed`` itself).
VERBATIM: frozenset[str] = frozenset(
    {
        "max_new_tokens: prompt of 3 + 12 new tokens exceeds the cache's capacity 8:",
        "it needs 14 positions (the last new token is not fed back)",
        "config['rope_scaling']: RoPE scaling is not modelled; expected none, got",
        "length: a cache of length 350 keeps positions 318..319, which this window",
        "has evicted; expected 352 (no change), 0, or any length before the window",
        "first evicts; got 350",
        "n_kv_heads=5 -> n_kv_heads: expected a divisor of n_heads=12, got 5",
        # the command that recorded the Intel Xeon run of 2026-12-05, bench-cpu.json (how_recorded)
        "src/kvtutor/data/runs/bench-cpu-xeon-2026-12-05.json --plots",
        "/tmp/benchplots",
        # the operations a traced decode step runs, by their torch names
        "scaled_dot_product_attention: 4, is_nonzero: 2, __or__: 1, any: 1, embedding: 1",
        "ge: 1, isfinite: 1, lt: 1, sum: 1",
        # a shell command's wrapped line
        "bandwidth,prefill_goal,generate --out",
    }
)
