"""`benchmarks/gpu_truth.py` (issue 30) cannot rot: its CPU path runs every phase at tiny shapes
(the op table and the calibration fitted to it, one generated program estimated and measured,
`--check`) and writes the results file whose structure is checked here; the calibration it
records for a preset is checked on a copy of `unityc/machine/calibration.py`."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from unityc.machine import calibration
from unityc.machine.calibration import Calibration, calibrated, with_calibration
from unityc.machine.presets import H100_SXM_80GB

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "gpu_truth.py"


def run(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT
    )


def table(text: str, heading: str) -> list[list[str]]:
    """The data rows of the first table after `heading`, as cells."""
    lines = text.split(heading, 1)[1].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip("|").split("|")])
    return rows


@pytest.mark.torchrun
def test_cpu_path_writes_every_section(tmp_path: Path) -> None:
    out = tmp_path / "results.md"
    done = run("--device", "cpu", "--programs", "mlp", "--budgets", "ops=8", "--out", str(out))
    assert done.returncode == 0, done.stdout + done.stderr
    text = out.read_text()
    assert "from the repository root: `python benchmarks/gpu_truth.py --write-preset`" in text
    assert "- this run: `python benchmarks/gpu_truth.py --device cpu --programs mlp" in text
    assert re.search(r"- device: CPU .*; torch \S+, CUDA none;", text)

    ops = table(text, "## 1. Ops")
    skipped = text.split("## Skipped", 1)[1]
    assert ops, "no op was timed"
    assert all(len(row) == 7 and float(row[2]) > 0 and float(row[3]) > 0 for row in ops)
    assert any(row[0].startswith("launch:") for row in ops) or "launch:" in skipped
    assert re.search(r"- before calibration: Kendall tau -?\d\.\d{3}, median error \d+\.\d %", text)
    fitted = table(text, "## Calibration")
    assert [row[0] for row in fitted][:1] == ["compute efficiency (matmul-like rows)"]
    assert all(float(row[2]) > 0 for row in fitted)

    (mlp,) = table(text, "## 2. Programs")
    assert mlp[:3] == ["mlp", "fp32", "False"]
    measured, estimate = float(mlp[3]), float(mlp[4])
    assert measured > 0 and estimate > 0
    assert mlp[8] == "n/a (cpu)" and float(mlp[9]) > 0  # peak memory is measured on CUDA only
    assert "- step time before calibration: Kendall tau n/a (one row), median error" in text

    (check,) = table(text, "## 3. `--check` on cpu")
    assert check[0] == "mlp" and check[1].startswith("passed: check passed: 2 step(s)")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal where no GPU is visible")
def test_cuda_without_a_gpu_is_a_clear_error(tmp_path: Path) -> None:
    done = run("--device", "cuda", "--out", str(tmp_path / "r.md"), timeout=120)
    assert done.returncode == 1
    assert "error: --device cuda: no CUDA device is visible" in done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "r.md").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--budgets", "ops=fast"), "error: --budgets ops=fast: expected PHASE=SECONDS"),
        (("--programs", "mlp", "nope"), "error: --programs: unknown nope"),
        (("--out", "/no/such/dir/r.md"), "error: --out /no/such/dir/r.md: no such directory"),
    ],
)
def test_bad_arguments_are_refused_before_any_work(
    tmp_path: Path, args: tuple[str, ...], message: str
) -> None:
    out = tmp_path / "r.md"
    done = run("--device", "cpu", "--out", str(out), *args, timeout=120)
    assert done.returncode == 1 and message in done.stderr and "Traceback" not in done.stderr
    assert not out.exists()


def test_calibration_is_recorded_with_its_source() -> None:
    text = Path(calibration.__file__).read_text()
    first = Calibration(0.61, 0.83, 7.5e-06, "NVIDIA H100 80GB HBM3, torch 2.13.0, CUDA 12.8, 2026-11-26")
    second = Calibration(0.64, 0.85, 6.0e-06, "a later run")
    patched = with_calibration(with_calibration(text, H100_SXM_80GB.name, first), H100_SXM_80GB.name, second)
    namespace: dict[str, object] = {}
    exec(compile(patched, "calibration.py", "exec"), namespace)  # the written module still imports
    table_ = namespace["CALIBRATIONS"]
    written = namespace["Calibration"]
    assert callable(written)
    assert table_ == {H100_SXM_80GB.name: written(0.64, 0.85, 6.0e-06, "a later run")}
    assert patched.count(f"{H100_SXM_80GB.name!r}: Calibration(") == 1


def test_calibrated_kind_takes_the_measured_figures(monkeypatch: pytest.MonkeyPatch) -> None:
    c = Calibration(0.5, 0.9, 5e-06, "test")
    monkeypatch.setitem(calibration.CALIBRATIONS, H100_SXM_80GB.name, c)
    kind = calibrated(H100_SXM_80GB)
    assert (kind.compute_efficiency, kind.memory_efficiency, kind.kernel_latency) == (0.5, 0.9, 5e-06)
    assert kind.flops == H100_SXM_80GB.flops and kind.memory == H100_SXM_80GB.memory


@pytest.mark.parametrize(
    "fields", [(1.2, 0.8, 1e-6, "s"), (0.7, 0.0, 1e-6, "s"), (0.7, 0.8, -1.0, "s"), (0.7, 0.8, 1e-6, "")]
)
def test_calibration_values_are_validated(fields: tuple[float, float, float, str]) -> None:
    with pytest.raises(ValueError):
        Calibration(*fields)


def test_a_calibration_that_worsens_the_programs_is_not_written(capsys: pytest.CaptureFixture[str]) -> None:
    sys.path.insert(0, str(SCRIPT.parent))
    import gpu_truth

    def row(before_ms: float, after_ms: float) -> gpu_truth.ProgramRow:
        estimate = lambda ms: SimpleNamespace(iteration_s=ms / 1e3)  # noqa: E731
        r = gpu_truth.ProgramRow(gpu_truth.GPU_PROGRAMS[0], measured_ms=10.0)
        r.before, r.after = estimate(before_ms), estimate(after_ms)  # type: ignore[assignment]
        return r

    text = Path(calibration.__file__).read_text()
    c = Calibration(0.6, 0.8, 5e-06, "test")
    worse = [row(11.0, 30.0), row(9.0, 25.0)]
    assert gpu_truth.write_preset(H100_SXM_80GB, c, torch.device("cuda"), True, worse) == 1
    assert "worsens the programs' median error (10.0 % -> 175.0 %)" in capsys.readouterr().out
    assert Path(calibration.__file__).read_text() == text
    better = [row(15.0, 11.0)]
    assert gpu_truth.write_preset(H100_SXM_80GB, c, torch.device("cuda"), False, better) == 0
    assert "write with --write-preset" in capsys.readouterr().out
    assert Path(calibration.__file__).read_text() == text


def test_every_gpu_op_row_runs_at_its_priced_shape() -> None:
    """The GPU op table cannot be run here, but each row's torch code runs forward and backward
    on the meta device (shapes only) and yields the result shape the cost model prices."""
    sys.path.insert(0, str(SCRIPT.parent))
    import gpu_truth

    meta = torch.device("meta")
    for case in gpu_truth.gpu_cases():
        for dtype in ("f32", "tf32", "bf16"):
            out = case.run(*gpu_truth.inputs(case, dtype, meta))
            assert tuple(out.shape) == case.result, case.label
            out.backward(torch.empty(case.result, device=meta, dtype=out.dtype))
            cost = gpu_truth.priced(case, dtype, H100_SXM_80GB)
            assert cost.fwd_s > 0 and cost.bwd_s > 0, case.label
