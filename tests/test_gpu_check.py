"""tools/gpu_check.sh, the one prepared run for a CUDA machine, rehearsed on this one.

The rehearsal (``DEVICE=cpu SIZE=tiny``) runs every step the GPU run will: the CUDA tests (found
by the script, not named), the kernel profile and every benchmark section, and must exit 0 with
every file the script promises. The script's CUDA-test step named a file that a rename had left
behind (tests/test_torch_gpt2.py): pytest found no file, and on a GPU no CUDA test would have
run. The last two tests show the step now fails loudly when it finds no file or no test.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kvtutor.measure.schema import check_result

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "tools" / "gpu_check.sh"
#: every file the script's header promises under $OUT (bench-$DEVICE.json with DEVICE=cpu)
PROMISED = ["cuda-tests.log", "kernels-whole.txt", "kernels-bucket.txt", "profile.json", "profile.log",
            "bench.log", "bench-cpu.json"]  # fmt: skip


def _run(out: Path, cwd: Path = ROOT, **env: str) -> subprocess.CompletedProcess:
    full = {**os.environ, "DEVICE": "cpu", "SIZE": "tiny", "OUT": str(out), "PYTHON": sys.executable, **env}
    full.pop("KVTUTOR_DECODE_PRODUCT", None)
    return subprocess.run(["bash", str(SCRIPT)], cwd=cwd, env=full, capture_output=True, text=True,
                          timeout=600)  # fmt: skip


def test_the_rehearsal_exits_0_and_writes_every_promised_file(tmp_path):
    done = _run(tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    for name in PROMISED:
        assert (tmp_path / name).stat().st_size > 0, name
    log = (tmp_path / "cuda-tests.log").read_text()
    assert "tests/test_torch_model.py" in log and "tests/test_torch_dtypes.py" in log
    assert " passed" in log and "gpu_check:" not in log
    result = check_result(json.loads((tmp_path / "bench-cpu.json").read_text()), "bench-cpu.json")
    assert not result.get("partial") and "engine" in result  # every section, the CUDA one too
    profile = json.loads((tmp_path / "profile.json").read_text())
    assert profile["device"] == "cpu" and {"whole", "bucket"} <= set(profile)


def _fake_repo(tmp_path: Path, test_source: str) -> Path:
    repo = tmp_path / "repo"
    (repo / "tests").mkdir(parents=True)
    (repo / "tests" / "test_renamed.py").write_text(test_source)
    return repo


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("def test_plain():\n    assert 1 + 1 == 2\n", "no test file under tests/ asks for CUDA"),
        # spelled in two parts, or the script would find this file and run these tests itself
        ("import torch\nON = torch.cuda" + ".is_available()\n\ndef test_plain():\n    assert 1\n",
         "pytest selected no CUDA test"),
    ],
    ids=["no-file", "no-test"],
)  # fmt: skip
def test_the_cuda_step_fails_when_it_finds_nothing_to_run(tmp_path, source, message):
    done = _run(tmp_path / "out", cwd=_fake_repo(tmp_path, source), STEPS="tests")
    assert done.returncode == 1, done.stdout + done.stderr
    assert message in done.stderr
    assert message in (tmp_path / "out" / "cuda-tests.log").read_text()


def test_an_unknown_step_is_refused_before_anything_runs(tmp_path):
    done = _run(tmp_path / "out", STEPS="tests profil")
    assert done.returncode == 2 and "STEPS" in done.stderr and "'profil'" in done.stderr
    assert not (tmp_path / "out").exists()
