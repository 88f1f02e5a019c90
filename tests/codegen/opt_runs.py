"""Many `unityc-opt` runs for one test fixture, made by a few processes rather than one each.

A `-t torch` run imports torch (~2.5 CPU s) and every run imports the compiler (~1 CPU s): a
fixture that makes 30-60 programs spent most of its set-up starting processes. Here each
worker process imports both once and calls `unityc.tools.opt.main` for its share of the runs,
in its main thread (the search's deadline is a SIGALRM, its background worker a fork). A run's
result is what the command line gives: exit status, stdout and stderr (`subprocess`'s
`CompletedProcess`); an exception `main` lets through is exit 1 with its traceback, as the
interpreter would report it. The command line itself stays tested by the lit suite
(`tests/filecheck`) and by the tests that call `test_torchrun._opt`.

    chains = [[("model.mlir", "-p", "megatron", "-o", "plan.mlir"), ("plan.mlir", "-t", "torch", ...)]]
    [[planned, generated]] = opt_chains(chains)

A chain's runs are made in order by one worker (a later run may read an earlier one's output);
the chains are dealt round-robin to `workers` processes running at once.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
import tempfile
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

TIMEOUT_S = 2400
"""For one worker's share (searches of the small zoo models take up to ~90 s each, quiet)."""


@dataclass(frozen=True)
class Call:
    """One `unityc-opt` command line (its arguments) and the directory it runs in."""

    args: tuple[str, ...]
    cwd: str | None = None

    def __post_init__(self) -> None:
        if not all(isinstance(a, str) for a in self.args):
            raise TypeError(f"unityc-opt arguments must be strings: {self.args!r}")


Chain = Sequence[Call | Sequence[str]]


def _call(item: Call | Sequence[str]) -> Call:
    return item if isinstance(item, Call) else Call(tuple(item))


def opt_chains(chains: Sequence[Chain], workers: int = 2) -> list[list[subprocess.CompletedProcess[str]]]:
    """Each chain's results, in order: the runs of a chain one after another in one worker."""
    if workers < 1:
        raise ValueError(f"workers must be at least 1, got {workers}")
    calls = [[_call(item) for item in chain] for chain in chains]
    shares = [list(range(w, len(calls), workers)) for w in range(min(workers, len(calls)))]
    with tempfile.TemporaryDirectory() as scratch:
        started = []
        for number, share in enumerate(shares):
            jobs = Path(scratch) / f"jobs{number}.json"
            jobs.write_text(json.dumps([[[list(c.args), c.cwd] for c in calls[i]] for i in share]))
            results = Path(scratch) / f"results{number}.json"
            command = [sys.executable, __file__, str(jobs), str(results)]
            started.append((share, results, subprocess.Popen(command, stderr=subprocess.PIPE, text=True)))
        found: dict[int, list[subprocess.CompletedProcess[str]]] = {}
        for share, results, process in started:
            try:
                _, errors = process.communicate(timeout=TIMEOUT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                _, errors = process.communicate()
                raise AssertionError(f"unityc-opt worker past {TIMEOUT_S} s:\n{errors[-4000:]}") from None
            if process.returncode:
                raise AssertionError(f"unityc-opt worker failed ({process.returncode}):\n{errors[-4000:]}")
            made = json.loads(results.read_text())
            for index, runs in zip(share, made, strict=True):
                found[index] = [
                    subprocess.CompletedProcess(["unityc-opt", *call.args], code, out, err)
                    for call, (code, out, err) in zip(calls[index], runs, strict=True)
                ]
    return [found[i] for i in range(len(calls))]


def _run(args: list[str], cwd: str | None) -> tuple[int, str, str]:
    """One `unityc-opt` run in this process: (exit status, stdout, stderr)."""
    from unityc.tools.opt import main

    out, err = io.StringIO(), io.StringIO()
    home = os.getcwd()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            os.chdir(cwd or home)
            try:
                code = main(args)
            except SystemExit as e:  # argparse's usage errors
                code = e.code if isinstance(e.code, int) else 1
            except Exception:
                traceback.print_exc()
                code = 1
    finally:
        os.chdir(home)
    return code, out.getvalue(), err.getvalue()


def _serve(jobs: Path, results: Path) -> None:
    sys.argv[0] = "unityc-opt"  # argparse's usage lines name the tool, as the command line's do
    chains = json.loads(jobs.read_text())
    results.write_text(json.dumps([[_run(args, cwd) for args, cwd in chain] for chain in chains]))


if __name__ == "__main__":
    _serve(Path(sys.argv[1]), Path(sys.argv[2]))
