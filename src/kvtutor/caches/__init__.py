"""The KV caches: where each layer's keys and values live between passes.

Every cache speaks one protocol, written once with its checks in ``protocol`` (``KVCacheBase``,
``Plan``): ``plan = cache.plan(T)``, then per layer ``keys, values, mask = cache.update(layer,
k_new, v_new, plan)``, then ``cache.advance(plan)``; besides ``len``, ``host_lengths``,
``capacity``, ``keys`` / ``values``, ``truncate``, ``reset_row`` and ``nbytes``.

``kv`` holds the caches of one sequence every chapter uses (preallocated and concatenating) and
their base (``OneSequenceCache``), ``window`` the sliding-window ring and its banded reference,
``quant`` the int8 cache, ``paged`` and ``prefix`` the block pool and the prefix cache built on it:
each a policy written once, whose data lives in the model's own arrays (``backend``: NumPy arrays
for a NumPy model, tensors on the device, in the model's dtype, for a torch model; ``for_model``
picks). ``torch_kv`` holds the batched torch caches (a length per row, the CUDA-graph fixed plan).
Caches import nothing from the models that fill them.
"""
