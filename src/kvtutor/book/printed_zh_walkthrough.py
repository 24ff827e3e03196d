"""The Chinese of what the walkthrough's code cells print (prefill, decode, side by side, layers):
phrases in ``PRINTED`` and lines with ``{field}``s in ``PRINTED_LINES``, merged into
``kvtutor.book.printed_zh``'s tables (which say how they are read)."""

from __future__ import annotations

__all__ = ["PRINTED", "PRINTED_LINES"]

PRINTED: dict[str, str] = {
    "cache length": "缓存长度",
    "head": "头",
    "inf": "inf",
    "batch": "批大小",
    "same as the model's input": "与模型的输入相同",
    "same as the model's q": "与模型的 q 相同",
    "same as the model's K": "与模型的 K 相同",
    "same as the model's scores": "与模型的分数相同",
    "same as the model's weights": "与模型的权重相同",
    "weights read per step": "每步读取的权重",
    "K/V read per step": "每步读取的 K/V",
    "intensity": "算术强度",
}

PRINTED_LINES: dict[str, str] = {
    # ---- prefill
    "prompt {p} -> ids {i}": "提示词 {p} -> id {i}",
    "recorded in each of the {n} layers:": "{n} 层中每层记录的：",
    "{m}, head {h} {s}, one row per token": "{m}，头 {h} {s}，每个词元一行",
    "head {h}: {a} @ {b} = {c}": "头 {h}：{a} @ {b} = {c}",
    "mask (True = may look)": "掩码（True = 可以看）",
    "masked scores, head {h}": "加掩码后的分数，头 {h}",
    "A, head {h} {s}": "A，头 {h} {s}",
    "rows sum to 1: {ok}": "每行之和为 1：{ok}",
    "row {r} = {x}: {ok}": "第 {r} 行 = {x}：{ok}",
    "merge: {a}": "合并：{a}",
    "layer {l}: {a} -> {b}": "第 {l} 层：{a} -> {b}",
    "compared in layer {l}:": "在第 {l} 层比较的：",
    "and in layer {l}: {x}": "以及第 {l} 层的：{x}",
    "max |ours - model's| < {e}: {ok}": "max |我们的 - 模型的| < {e}：{ok}",
    "layer {l}: keys {a}, values {b}, the layer's own K and V: {ok}": (
        "第 {l} 层：键 {a}，值 {b}，就是该层自己的 K 和 V：{ok}"
    ),
    "layers {a} and {b} hold the same keys: {ok}": "第 {a} 层和第 {b} 层存的键相同：{ok}",
    "bytes filled: {a} of {b} reserved": "已填字节：{a}，预留 {b}",
    "last row: {x}": "最后一行：{x}",
    "row {r_}: after {a_} the model predicts {b_}": "第 {r_} 行：在 {a_} 之后 模型预测 {b_}",
    "FLOPs with the last row's logits only: {n}": "只算最后一行的 logits 时的 FLOPs：{n}",
    "layer {l}, first row of A in each head: {x}": "第 {l} 层，每个头中 A 的第一行：{x}",
    "layer {l}: rows unchanged {a}, keys unchanged {b}": "第 {l} 层：行未变 {a}，键未变 {b}",
    "step {a}: {n} multiply-adds | step {b}: {m}": "步骤 {a}：{n} 次乘加 | 步骤 {b}：{m}",
    # ---- decode
    "second cache for the walk, length {n}": "逐步演示用的第二个缓存，长度 {n}",
    "X_new {s} at position {p}": "位置 {p} 上的 X_new {s}",
    "same as row {r} of embedding all {n} tokens: {ok}": "与嵌入全部 {n} 个词元时的第 {r} 行相同：{ok}",
    "multiply-adds for {x}: decode {a} | prefill {b}": "{x} 的乘加次数：解码 {a} | 预填充 {b}",
    "weights of {w} loaded: both {n}": "读入的 {w} 权重：两者都是 {n}",
    "{a} equals row {r} of the full {b}: {ok}": "{a} 等于完整 {b} 的第 {r} 行：{ok}",
    "head {h}: q {x_}": "头 {h}：q {x_}",
    "buffers {s} | length {n}": "缓冲区 {s} | 长度 {n}",
    "plan: new row at position {p} | keys seen: {n}": "计划：新行写在位置 {p} | 看到的键：{n}",
    "after the write: {a} {b} ({n} cached rows + 1 new)": "写入之后：{a} {b}（缓存的 {n} 行 + 新的 1 行）",
    "{x} is a view into the buffer: {ok}": "{x} 是缓冲区的一个视图：{ok}",
    "rows {r} untouched: {ok}": "第 {r} 行未被改动：{ok}",
    "mask: None (the plain causal one)": "掩码：None（普通的因果掩码）",
    "{x} is still {n}": "{x} 仍是 {n}",
    "keys and values bit-identical to the preallocated cache: {x}": "键和值与预分配缓存的逐位相同：{x}",
    "rows written: preallocated {a} | concat {b}": "写入的行：预分配 {a} | 拼接 {b}",
    "all heads: {s}": "所有头：{s}",
    "full recompute: {s}": "完整重算：{s}",
    "last row equals the decode row: {ok}": "最后一行等于解码的那一行：{ok}",
    "rows {r} equal prefill's: {ok}": "第 {r} 行与预填充的相同：{ok}",
    "{a_} | all True: {ok}": "{a_} | 全为 True：{ok}",
    "masking changes nothing: {ok}": "加掩码不改变任何结果：{ok}",
    "row sums {x}": "各行之和 {x}",
    "head {h}: {a} @ {b} = {c} | all heads: {d}": "头 {h}：{a} @ {b} = {c} | 所有头：{d}",
    "head {h} output = {x}: {ok}": "头 {h} 的输出 = {x}：{ok}",
    "layer {l} output {s} | same: {ok}": "第 {l} 层输出 {s} | 相同：{ok}",
    "cache length after advance: {n}": "advance() 之后的缓存长度：{n}",
    "same logits as decode_step: {ok}": "logits 与 decode_step 的相同：{ok}",
    "both caches hold the same keys and values: {ok}": "两个缓存存的键和值相同：{ok}",
    "len(cache) {n}, scores [H, T, S] = {s}": "len(cache) {n}，分数 [H, T, S] = {s}",
    "text: {t}": "文本：{t}",
    "same as model.generate: {ok}": "与 model.generate 的相同：{ok}",
    "decode step at S = {s}: FLOPs {a} | bytes {b}": "S = {s} 处的解码步：FLOPs {a} | 字节 {b}",
    "decode {n} multiply-adds per weight": "解码：每个权重 {n} 次乘加",
    "prefill {n} multiply-adds per weight": "预填充：每个权重 {n} 次乘加",
    # ---- side by side
    "prefill of {x} -> {y}": "预填充 {x} -> {y}",
    "decode of {x} -> {y}": "解码 {x} -> {y}",
    "first {n} rows of K and V, every layer, equal prefill's: {ok}": (
        "每一层 K 和 V 的前 {n} 行都与预填充的相同：{ok}"
    ),
    "ridge {r} FLOP/byte; {m} prefill is compute-bound from T = {t}": (
        "脊点 {r} FLOP/byte；{m} 的预填充从 T = {t} 起是计算密集型"
    ),
    "full recompute: {s} logits, one row per position": "完整重算：{s} 的 logits，每个位置一行",
    "rows {r} = prefill's logits, max |diff| < {e}: {ok}": (
        "第 {r} 行 = 预填充的 logits，max |差| < {e}：{ok}"
    ),
    "row {r} = the decode step's logits, max |diff| < {e}: {ok}": (
        "第 {r} 行 = 解码步的 logits，max |差| < {e}：{ok}"
    ),
    "K/V as heavy as the weights at {n} tokens": "{n} 个词元时 K/V 与权重一样大",
    "K/V share of the bytes a decode step reads ({m})": "解码步所读字节中 K/V 的占比（{m}）",
    "{n} tokens: {x} FLOPs per byte": "{n} 个词元：每字节 {x} FLOPs",
    # ---- layers
    "decode step for {t} at position {p}:": "位置 {p} 上 {t} 的解码步：",
    "layer {l}: input {a} -> q {b}, cached keys {c} -> output {d}": (
        "第 {l} 层：输入 {a} -> q {b}，缓存的键 {c} -> 输出 {d}"
    ),
    "layer {a}'s input is layer {b}'s output: {ok}": "第 {a} 层的输入就是第 {b} 层的输出：{ok}",
    "layer-{a} keys from layer {b}'s output equal layer {c}'s cache: {ok}": (
        "由第 {b} 层输出算出的第 {a} 层键等于第 {c} 层的缓存：{ok}"
    ),
    "{t}, head {h}, layer {l} key: {x_}": "{t}，头 {h}，第 {l} 层的键：{x_}",
    "layer {a} keys {s}, layer {b} keys {c}": "第 {a} 层的键 {s}，第 {b} 层的键 {c}",
    # one column in English (a single space after the token); the Chinese keeps the next
    # column where the lines above have it
    "decode {t} -> {x} {u} layer {a} keys {s}, layer {b} keys {c}": (
        "解码 {t} -> {x} {u}   第 {a} 层的键 {s}，第 {b} 层的键 {c}"
    ),
    "decode {a} -> {b}: new row = new key {x}, old rows kept {y}": (
        "解码 {a} -> {b}：新行 = 新键 {x}，旧行保留 {y}"
    ),
    "toy model, bytes per token: per layer {a} | all {b}": "玩具模型，每词元字节数：每层 {a} | 全部 {b}",
    "{m}, {d}: bytes per token {n}": "{m}，{d}：每词元字节数 {n}",
    "full {n}-token context: {x}": "完整的 {n} 词元上下文：{x}",
    "after {a} was generated: {n} rows | after feeding {b}: {m}": (
        "生成 {a} 之后：{n} 行 | 把 {b} 喂回之后：{m}"
    ),
    "max |cached - recomputed| < {e}: {ok}": "max |缓存的 - 重算的| < {e}：{ok}",
}
