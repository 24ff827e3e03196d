"""The models: configurations, weights, the NumPy teaching models and their torch twins.

``config`` (GPT2Config), ``gpt2_weights``, ``gpt2`` (GPT-2 in NumPy, the book's model),
``llama`` (RoPE, RMSNorm, GQA, SwiGLU on the same base), ``torch_gpt2`` / ``torch_llama`` (the
batched torch twins, with ``torch_mirror``'s functions and ``torch_engine``'s fast steps),
``hf_config`` / ``model_spec`` (real models' configs), ``tokenizer``, ``toy`` and ``train_toy``.
Models use the caches below them and nothing above.
"""
