"""The book's figures: every function draws numbers handed to it and returns the matplotlib
``Figure`` (or Axes); none measures or computes model quantities.

``style`` holds the one palette and ``pyplot()``, which imports matplotlib (the ``plots`` extra) on
first use, so ``import kvtutor`` never needs it. By subject: ``figures`` (attention, the cache, matrix
shapes, information flow), ``demos`` (the figures of the demonstrations in ``kvtutor.book``),
``perf`` (benchmark results), ``serving`` (batching, latency, speculative decoding), ``memory`` (KV
memory, grouped-query attention, the paged cache) and ``gpu`` (a recorded GPU run).
"""
