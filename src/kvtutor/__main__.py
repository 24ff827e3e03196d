"""Command line: ``python -m kvtutor bench ...`` and ``python -m kvtutor kv-memory ...``."""

from __future__ import annotations

import sys

COMMANDS = {
    "bench": ("kvtutor.bench", "measure prefill/decode against this machine's ceilings"),
    "kv-memory": ("kvtutor.measure.memory", "KV-cache and weight memory of a model config.json"),
}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in COMMANDS:
        lines = [f"  {name:<10} {help_}" for name, (_, help_) in COMMANDS.items()]
        usage = "usage: python -m kvtutor COMMAND [ARGS]\n\ncommands:\n" + "\n".join(lines)
        if argv and argv[0] not in ("-h", "--help"):  # a usage error: all of it on stderr
            print(
                f"{usage}\n\nerror: COMMAND: expected one of {list(COMMANDS)}, got {argv[0]!r}",
                file=sys.stderr,
            )
            return 2
        print(usage)
        return 0
    import importlib

    from .extras import missing_extra

    try:
        module = importlib.import_module(COMMANDS[argv[0]][0])
        return int(module.main(argv[1:]) or 0)
    except ModuleNotFoundError as exc:
        error = missing_extra(exc, f"python -m kvtutor {argv[0]}")
        if error is None:
            raise
        print(f"error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
