"""The models: configurations, weights, the NumPy teaching models and their torch twins.

A family is its config, its weights and the hooks where it differs (embedding, block, head); one
base per backend owns the rest: ``numpy_base.NumpyDecoder`` (cache, checked passes, generation)
and ``torch_base.TorchDecoder`` (the same, the one pass, the fast path), with ``steps`` and
``torch_mirror`` the steps every family shares, ``torch_weights`` the one weight packer and
``cuda_graphs`` the graphed decode step. The families: ``gpt2`` / ``torch_gpt2`` (the book's
model; ``config``, ``gpt2_weights``), ``llama`` / ``torch_llama`` (RoPE, RMSNorm, GQA, SwiGLU,
optional QK-norm) and ``qwen3`` / ``torch_qwen3`` (Llama's steps with QK-norm). Also:
``hf_config`` / ``model_spec`` (real models' configs), ``tokenizer``, ``toy`` and ``train_toy``.
Models use the caches below them and nothing above.
"""
