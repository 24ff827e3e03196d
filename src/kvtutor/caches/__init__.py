"""The KV caches: where each layer's keys and values live between passes.

``kv`` holds the NumPy caches every chapter uses (preallocated and concatenating), ``window`` the
sliding-window ring, ``quant`` the int8 cache, ``paged`` and ``prefix`` the block pool and the
prefix cache built on it, ``torch_kv`` the batched torch caches, ``torch_bridge`` a NumPy cache of
one sequence seen by a torch model. Caches import nothing from the models that fill them.

The protocol, the same verbs in NumPy and torch. A forward pass of T new tokens:

1. (torch, batched) ``plan = cache.plan(T, row=None, active=None, name="ids")``: where each row's
   new tokens go and which keys each query may see; it checks the room and changes nothing.
   ``fixed_plan(n_keys)`` is the same for a fixed-shape decode step (CUDA graphs).
2. For each layer: ``k_HSK, v_HSK = cache.update(layer, k_new, v_new)`` (torch: ``..., plan)``):
   store the T new keys and values after the cached ones, return every key and value the new
   queries attend to. A cache may hand back fewer (a sliding window) and say which each query
   sees with ``mask(T)`` (NumPy; ``plan.mask`` in torch).
3. ``cache.advance(T)`` (torch: ``advance(plan)``): the length moves on, once every layer is
   updated. Until then ``len(cache)`` and ``keys(layer)`` describe the committed state, so a pass
   that fails half way changes nothing a reader can see.

Besides: ``len(cache)`` (torch: ``host_lengths``, one length per row), ``capacity``,
``keys(layer)`` / ``values(layer)`` (read-only views of what is cached), ``truncate(length)``
(roll back: speculative decoding, reuse) and ``nbytes``. A CUDA graph of a decode step records
``advance_device(1)`` and the host follows with ``advance_host(1)``. Nothing outside a cache reads
its buffers or lengths directly.

A torch model takes any NumPy cache of one sequence as well (``torch_bridge.SequenceCache``, a
batch of one): the window, int8, paged and prefix-cached caches serve both backends.
"""
