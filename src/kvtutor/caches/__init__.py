"""The KV caches: where each layer's keys and values live between passes.

``kv`` holds the NumPy caches every chapter uses (preallocated and concatenating), ``window`` the
sliding-window ring, ``quant`` the int8 cache, ``paged`` and ``prefix`` the block pool and the
prefix cache built on it, ``torch_kv`` the batched torch caches. Every cache speaks the protocol
written in ``kv``'s docstring. Caches import nothing from the models that fill them.
"""
