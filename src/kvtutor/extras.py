"""kvtutor's optional extras: which module each one brings, and the error that names the extra to
install when one of those modules is missing (``pip install 'kvtutor[torch]'``, ``kvtutor[plots]``).
"""

from __future__ import annotations

import importlib.util

__all__ = ["EXTRAS", "installed", "missing_extra"]

#: What to install when an optional import is missing: the module's name -> kvtutor's extra.
EXTRAS = {"torch": "torch", "tqdm": "torch", "matplotlib": "plots"}


def installed(module: str) -> bool:
    """Whether ``module`` can be imported here (found without importing it)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def missing_extra(exc: ModuleNotFoundError, what: str) -> ModuleNotFoundError | None:
    """For a missing optional module, an error that names the extra to install; else None."""
    extra = EXTRAS.get(exc.name or "")
    if extra is None:
        return None
    message = f"{what} needs {exc.name}, which is not installed: pip install 'kvtutor[{extra}]'"
    return ModuleNotFoundError(message, name=exc.name)
