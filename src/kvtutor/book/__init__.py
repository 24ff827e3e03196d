"""Helpers for the book's chapters, not for use beside the model.

``display`` sets a notebook up and shows the package's source; ``demos`` holds the teaching variants
(no cache at all, the usual ``generate`` pseudo-code line by line, caches that count the bytes they
write, a cache of queries); ``wrong`` the deliberately wrong variants the chapters run beside the
real model, each one change to it made through the attention-core hook of ``GPT2Model.forward``.
"""
