"""kvtutor.book.wrong and kvtutor.book.demos: the wrong variants really are wrong, the right ones
match the model, and the baselines (no cache, the generate pseudo-code, counting caches) agree
with GPT2Model; kvtutor.plots.demos draws their figures."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pytest
from conftest import assert_same_state, cache_state
from hypothesis import given, settings
from hypothesis import strategies as st

import kvtutor
from kvtutor.book import demos
from kvtutor.book import wrong as book_wrong
from kvtutor.measure import costs
from kvtutor.models.gpt2 import causal_mask
from kvtutor.plots import demos as demo_plots
from kvtutor.plots import style

TOL = {"rtol": 1e-4, "atol": 1e-5}


def max_diff(a, b) -> float:
    return float(np.abs(np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)).max())


@pytest.fixture(scope="module")
def gqa_model() -> kvtutor.GPT2Model:
    cfg = kvtutor.GPT2Config(vocab_size=40, d_model=16, n_heads=4, n_layers=2, max_seq_len=20, n_kv_heads=2)
    return kvtutor.GPT2Model.random(cfg, seed=3)


# ---------------------------------------------------------------- masks


def test_top_left_mask_is_tril_and_equals_causal_mask_only_when_square():
    for t, s in [(1, 1), (3, 3), (1, 5), (3, 7), (4, 6)]:
        wrong = book_wrong.top_left_causal_mask(t, s)
        np.testing.assert_array_equal(wrong, np.tril(np.ones((t, s), dtype=bool)))
        assert np.array_equal(wrong, causal_mask(t, s)) == (t == s)


def test_decode_row_of_the_right_mask_is_all_true_and_of_the_wrong_one_sees_key_0_only():
    assert causal_mask(1, 6).tolist() == [[True] * 6]
    assert book_wrong.top_left_causal_mask(1, 6).tolist() == [[True] + [False] * 5]


def test_attention_cores_agree_when_square_and_differ_with_a_cache():
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((2, n, 4)).astype(np.float32) for n in (5, 5, 5))
    np.testing.assert_allclose(
        book_wrong.attention_top_left_mask(q, k, v), demos.attention_offset_mask(q, k, v)
    )
    q_new = q[:, -2:]
    assert (
        max_diff(book_wrong.attention_top_left_mask(q_new, k, v), demos.attention_offset_mask(q_new, k, v))
        > 1e-2
    )


# ---------------------------------------------------------------- torch's scaled_dot_product_attention


def test_sdpa_is_causal_aligns_top_left_and_an_explicit_mask_fixes_it():
    pytest.importorskip("torch")
    rng = np.random.default_rng(1)
    k, v = (rng.standard_normal((2, 6, 4)).astype(np.float32) for _ in range(2))
    for n_new in (1, 3):
        q = rng.standard_normal((2, n_new, 4)).astype(np.float32)
        wrong = book_wrong.attention_sdpa(q, k, v, is_causal=True)
        right = book_wrong.attention_sdpa(q, k, v, mask_TS=causal_mask(n_new, 6))
        np.testing.assert_allclose(wrong, book_wrong.attention_top_left_mask(q, k, v), **TOL)
        np.testing.assert_allclose(right, demos.attention_offset_mask(q, k, v), **TOL)
        assert max_diff(wrong, right) > 1e-2
    # a single decode query under is_causal=True sees key 0 only: its output IS value row 0
    q1 = rng.standard_normal((2, 1, 4)).astype(np.float32)
    np.testing.assert_allclose(book_wrong.attention_sdpa(q1, k, v, is_causal=True), v[:, :1], **TOL)


def test_sdpa_rejects_is_causal_together_with_a_mask():
    pytest.importorskip("torch")
    q = np.zeros((2, 1, 4), np.float32)
    with pytest.raises(ValueError, match=r"^is_causal: expected False"):
        book_wrong.attention_sdpa(q, q, q, is_causal=True, mask_TS=causal_mask(1, 1))


# ---------------------------------------------------------------- whole-model variants


def test_every_variant_is_the_models_own_forward_with_another_core(toy_model, monkeypatch):
    """No second forward loop: each whole-model variant calls GPT2Model.forward with a core."""
    calls = []
    forward = kvtutor.GPT2Model.forward

    def spy(self, ids_T, cache=None, trace=None, core=None):
        calls.append(core is not None)
        return forward(self, ids_T, cache, trace, core)

    monkeypatch.setattr(kvtutor.GPT2Model, "forward", spy)
    cache, q_cache = toy_model.new_cache(), demos.QCache.for_model(toy_model)
    demos.forward_offset_mask(toy_model, [1, 2], toy_model.new_cache())
    book_wrong.forward_top_left_mask(toy_model, [1, 2], toy_model.new_cache())
    book_wrong.forward_storing_queries(toy_model, [1, 2], cache, q_cache)
    book_wrong.forward_reading_cached_queries(toy_model, [3], cache, q_cache)
    book_wrong.decode_step_whole_buffer(toy_model, 4, cache)
    assert calls == [True] * 5


@pytest.mark.parametrize("kind", ["preallocated", "concat"])
def test_offset_mask_forward_matches_the_model_for_prefill_decode_and_chunks(toy_model, gqa_model, kind):
    for model in (toy_model, gqa_model):
        ref, mine = model.new_cache(kind=kind), model.new_cache(kind=kind)
        for ids in ([1, 2, 3], [4], [5, 6, 7], [7]):
            np.testing.assert_allclose(
                demos.forward_offset_mask(model, ids, mine), model.forward(ids, ref), **TOL
            )
        assert len(mine) == len(ref) == 8
        for layer in range(model.config.n_layers):
            np.testing.assert_allclose(mine.keys(layer), ref.keys(layer), **TOL)


def test_top_left_forward_is_right_for_prefill_and_wrong_for_decode_and_chunks(toy_model, gqa_model):
    for model in (toy_model, gqa_model):
        ref, wrong = model.new_cache(), model.new_cache()
        np.testing.assert_allclose(
            book_wrong.forward_top_left_mask(model, [1, 2, 3], wrong), model.prefill([1, 2, 3], ref), **TOL
        )
        assert max_diff(book_wrong.forward_top_left_mask(model, [4], wrong), model.forward([4], ref)) > 1e-3
        assert (
            max_diff(book_wrong.forward_top_left_mask(model, [5, 6, 7], wrong), model.forward([5, 6, 7], ref))
            > 1e-3
        )


def test_top_left_mask_changes_the_toy_models_next_token(toy_model):
    ref, wrong = toy_model.new_cache(), toy_model.new_cache()
    toy_model.prefill([1, 2, 3], ref)
    book_wrong.forward_top_left_mask(toy_model, [1, 2, 3], wrong)
    assert int(np.argmax(toy_model.decode_step(4, ref))) != int(
        np.argmax(book_wrong.forward_top_left_mask(toy_model, [4], wrong)[0])
    )


@st.composite
def chunk_case(draw):
    n_kv = draw(st.sampled_from([1, 2]))
    n_heads = n_kv * draw(st.integers(1, 2))
    cfg = kvtutor.GPT2Config(
        vocab_size=draw(st.integers(5, 30)),
        d_model=n_heads * draw(st.integers(2, 4)) + 2 * n_heads,  # LayerNorm over D = 2 keeps only signs
        n_heads=n_heads,
        n_layers=draw(st.integers(1, 2)),
        max_seq_len=16,
        n_kv_heads=n_kv,
    )
    model = kvtutor.GPT2Model.random(cfg, seed=draw(st.integers(0, 2**16)))
    model.weights.wte_VD *= 20  # the tied LM head would shrink every logit difference 50-fold
    for layer in model.weights.layers:  # GPT-2's 0.02 init makes attention nearly uniform: sharpen it
        layer.w_q *= 20
        layer.w_k *= 20
        layer.w_v *= 20
        layer.w_o *= 20
    n_past = draw(st.integers(1, 8))
    n_new = draw(st.integers(1, 6))
    ids = draw(st.lists(st.integers(0, cfg.vocab_size - 1), min_size=n_past + n_new, max_size=n_past + n_new))
    return model, ids[:n_past], ids[n_past:]


@settings(max_examples=40, deadline=None)
@given(chunk_case())
def test_offset_mask_always_matches_and_top_left_mask_never_does_after_a_cache(case):
    model, past, new = case
    ref, right, wrong = model.new_cache(), model.new_cache(), model.new_cache()
    for cache in (ref, right, wrong):
        model.prefill(past, cache)
    want = model.forward(new, ref)
    np.testing.assert_allclose(demos.forward_offset_mask(model, new, right), want, **TOL)
    got = book_wrong.forward_top_left_mask(model, new, wrong)
    # the first new query (at position len(past) > 0) sees only key 0 instead of 0..len(past)
    assert np.abs(got[0] - want[0]).max() > 1e-4


def test_reading_the_whole_buffer_is_wrong_unless_the_buffer_is_full(toy_model):
    ref, wrong = toy_model.new_cache(), toy_model.new_cache()
    toy_model.prefill([1, 2, 3], ref)
    toy_model.prefill([1, 2, 3], wrong)
    right_V = toy_model.decode_step(4, ref)
    wrong_V = book_wrong.decode_step_whole_buffer(toy_model, 4, wrong)
    assert wrong_V.shape == right_V.shape == (toy_model.config.vocab_size,)
    assert max_diff(wrong_V, right_V) > 1e-2
    assert len(wrong) == len(ref) == 4
    # layer 0's new row does not depend on the attention output, so it is written correctly
    np.testing.assert_allclose(wrong.keys(0), ref.keys(0), **TOL)
    # a buffer of capacity exactly len + 1 has no empty rows to read: then it is right
    full, ref2 = toy_model.new_cache(capacity=4), toy_model.new_cache(capacity=4)
    toy_model.prefill([1, 2, 3], full)
    toy_model.prefill([1, 2, 3], ref2)
    np.testing.assert_allclose(
        book_wrong.decode_step_whole_buffer(toy_model, 4, full), toy_model.decode_step(4, ref2), **TOL
    )


def test_whole_buffer_errors_leave_the_cache_unchanged(toy_model):
    with pytest.raises(TypeError, match=r"^cache: expected a PreallocatedKVCache"):
        book_wrong.decode_step_whole_buffer(toy_model, 4, toy_model.new_cache(kind="concat"))
    empty = toy_model.new_cache()
    with pytest.raises(ValueError, match=r"^cache: expected a prefilled cache"):
        book_wrong.decode_step_whole_buffer(toy_model, 4, empty)
    cache = toy_model.new_cache()
    toy_model.prefill([1, 2, 3], cache)
    before = cache_state(cache)
    with pytest.raises(ValueError, match=r"^token_id: expected a token id"):
        book_wrong.decode_step_whole_buffer(toy_model, 99, cache)
    with pytest.raises(TypeError, match=r"^token_id: expected an int"):
        book_wrong.decode_step_whole_buffer(toy_model, "4", cache)
    with pytest.raises(TypeError, match=r"^cache: expected a KV cache"):
        book_wrong.decode_step_whole_buffer(toy_model, 4, None)
    assert_same_state(before, cache_state(cache))


def test_variant_forward_rejects_bad_ids_and_overflow_without_touching_the_cache(toy_model):
    cache = toy_model.new_cache(capacity=5)
    toy_model.prefill([1, 2, 3], cache)
    before = cache_state(cache)
    with pytest.raises(ValueError, match=r"^ids_T: 3 tokens after 3 cached ones exceed the capacity 5"):
        book_wrong.forward_top_left_mask(toy_model, [4, 5, 6], cache)
    with pytest.raises(ValueError, match=r"^ids_T: expected token ids"):
        demos.forward_offset_mask(toy_model, [4, 40], cache)
    assert_same_state(before, cache_state(cache))


# ---------------------------------------------------------------- the Q cache


def test_stored_queries_are_never_read_and_change_nothing(toy_model, gqa_model):
    for model in (toy_model, gqa_model):
        kv, q = model.new_cache(), demos.QCache.for_model(model)
        ref = model.new_cache()
        for ids in ([1, 2, 3], [4], [5]):
            np.testing.assert_allclose(
                book_wrong.forward_storing_queries(model, ids, kv, q), model.forward(ids, ref), **TOL
            )
        assert q.reads == 0
        assert len(q) == len(kv) == 5
        cfg = model.config
        assert q.queries(0).shape == (cfg.n_heads, 5, cfg.d_head)
        assert q.nbytes == cfg.n_layers * cfg.n_heads * 5 * cfg.d_head * 4


def test_reading_cached_queries_recomputes_rows_that_nothing_uses(toy_model, gqa_model):
    for model in (toy_model, gqa_model):
        kv, q, ref = model.new_cache(), demos.QCache.for_model(model), model.new_cache()
        np.testing.assert_allclose(
            book_wrong.forward_reading_cached_queries(model, [1, 2, 3], kv, q),
            model.prefill([1, 2, 3], ref),
            **TOL,
        )
        assert q.reads == model.config.n_layers
        q.scramble(seed=7)  # garbage in every stored query row
        scrambled = q.queries(0).copy()
        np.testing.assert_allclose(
            book_wrong.forward_reading_cached_queries(model, [4], kv, q), model.forward([4], ref), **TOL
        )
        assert q.reads == 2 * model.config.n_layers + 1
        np.testing.assert_array_equal(q.queries(0)[:, :3], scrambled)


def test_q_cache_errors(toy_model):
    q = demos.QCache.for_model(toy_model)
    with pytest.raises(ValueError, match=r"^layer: expected 0 <= layer < 2"):
        q.append(2, np.zeros((2, 1, 4), np.float32))
    with pytest.raises(ValueError, match=r"^q_new_HTK: expected shape \[H=2, T, K=4\]"):
        q.append(0, np.zeros((2, 1, 3), np.float32))
    assert len(q) == 0
    kv = toy_model.new_cache()
    toy_model.prefill([1, 2], kv)
    before = cache_state(kv)
    with pytest.raises(ValueError, match=r"^q_cache: expected 2 stored rows"):
        book_wrong.forward_reading_cached_queries(toy_model, [3], kv, q)
    assert_same_state(before, cache_state(kv))
    assert len(q) == 0


# ---------------------------------------------------------------- baselines


def test_generation_without_cache_and_the_seeds_loop_give_the_models_tokens(toy_model, gqa_model):
    for model, prompt in ((toy_model, [1, 2, 3]), (gqa_model, [5, 1, 9, 2])):
        want = model.generate(prompt, 8)
        assert demos.generate_without_cache(model, prompt, 8) == want
        assert demos.pseudo_code_generate(model, prompt, 8) == want
        sampled = model.generate(prompt, 8, temperature=1.5, seed=4)
        assert demos.generate_without_cache(model, prompt, 8, temperature=1.5, seed=4) == sampled
        assert demos.pseudo_code_generate(model, prompt, 8, temperature=1.5, seed=4) == sampled
    assert demos.pseudo_code_generate(toy_model, [1, 2, 3], 0) == []
    assert demos.generate_without_cache(toy_model, [1, 2, 3], 0) == []


def test_the_toy_model_says_on_the_mat(toy_model):
    tok = kvtutor.load_toy_tokenizer()
    new = demos.pseudo_code_generate(toy_model, tok.encode(kvtutor.TOY_PROMPT), 4)
    assert tok.decode(new) == "on the mat."


def test_baseline_errors(toy_model):
    # 3 + 14 new tokens run 16 positions (the last new token is never fed back): they fit max_seq_len 16
    assert len(demos.generate_without_cache(toy_model, [1, 2, 3], 14)) == 14
    assert demos.pseudo_code_generate(toy_model, [1, 2, 3], 14) == toy_model.generate([1, 2, 3], 14)
    want = r"^max_new_tokens: prompt of 3 \+ 15 new tokens exceeds max_seq_len 16"
    with pytest.raises(ValueError, match=want):
        demos.generate_without_cache(toy_model, [1, 2, 3], 15)
    with pytest.raises(ValueError, match=want):
        demos.pseudo_code_generate(toy_model, [1, 2, 3], 15)
    with pytest.raises(ValueError, match=r"^prompt_ids: expected at least one token"):
        demos.pseudo_code_generate(toy_model, [], 3)
    with pytest.raises(TypeError, match=r"^prompt_ids: expected a sequence of int token ids"):
        demos.generate_without_cache(toy_model, "The cat", 3)
    with pytest.raises(ValueError, match=r"^temperature: expected >= 0"):
        demos.pseudo_code_generate(toy_model, [1], 3, temperature=-1.0)


# ---------------------------------------------------------------- caches that count bytes


def test_concat_writes_grow_quadratically_and_preallocated_writes_linearly(toy_model):
    cfg = toy_model.config
    row = 2 * cfg.n_layers * cfg.n_kv_heads * cfg.d_head * 4  # keys + values of one token, float32
    concat, pre = demos.counting_cache(toy_model, "concat"), demos.counting_cache(toy_model, "preallocated")
    assert isinstance(concat, kvtutor.ConcatKVCache) and isinstance(pre, kvtutor.PreallocatedKVCache)
    n_prompt, n_new = 3, 10
    assert toy_model.generate([1, 2, 3], n_new, cache=concat) == toy_model.generate(
        [1, 2, 3], n_new, cache=pre
    )
    n_final = n_prompt + n_new - 1  # the last token is emitted, never fed back
    assert pre.bytes_written == n_final * row
    # prefill copies 3 rows, then each decode step copies the whole history: 4, 5, ..., n_final
    assert concat.bytes_written == (n_prompt + sum(range(n_prompt + 1, n_final + 1))) * row
    assert pre.nbytes == cfg.max_seq_len * row and concat.nbytes == n_final * row


def test_counting_caches_give_bit_identical_logits(toy_model):
    concat, pre = demos.counting_cache(toy_model, "concat"), demos.counting_cache(toy_model, "preallocated")
    np.testing.assert_array_equal(toy_model.prefill([1, 2, 3], concat), toy_model.prefill([1, 2, 3], pre))
    for t in (4, 5, 6):
        np.testing.assert_array_equal(toy_model.decode_step(t, concat), toy_model.decode_step(t, pre))


def test_counting_cache_errors(toy_model):
    with pytest.raises(ValueError, match=r"^kind: expected one of"):
        demos.counting_cache(toy_model, "paged")
    with pytest.raises(ValueError, match=r"^capacity: expected 1 <= capacity <= 16"):
        demos.counting_cache(toy_model, "concat", capacity=17)
    cache = demos.counting_cache(toy_model, "concat", capacity=4)
    toy_model.prefill([1, 2, 3], cache)
    written = cache.bytes_written
    with pytest.raises(ValueError, match=r"^ids_T: 2 tokens after 3 cached ones exceed"):
        toy_model.forward([4, 5], cache)
    assert cache.bytes_written == written and len(cache) == 3


# ---------------------------------------------------------------- figures


def test_figures_draw_the_arrays_they_are_given(toy_model):
    cfg = kvtutor.GPT2Config(vocab_size=64, d_model=32, n_heads=4, n_layers=2, max_seq_len=64)
    with_ = [c.flops for c in costs.generation_costs(cfg, 4, 20)]
    without = [c.flops for c in costs.generation_costs(cfg, 4, 20, cached=False)]
    ctx = np.arange(4, 24)
    fig = demo_plots.plot_cumulative_flops(ctx, with_, without, title="t")
    assert len(fig.axes) == 2
    np.testing.assert_allclose(fig.axes[1].lines[0].get_ydata(), np.cumsum(without) / 1e9)
    plt.close(fig)
    fig = demo_plots.plot_bytes_written(ctx, 2 * ctx, ctx)
    assert len(fig.axes) == 1
    plt.close(fig)
    fig = demo_plots.plot_masks(3, 7, key_labels=list("abcdefg"))
    assert len(fig.axes) == 2 and len(fig.axes[0].images) == 1
    # as wide as the text column at most, so its labels are shown at their own size (>= 9 pt)
    assert fig.get_figwidth() <= style.PAGE_WIDTH + 1e-9
    assert min(t.get_fontsize() for ax in fig.axes for t in ax.texts) >= 9
    np.testing.assert_array_equal(
        fig.axes[0].images[0].get_array(), book_wrong.top_left_causal_mask(3, 7).astype(int)
    )
    plt.close(fig)
    fig = demo_plots.plot_intensity([1, 2, 4], {"a": [0.5, 1.0, 2.0], "b": [0.5, 0.7, 0.8]}, title="t")
    assert len(fig.axes[0].lines) == 2
    assert [t.get_text() for t in fig.axes[0].get_legend().get_texts()] == ["a", "b"]
    plt.close(fig)


def test_figure_errors():
    with pytest.raises(ValueError, match=r"^cached_N: expected a 1-D array of 3 values"):
        demo_plots.plot_cumulative_flops([1, 2, 3], [1, 2], [1, 2, 3])
    with pytest.raises(ValueError, match=r"^concat_N: expected a 1-D array of 2 values"):
        demo_plots.plot_bytes_written([1, 2], [[1, 2]], [1, 2])
    with pytest.raises(ValueError, match=r"^n_queries: expected at most n_keys=2"):
        demo_plots.plot_masks(3, 2)
    with pytest.raises(ValueError, match=r"^n_keys: expected a positive int"):
        demo_plots.plot_masks(1, 0)
    with pytest.raises(ValueError, match=r"^key_labels: expected 4 labels"):
        demo_plots.plot_masks(1, 4, key_labels=["a"])
    with pytest.raises(ValueError, match=r"^rows_N: expected a 1-D array"):
        demo_plots.plot_intensity(np.ones((2, 2)), {"a": [1, 2]})
    with pytest.raises(ValueError, match=r"^curves\['a'\]: expected a 1-D array of 2 values"):
        demo_plots.plot_intensity([1, 2], {"a": [1, 2, 3]})
    with pytest.raises(ValueError, match=r"^curves: expected at least one curve"):
        demo_plots.plot_intensity([1, 2], {})
