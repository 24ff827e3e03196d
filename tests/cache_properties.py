"""Cache properties that every model in the package must have, whatever its architecture (GPT-2,
Llama-style): the test files of each model call these with their own hypothesis strategies."""

from __future__ import annotations

import numpy as np


def assert_greedy_equals_full_recompute(model, ids, n_prompt: int) -> None:
    """``generate`` with the cache gives the tokens of greedy decoding without any cache."""
    n_new = model.config.max_seq_len - n_prompt
    new = model.generate(ids[:n_prompt], n_new)
    seq = list(ids[:n_prompt])
    for _ in range(n_new):  # greedy decoding without any cache
        seq.append(int(np.argmax(model.logits_without_cache(seq)[-1])))
    assert new == seq[n_prompt:]


def assert_chunked_prefill_equals_one_prefill(model, ids, chunk: int) -> None:
    """A prompt fed through the cache ``chunk`` tokens at a time gives the logits of one pass."""
    cache = model.new_cache()
    rows = [model.forward(ids[i : i + chunk], cache) for i in range(0, len(ids), chunk)]
    np.testing.assert_allclose(np.concatenate(rows), model.logits_without_cache(ids), rtol=1e-4, atol=1e-5)
