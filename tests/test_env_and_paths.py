"""The package's edges with the machine (issue 43, class 7): one parser for environment variables,
one output-path check for every command that writes, bundled config names that cannot leave their
folder, config files that are not regular files, and a training script that never overwrites the
shipped weights by accident. Each refused call leaves every file as it was."""

from __future__ import annotations

import ast
import hashlib
import os
import re
from pathlib import Path

import pytest

import kvtutor
from kvtutor import environment
from kvtutor.book import editions
from kvtutor.environment import check_output_path, env_choice, env_flag, env_text
from kvtutor.measure import timing
from kvtutor.models import hf_config
from kvtutor.models.hf_config import bundled_config_path, load_model_spec, read_hf_config
from kvtutor.models.toy import toy_weights_path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = Path(kvtutor.__file__).parent


def listing(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# ---------------------------------------------------------------- environment variables


@pytest.mark.parametrize("value", ["1", "true", "TRUE", "Yes", "on", " On "])
def test_a_yes_no_variable_takes_the_yes_words(monkeypatch, value):
    monkeypatch.setenv("KVTUTOR_X", value)
    assert env_flag("KVTUTOR_X") is True


@pytest.mark.parametrize("value", ["0", "false", "False", "no", "OFF"])
def test_a_yes_no_variable_takes_the_no_words(monkeypatch, value):
    monkeypatch.setenv("KVTUTOR_X", value)
    assert env_flag("KVTUTOR_X", default=True) is False


@pytest.mark.parametrize("value", [None, "", "   "])
def test_an_unset_or_blank_variable_is_its_default(monkeypatch, value):
    if value is None:
        monkeypatch.delenv("KVTUTOR_X", raising=False)
    else:
        monkeypatch.setenv("KVTUTOR_X", value)
    assert env_flag("KVTUTOR_X") is False and env_flag("KVTUTOR_X", default=True) is True
    assert env_text("KVTUTOR_X") is None and env_choice("KVTUTOR_X", ("a", "b"), "a") == "a"


@pytest.mark.parametrize("value", ["maybe", "2", "y", "enabled", "-1"])
def test_any_other_word_is_refused_by_the_variables_name(monkeypatch, value):
    monkeypatch.setenv("KVTUTOR_STRICT_ZH", value)
    expected = "expected one of 1/0, true/false, yes/no, on/off (any case), got " + repr(value)
    with pytest.raises(ValueError, match="^KVTUTOR_STRICT_ZH: " + re.escape(expected) + "$"):
        env_flag("KVTUTOR_STRICT_ZH")
    with pytest.raises(ValueError, match="^KVTUTOR_STRICT_ZH: expected one of"):
        editions.strict()


def test_strict_chinese_mode_reads_false_as_off(monkeypatch):
    # before: any value but "" and "0" switched strict mode on, "false" and "no" included
    for off in ("false", "no", "off", "0", "FALSE"):
        monkeypatch.setenv(editions.STRICT_ENV, off)
        assert editions.strict() is False, off
    for on in ("1", "true", "yes", "on"):
        monkeypatch.setenv(editions.STRICT_ENV, on)
        assert editions.strict() is True, on


def test_a_choice_variable_takes_any_case_and_refuses_the_rest_by_name(monkeypatch):
    monkeypatch.setenv("KVTUTOR_BENCH_SIZE", " Tiny ")
    assert timing.bench_size() == "tiny"
    monkeypatch.setenv("KVTUTOR_BENCH_SIZE", "huge")
    with pytest.raises(ValueError, match=r"^KVTUTOR_BENCH_SIZE: expected one of \['tiny', 'quick', 'full'\]"):
        timing.bench_size()


def test_paths_in_variables_keep_their_case(monkeypatch):
    monkeypatch.setenv("KVTUTOR_CJK_FONT", "  /Fonts/My Font.TTC ")
    assert env_text("KVTUTOR_CJK_FONT") == "/Fonts/My Font.TTC"


def _environment_reads(path: Path) -> list[str]:
    """Every read of the process environment in ``path``: os.environ.get/[...], os.getenv."""
    tree, found = ast.parse(path.read_text(encoding="utf-8")), []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            text = ast.unparse(node.func)
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
            text = ast.unparse(node.value) + "[]"
        else:
            continue
        if text in ("os.environ.get", "os.getenv", "os.environ[]", "environ.get", "getenv"):
            found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_every_environment_variable_is_read_through_the_one_parser():
    files = [*PACKAGE.rglob("*.py"), *(ROOT / "tools").glob("*.py")]
    reads = [r for f in files if f != Path(environment.__file__) for r in _environment_reads(f)]
    assert reads == [], (
        "read these through kvtutor.environment (env_flag, env_choice, env_text):\n" + "\n".join(reads)
    )


# ---------------------------------------------------------------- the output-path check


@pytest.mark.parametrize(
    ("out", "message"),
    [
        ("", r"^--out: expected a path, got an empty string$"),
        (
            "/proc/kvtutor-x.json",
            r"^--out: expected a path this process may write, got '/proc/kvtutor-x.json' ",
        ),
        ("/dev/null", r"^--out: expected a regular file or a new name, got '/dev/null', which is a device"),
        ("DIR/", r"^--out: expected a file name, got '.*/', which ends in a separator$"),
    ],
)
def test_bench_refuses_an_output_path_before_anything_runs(tmp_path, monkeypatch, capsys, out, message):
    from kvtutor.bench import cli

    if out.startswith("/proc") and not os.path.isdir("/proc"):
        pytest.skip("no /proc here")
    out = out.replace("DIR", str(tmp_path / "new"))

    def must_not_run(*args, **kwargs):
        raise AssertionError("the benchmark ran before its output path was checked")

    monkeypatch.setattr(cli, "run", must_not_run)
    before = listing(tmp_path)
    with pytest.raises(SystemExit) as exc:
        cli.main(["--size", "tiny", "--out", out])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert re.search(message, err.removeprefix("python -m kvtutor bench: error: ")), err
    assert listing(tmp_path) == before and os.path.exists("/dev/null") and not Path("/dev/null").is_file()


def test_bench_refuses_an_empty_plots_folder_before_anything_runs(monkeypatch, capsys):
    pytest.importorskip("matplotlib")
    from kvtutor.bench import cli

    monkeypatch.setattr(cli, "run", lambda *a, **k: pytest.fail("ran"))
    with pytest.raises(SystemExit) as exc:
        cli.main(["--size", "tiny", "--plots", ""])
    assert exc.value.code == 2 and "--plots: expected a path, got an empty string" in capsys.readouterr().err


def test_checking_a_path_tries_the_folder_and_leaves_nothing(tmp_path):
    (tmp_path / "kept.json").write_text("kept")
    assert check_output_path(str(tmp_path / "kept.json"), "--out") == str(tmp_path / "kept.json")
    assert check_output_path(tmp_path / "a" / "b" / "r.json", "--out").endswith("r.json")
    assert listing(tmp_path) == ["kept.json"] and (tmp_path / "kept.json").read_text() == "kept"
    with pytest.raises(TypeError, match=r"^--out: expected a path, got bytes$"):
        check_output_path(b"x.json", "--out")


def test_bench_common_offers_the_same_check():
    from kvtutor.bench import common

    assert common.check_output_path is check_output_path
    assert common.write_atomically is environment.write_atomically


# ---------------------------------------------------------------- bundled configs: names, not paths


@pytest.mark.parametrize(
    "name",
    ["../runs/bench-cpu", "../configs/gpt2", "gpt2/../gpt2", "/etc/passwd", "..\\runs\\bench-cpu", "", "."],
)
def test_a_bundled_name_that_is_a_path_is_refused(name):
    with pytest.raises(ValueError, match=r"^name: no bundled config .*; bundled: .*gpt2"):
        bundled_config_path(name)


def test_load_model_spec_never_reads_a_benchmark_as_a_config():
    # before: ../runs/bench-cpu resolved to data/runs/bench-cpu.json and was read as a config
    with pytest.raises(ValueError, match=r"^path: no such file '../runs/bench-cpu'"):
        load_model_spec("../runs/bench-cpu")
    assert bundled_config_path("GPT2") == bundled_config_path("gpt2")
    assert bundled_config_path("gpt2").parent == Path(str(hf_config._configs_dir()))
    assert load_model_spec("gpt2").name == "gpt2"


def test_a_config_path_that_is_no_regular_file_says_so(tmp_path):
    if os.path.exists("/dev/null"):
        with pytest.raises(ValueError, match=r"^path: expected a config.json file, got '/dev/null', which "
                           "exists but is not a regular file"):  # fmt: skip
            read_hf_config("/dev/null")
    empty = tmp_path / "config.json"
    empty.write_text("")
    with pytest.raises(
        ValueError, match=r"^path: expected a config.json file, got '.*config.json', which is empty$"
    ):
        read_hf_config(empty)
    (tmp_path / "folder").mkdir()
    with pytest.raises(
        ValueError, match=r"^path: no such file '.*config.json' \(the folder '.*folder' has no"
    ):
        read_hf_config(tmp_path / "folder")
    with pytest.raises(ValueError, match=r"^path: no such file '.*nope.json'$"):
        read_hf_config(tmp_path / "nope.json")
    assert listing(tmp_path) == ["config.json", "folder"] and empty.read_text() == ""


# ---------------------------------------------------------------- train_toy: help, options, no overwrite


@pytest.fixture
def no_training(monkeypatch):
    """train_toy's module with training replaced by a recorder (nothing is trained or written)."""
    from kvtutor.models import train_toy

    calls = []
    monkeypatch.setattr(
        train_toy, "train_toy", lambda *a, **k: calls.append((a, k)) or pytest.fail("trained")
    )
    return train_toy, calls


def test_train_toy_help_prints_help_and_trains_nothing(no_training, tmp_path, monkeypatch, capsys):
    module, calls = no_training
    monkeypatch.chdir(tmp_path)
    shipped = digest(toy_weights_path())
    assert module.main(["--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: python -m kvtutor.models.train_toy") and "--overwrite-shipped" in out
    assert calls == [] and listing(tmp_path) == [] and digest(toy_weights_path()) == shipped


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "the following arguments are required: OUT.npz"),
        (["SHIPPED"], "OUT: expected a new file, got the shipped weights"),
        (["x.npz", "--bogus"], "unrecognized arguments: --bogus"),
        (["x.json"], "OUT: expected a file name ending in .npz, got 'x.json'"),
        (["x.npz", "--steps", "0"], "--steps: expected an int >= 1, got 0"),
        (["x.npz", "--seed", "-1"], "--seed: expected 0 <= --seed <= 18446744073709551615, got -1"),
        (["/proc/x.npz"], "OUT: expected a path this process may write"),
    ],
)
def test_train_toy_refuses_bad_arguments_before_training(
    no_training, tmp_path, monkeypatch, capsys, argv, message
):
    module, calls = no_training
    monkeypatch.chdir(tmp_path)
    if argv and argv[0].startswith("/proc") and not os.path.isdir("/proc"):
        pytest.skip("no /proc here")
    argv = [str(toy_weights_path()) if a == "SHIPPED" else a for a in argv]
    shipped = digest(toy_weights_path())
    assert module.main(argv) == 2
    assert message in capsys.readouterr().err
    assert calls == [] and listing(tmp_path) == [] and digest(toy_weights_path()) == shipped


def test_train_toy_replaces_the_shipped_weights_only_when_told(monkeypatch, capsys):
    from kvtutor.models import train_toy
    from kvtutor.models.toy import load_toy_model

    calls = []
    monkeypatch.setattr(train_toy, "train_toy", lambda *a, **k: calls.append((a, k)) or load_toy_model())
    assert train_toy.main([str(toy_weights_path()), "--overwrite-shipped", "--steps", "2"]) == 0
    assert calls == [((2, 0, str(toy_weights_path()), True), {})]  # allowed, and asked for on purpose
    assert "'The cat sat' -> " in capsys.readouterr().out


def test_train_toy_function_writes_nothing_it_was_not_asked_to(monkeypatch, tmp_path):
    from kvtutor.models import train_toy

    monkeypatch.setattr(train_toy, "build_hf_gpt2", lambda cfg: pytest.fail("training started"))
    shipped = digest(toy_weights_path())
    with pytest.raises(ValueError, match=r"^out: expected a new file, got the shipped weights"):
        train_toy.train_toy(out=toy_weights_path())
    with pytest.raises(ValueError, match=r"^steps: expected an int >= 1, got 0$"):
        train_toy.train_toy(steps=0, out=tmp_path / "t.npz")
    with pytest.raises(TypeError, match=r"^seed: expected an int, got bool True$"):
        train_toy.train_toy(seed=True, out=tmp_path / "t.npz")
    with pytest.raises(TypeError, match=r"^overwrite_shipped: expected a bool, got str$"):
        train_toy.train_toy(out=tmp_path / "t.npz", overwrite_shipped="yes")
    assert digest(toy_weights_path()) == shipped and listing(tmp_path) == []


def test_train_toy_writes_the_weights_it_trains(tmp_path):
    pytest.importorskip("transformers")
    from kvtutor.models.train_toy import train_toy

    out = tmp_path / "runs" / "toy.npz"
    model = train_toy(steps=2, out=out)
    import numpy as np

    written, shipped = np.load(out), np.load(toy_weights_path())
    assert sorted(written.files) == sorted(shipped.files) and listing(tmp_path) == ["runs", "runs/toy.npz"]
    assert np.array_equal(written["wte.weight"], model.to_gpt2_state_dict()["transformer.wte.weight"])
