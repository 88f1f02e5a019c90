"""The fuzzer's short run (the long one is `benchmarks/fuzz.py`): a few hundred mutants of the
examples and lit inputs through every unityc-opt pipeline and unityc-run give no traceback,
hang, internal error or partial `-o` file, and their errors are located. The time limit per
input is generous (the CI machine may be slow): only a real hang reaches it."""

from __future__ import annotations

from pathlib import Path

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
