"""What the package takes from the machine around it: environment variables and the files a
command writes, each through one checked door.

* Environment variables (``KVTUTOR_*``, and the GPU tools' ``SIZE``/``DEVICE``) are read by
  ``env_text`` (unset or blank: None), ``env_choice`` (one of a list, any case) and ``env_flag``
  (yes/no: ``1/0``, ``true/false``, ``yes/no``, ``on/off``, any case). Anything else is a
  ValueError naming the variable, what it takes and what came: ``KVTUTOR_STRICT_ZH=false`` means
  off, ``KVTUTOR_STRICT_ZH=maybe`` is an error, never a guess.
* Every command that writes a file checks where first (``check_output_path``: before any work
  runs) and writes it whole or not at all (``write_atomically``).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = [
    "ENV_YES",
    "ENV_NO",
    "env_text",
    "env_choice",
    "env_flag",
    "check_output_path",
    "write_atomically",
]

#: What a yes/no environment variable takes, any case (unset or blank: its default).
ENV_YES = ("1", "true", "yes", "on")
ENV_NO = ("0", "false", "no", "off")


def env_text(name: str, environ: Mapping[str, str] | None = None) -> str | None:
    """The environment variable ``name`` (from ``environ``, default ``os.environ``) without its
    surrounding blanks; None where it is unset or blank. The one place a variable is read."""
    value = (os.environ if environ is None else environ).get(name)
    if value is None or not value.strip():
        return None
    return value.strip()


def env_choice(
    name: str, choices: Sequence[str], default: str | None = None, environ: Mapping[str, str] | None = None
) -> str | None:
    """The environment variable ``name`` as one of ``choices`` (compared in lower case; the choice
    comes back as listed), ``default`` where it is unset or blank; anything else is a ValueError
    naming the variable, the choices and what came."""
    value = env_text(name, environ)
    if value is None:
        return default
    by_key = {c.lower(): c for c in choices}
    if value.lower() not in by_key:
        raise ValueError(f"{name}: expected one of {list(choices)}, got {value!r}")
    return by_key[value.lower()]


def env_flag(name: str, default: bool = False, environ: Mapping[str, str] | None = None) -> bool:
    """A yes/no environment variable: True for 1, true, yes, on; False for 0, false, no, off (any
    case); ``default`` where it is unset or blank; anything else is a ValueError naming it."""
    value = env_text(name, environ)
    if value is None:
        return default
    if value.lower() not in ENV_YES + ENV_NO:
        pairs = ", ".join(f"{y}/{n}" for y, n in zip(ENV_YES, ENV_NO, strict=True))
        raise ValueError(f"{name}: expected one of {pairs} (any case), got {value!r}")
    return value.lower() in ENV_YES


# ---------------------------------------------------------------- the files a command writes


def check_output_path(path: Any, name: str, directory: bool = False) -> str:
    """``path`` if a file (``directory``: a folder for files) can be written there, checked before
    any work starts, the one check of every command that writes (``bench --out``/``--plots``,
    ``bench.speculative --out``, ``train_toy --out``); else a TypeError/ValueError naming ``name``
    (``--out``): an empty path, a file name that ends in a separator, an existing folder where a
    file should go (an existing file where a folder should), an existing device, pipe or socket,
    a file where a parent folder should be, or a nearest existing folder in which this process
    cannot create a file (tried: a temporary file is made there and removed, so ``/proc`` and a
    read-only mount are refused here, not after the run)."""
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"{name}: expected a path, got {type(path).__name__}")
    path = os.fspath(path)
    if not isinstance(path, str) or not path:
        raise ValueError(f"{name}: expected a path, got {'an empty string' if path == '' else repr(path)}")
    full = os.path.abspath(path)
    if directory and os.path.exists(full) and not os.path.isdir(full):
        raise ValueError(f"{name}: expected a directory, got the file {path!r}")
    if not directory and os.path.isdir(full):
        raise ValueError(f"{name}: expected a file to write, got the directory {path!r}")
    if not directory and path.endswith((os.sep, "/")):
        raise ValueError(f"{name}: expected a file name, got {path!r}, which ends in a separator")
    if os.path.exists(full) and not (os.path.isfile(full) or os.path.isdir(full)):
        raise ValueError(f"{name}: expected a regular file or a new name, got {path!r}, which is a "
                         "device, a pipe or a socket")  # fmt: skip
    parent = full if directory else os.path.dirname(full)
    while not os.path.lexists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        raise ValueError(
            f"{name}: expected a path under directories, got {path!r}, under the file {parent!r}"
        )
    try:  # access() says yes to root in /proc and on read-only mounts: try it
        fd, probe = tempfile.mkstemp(prefix=".kvtutor-probe-", dir=parent)
        os.close(fd)
        os.unlink(probe)
    except OSError as err:
        raise ValueError(
            f"{name}: expected a path this process may write, got {path!r} (no file can be made in "
            f"{parent!r}: {err.strerror})"
        ) from None
    return path


def write_atomically(path: str, write: Callable[[str], Any]) -> None:
    """Make the file ``path`` whole or not at all: ``write(tmp)`` writes a temporary file beside it,
    which then replaces ``path`` in one rename (a reader never sees half a file). If anything
    fails, the temporary file and the directories made for it are removed, and ``path`` is as
    it was."""
    full = os.path.abspath(path)
    parent, made = os.path.dirname(full), []
    while not os.path.lexists(parent):
        made.append(parent)
        parent = os.path.dirname(parent)
    tmp = os.path.join(os.path.dirname(full), f".{os.path.basename(full)}.{uuid.uuid4().hex[:12]}.tmp")
    try:
        for folder in reversed(made):
            os.mkdir(folder)
        write(tmp)
        os.replace(tmp, full)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        for folder in made:  # the deepest first
            with contextlib.suppress(OSError):
                os.rmdir(folder)
        raise
