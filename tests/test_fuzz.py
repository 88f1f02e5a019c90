"""The fuzzer's short run (the long one is `benchmarks/fuzz.py`): a few hundred mutants of the
examples and lit inputs through every unityc-opt pipeline and unityc-run give no traceback,
hang, internal error or partial `-o` file, and their errors are located. The time limit per
input is generous (the CI machine may be slow): only a real hang reaches it."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from unityc.tools import fuzz

ROOT = Path(__file__).resolve().parents[1]


def test_short_fuzz_run_has_no_bad_outcome() -> None:
    report = fuzz.fuzz(count=300, seed=0, limit=120.0)
    assert not report.bad, "\n".join(fuzz.describe(m, r) for m, r in report.bad)
    assert sum(report.counts.values()) == 300
    assert report.counts["accepted"] > 0  # the mild mutants reach the later stages
    assert report.located_share() >= 0.99, "\n".join(fuzz.describe(m, r) for m, r in report.unlocated)


def test_mutants_are_deterministic() -> None:
    corpus = fuzz.seeds(ROOT)
    first = [(m.seed, m.text) for m in fuzz.mutants(50, 7, corpus)]
    assert first == [(m.seed, m.text) for m in fuzz.mutants(50, 7, corpus)]
    assert len({text for _, text in first}) > 40


def test_outcomes_are_classified(tmp_path: Path) -> None:
    good = tmp_path / "good.mlir"
    good.write_text((ROOT / "examples" / "mlp.mlir").read_text())
    bad = tmp_path / "bad.mlir"
    bad.write_text("func.func @main() -> !pcg.tensor<f32> {\n  %x = pcg.frobnicate\n}\n")
    out = str(tmp_path / "out.mlir")
    assert fuzz.run_tool("opt", [str(good), "-o", out], out, 120.0).outcome == "accepted"
    assert fuzz.run_tool("run", [str(good)], None, 120.0).outcome == "accepted"
    assert fuzz.run_tool("opt", [str(bad), "-o", out + "2"], out + "2", 120.0).outcome == "located"
    assert fuzz.run_tool("opt", [str(tmp_path / "missing.mlir")], None, 120.0).outcome == "unlocated"


def _spin(seconds: float) -> None:
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_the_limit_counts_cpu_seconds_and_alarms_swallowed_in_finalizers(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A tool waiting (no CPU) past the limit is not a hang: on a loaded machine wall time runs
    ahead of the CPU time an input needs. A tool spinning past it is, even where the alarm lands
    in a finalizer (Python prints it as "Exception ignored" and the tool goes on)."""
    from unityc.tools import opt

    class SpinsWhenCollected:
        def __del__(self) -> None:
            _spin(0.5)

    def sleeps(argv: list[str]) -> int:
        time.sleep(0.4)
        return 0

    def spins_in_a_finalizer(argv: list[str]) -> int:
        SpinsWhenCollected()  # collected at once: the limit passes inside __del__
        return 0

    monkeypatch.setattr(opt, "main", sleeps)
    assert fuzz.run_tool("opt", [], None, 0.2).outcome == "accepted"
    monkeypatch.setattr(opt, "main", spins_in_a_finalizer)
    assert fuzz.run_tool("opt", [], None, 0.2).outcome == "hang"
