"""Run every chapter as a reader would in Colab or Binder: from a copy outside the repository, in
an environment that has kvtutor[notebooks] and a kernel but none of the book's tools.

    python tools/run_standalone.py book/*.ipynb      (``make standalone`` runs it in its own venv)

Each notebook is copied into a fresh temporary folder and executed there top to bottom; the first
failing cell ends the run with its notebook, cell and error. Prints one line per chapter.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

BOOK_TOOLS = ("myst_nb", "jupyter_book", "sphinx", "nbval")


SLOW_S = 10.0  # a cell slower than this (here) should say so before it runs


def _cell_seconds(nb) -> list[tuple[int, float]]:
    """(index among the notebook's own code cells, seconds) from nbclient's timing metadata."""
    from datetime import datetime

    out = []
    code = [c for c in nb.cells if c.cell_type == "code"][1:]  # [0]: the inserted check
    for i, cell in enumerate(code):
        t = cell.metadata.get("execution", {})
        start, end = t.get("iopub.execute_input"), t.get("shell.execute_reply")
        if start and end:
            seconds = datetime.fromisoformat(end.rstrip("Z")) - datetime.fromisoformat(start.rstrip("Z"))
            out.append((i, seconds.total_seconds()))
    return out


def main(paths: list[str]) -> int:
    present = [m for m in BOOK_TOOLS if importlib.util.find_spec(m) is not None]
    if present:
        print(f"this environment has the book's tools ({', '.join(present)}): use a reader's one, "
              "e.g. `make standalone`", file=sys.stderr)  # fmt: skip
        return 2
    import nbclient
    import nbformat

    os.environ.setdefault("MPLBACKEND", "Agg")
    failed = 0
    for path in map(Path, paths):
        with tempfile.TemporaryDirectory(prefix="kvtutor-reader-") as work:
            copy = Path(work) / path.name
            shutil.copy(path, copy)
            nb = nbformat.read(copy, as_version=4)
            # the kernel too must lack the book's tools (it is this environment's python3)
            check = f"import importlib.util as u\nassert not [m for m in {BOOK_TOOLS!r} if u.find_spec(m)]"
            nb.cells.insert(0, nbformat.v4.new_code_cell(check))
            t0 = time.perf_counter()
            try:
                nbclient.NotebookClient(
                    nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": work}}
                ).execute()
            except nbclient.exceptions.CellExecutionError as exc:
                failed += 1
                print(f"FAILED {path.name}: {str(exc).splitlines()[-1] if str(exc) else exc}", flush=True)
                continue
        slow = [f"cell {i} {s:.0f} s" for i, s in _cell_seconds(nb) if s > SLOW_S]
        note = f"; over {SLOW_S:.0f} s: {', '.join(slow)}" if slow else ""
        print(f"ok     {path.name} ({time.perf_counter() - t0:.0f} s{note})", flush=True)
    print(f"{len(paths) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
