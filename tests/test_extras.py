"""Without an optional extra, kvtutor says which one to install, before doing any work.

Each case runs in a fresh interpreter where the missing module is simulated by
``sys.modules[name] = None`` (so ``import name`` raises ModuleNotFoundError).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest


def _run(missing: str, code: str) -> subprocess.CompletedProcess[str]:
    script = f"import sys\nsys.modules[{missing!r}] = None\n" + textwrap.dedent(code)
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)


def test_kvtutor_imports_and_star_imports_without_torch():
    r = _run(
        "torch",
        """
        from kvtutor import *
        import kvtutor
        assert "TorchGPT2Model" not in kvtutor.__all__, kvtutor.__all__
        tok = load_toy_tokenizer()
        print(tok.decode(load_toy_model().generate(tok.encode("The cat sat"), 4)))
        """,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout == "on the mat.\n"


def test_torch_model_without_torch_names_the_extra():
    r = _run(
        "torch",
        """
        import kvtutor
        try:
            kvtutor.TorchGPT2Model
        except ModuleNotFoundError as exc:
            print(exc.name)
            print(exc)
        """,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [
        "torch",
        "kvtutor.TorchGPT2Model needs torch, which is not installed: pip install 'kvtutor[torch]'",
    ]


def test_star_import_offers_torch_model_when_torch_is_installed():
    pytest.importorskip("torch")
    import kvtutor

    assert "TorchGPT2Model" in kvtutor.__all__
    namespace: dict[str, object] = {}
    exec("from kvtutor import *", namespace)
    assert namespace["TorchGPT2Model"] is kvtutor.TorchGPT2Model


# `bench.cli.run` is replaced by a function that fails loudly: the error must come before any measuring.
_BENCH = """
import kvtutor.bench.cli
def _no_run(*args, **kwargs):
    raise SystemExit("measured")
kvtutor.bench.cli.run = _no_run
from kvtutor.__main__ import main
sys.exit(main({argv!r}))
"""


def test_bench_without_torch_names_the_extra():
    r = _run("torch", _BENCH.format(argv=["bench", "--size", "tiny"]))
    assert (r.returncode, r.stdout) == (2, "")
    assert r.stderr == (
        "python -m kvtutor bench: error: the benchmark needs torch, which is not installed: "
        "pip install 'kvtutor[torch]'\n"
    )


def test_bench_help_works_without_torch():
    r = _run("torch", _BENCH.format(argv=["bench", "--help"]))
    assert r.returncode == 0 and "--plots" in r.stdout, r.stderr


def test_bench_plots_without_matplotlib_fails_before_measuring(tmp_path):
    pytest.importorskip("torch")
    plots = tmp_path / "plots"
    r = _run("matplotlib", _BENCH.format(argv=["bench", "--size", "tiny", "--plots", str(plots)]))
    assert (r.returncode, r.stdout) == (2, "")
    assert r.stderr == (
        "python -m kvtutor bench: error: --plots needs matplotlib, which is not installed: "
        "pip install 'kvtutor[plots]'\n"
    )
    assert not plots.exists()


def test_other_missing_modules_are_not_disguised():
    """A module that is no extra of kvtutor is reported as itself (ModuleNotFoundError)."""
    from kvtutor.extras import missing_extra

    assert missing_extra(ModuleNotFoundError("x", name="torch._C"), "it") is None
    assert missing_extra(ModuleNotFoundError("x", name="numpy"), "it") is None
    error = missing_extra(ModuleNotFoundError("x", name="tqdm"), "it")
    assert error is not None and "kvtutor[torch]" in str(error) and error.name == "tqdm"


def test_installed_finds_modules_without_importing_them():
    from kvtutor.extras import EXTRAS, installed

    assert installed("numpy") and not installed("kvtutor_no_such_module") and not installed("")
    assert set(EXTRAS.values()) == {"torch", "plots"}
