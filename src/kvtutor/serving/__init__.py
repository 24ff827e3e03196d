"""Serving many requests: ``loop`` (continuous batching, one scheduler step), ``metrics``
(time to first token, inter-token latency), ``speculative`` (draft and verify), ``backends``
(what a NumPy and a torch model each need to be served), ``paged_trace`` (a request trace over
the paged and prefix caches) and ``disagg`` (prefill and decode on separate machines).
"""

from .loop import *  # noqa: F403 - the loop's names are the package's
from .loop import __all__  # noqa: F401 - `from kvtutor import serving; serving.serve(...)`
