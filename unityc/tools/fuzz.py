"""A mutation fuzzer for `unityc-opt` and `unityc-run`.

Seeds are the project's own inputs (`examples/*.mlir` and the lit files under
`tests/filecheck`, with their RUN/CHECK lines stripped and split at `// -----`). Each mutant
applies one to three seeded-random mutations (token deletions, duplications and swaps, numbers
replaced by 0, negatives, huge values, 5000 digits or nan, truncation, unclosed quotes and
brackets, non-UTF-8 bytes, deep nesting, lines dropped, repeated or exchanged, op names
exchanged) and goes through one pipeline (round robin). Tools run in-process in a worker
process, which is killed and restarted when an input runs past the time limit.

Each outcome is one of: accepted (exit 0), located (exit != 0 with `file:line:col: error:`),
unlocated (exit != 0 without), traceback (an exception escaped, or a traceback was printed),
internal (the parser's last-resort handler caught it: located, but a defect all the same),
hang (past the time limit), partial (a failed run left its `-o` file).

    python -m unityc.tools.fuzz --count 200 --seed 0     # the table, and each bad outcome
"""

from __future__ import annotations

import argparse
import contextlib
import io
import multiprocessing
import os
import random
import re
import signal
import sys
import tempfile
import traceback
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path

from unityc.dialects.source import INTERNAL
from unityc.tools import opt, run

ROOT = Path(__file__).resolve().parents[2]
OUTCOMES = ("accepted", "located", "unlocated", "internal", "traceback", "hang", "partial")
FAILURES = ("internal", "traceback", "hang", "partial")
LOCATED = re.compile(r"^\S.*?:\d+:\d+: error: ", re.MULTILINE)

# ------------------------------------------------------------------------------------------
# Seeds
# ------------------------------------------------------------------------------------------

_DIRECTIVE = re.compile(r"^\s*//.*\b[A-Z0-9_-]*(RUN|CHECK)[A-Z0-9_-]*:")


@dataclass(frozen=True)
class Seed:
    name: str
    text: bytes


def seeds(root: Path = ROOT) -> list[Seed]:
    """The examples and lit inputs, without lit directives, one seed per `// -----` chunk."""
    lit = root / "tests" / "filecheck"
    files = sorted((root / "examples").glob("*.mlir")) + sorted(lit.rglob("*.mlir"))
    found: list[Seed] = []
    for path in files:
        if "Output" in path.parts:  # what lit wrote
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        kept = "\n".join(line for line in text.splitlines() if not _DIRECTIVE.match(line))
        for i, chunk in enumerate(re.split(r"^// -----.*$", kept, flags=re.MULTILINE)):
            if "func.func" in chunk or "builtin.module" in chunk:
                found.append(Seed(f"{path.relative_to(root)}#{i}", chunk.strip().encode() + b"\n"))
    return found


# ------------------------------------------------------------------------------------------
# Mutations
# ------------------------------------------------------------------------------------------

_TOKEN = re.compile(
    rb'"(?:[^"\\\n]|\\.)*"|[%@^#!]?[A-Za-z_][\w.$-]*|[%#]\d+|-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?|->|\s+|.',
    re.DOTALL,
)
_NUMBER = re.compile(rb"(?<![\w.%#])-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?")
NUMBERS = (
    b"0", b"-1", b"-7", b"1", b"2", b"3", b"7", b"100000", b"2147483648", b"9223372036854775808",
    b"1" + b"0" * 30, b"9" * 5000, b"nan", b"inf", b"-inf", b"1e400", b"0.5", b"-0.0", b"0x10",
)  # fmt: skip
OP_NAMES = (
    b"pcg.relu", b"pcg.add", b"pcg.linear", b"pcg.matmul", b"pcg.conv2d", b"pcg.pool2d",
    b"pcg.softmax", b"pcg.concat", b"pcg.split", b"pcg.reshape", b"pcg.transpose", b"pcg.reduce",
    b"pcg.embedding", b"pcg.attention", b"pcg.cross_entropy", b"pcg.mse_loss", b"pcg.weight",
    b"pcg.input", b"pcg.constant", b"parallel.partition", b"parallel.combine", b"parallel.replicate",
    b"parallel.reduce", b"parallel.all_reduce", b"parallel.pipeline", b"parallel.batch", b"func.return",
)  # fmt: skip
JUNK = (b"\xff", b"\xfe\xfe", b"\xc3", b"\x00", b"\xe2\x82", b"\x80abc", "\u00e9".encode(), b"\t\r")


def _tokens(text: bytes) -> list[bytes]:
    return _TOKEN.findall(text)


def _tokens_of(text: bytes) -> list[bytes]:
    return _tokens(text) or [b" "]  # an empty input (truncated) has one blank token


def _word_indices(tokens: list[bytes]) -> list[int]:
    return [i for i, t in enumerate(tokens) if not t.isspace()] or [0]


def delete_token(text: bytes, rng: random.Random) -> bytes:
    tokens = _tokens_of(text)
    del tokens[rng.choice(_word_indices(tokens))]
    return b"".join(tokens)


def duplicate_token(text: bytes, rng: random.Random) -> bytes:
    tokens = _tokens_of(text)
    i = rng.choice(_word_indices(tokens))
    tokens.insert(i, tokens[i] + b" ")
    return b"".join(tokens)


def swap_tokens(text: bytes, rng: random.Random) -> bytes:
    tokens = _tokens_of(text)
    words = _word_indices(tokens)
    i, j = rng.choice(words), rng.choice(words)
    tokens[i], tokens[j] = tokens[j], tokens[i]
    return b"".join(tokens)


def replace_number(text: bytes, rng: random.Random) -> bytes:
    spans = [m.span() for m in _NUMBER.finditer(text)]
    if not spans:
        return text
    start, end = rng.choice(spans)
    return text[:start] + rng.choice(NUMBERS) + text[end:]


def small_number(text: bytes, rng: random.Random) -> bytes:
    """A number replaced by a small power of two: often still valid, so later stages run."""
    spans = [m.span() for m in _NUMBER.finditer(text)]
    if not spans:
        return text
    start, end = rng.choice(spans)
    return text[:start] + rng.choice((b"1", b"2", b"4", b"8", b"16")) + text[end:]


def drop_attributes(text: bytes, rng: random.Random) -> bytes:
    """One attribute dictionary (a machine view, module attributes) removed."""
    spans = [m.span() for m in re.finditer(rb"\{[^{}\n]*=[^{}\n]*\}", text)]
    if not spans:
        return text
    start, end = rng.choice(spans)
    return text[:start] + text[end:]


def duplicate_definition(text: bytes, rng: random.Random) -> bytes:
    """An op line repeated under a new result name: a dead op, or a second source of one key."""
    lines = _lines(text)
    defs = [i for i, line in enumerate(lines) if re.match(rb"\s*%[\w.$-]+(:\d+)? = ", line)]
    if not defs:
        return text
    i = rng.choice(defs)
    lines.insert(i + 1, re.sub(rb"%([\w.$-]+)", rb"%\1_dup", lines[i], count=1))
    return b"\n".join(lines)


def truncate(text: bytes, rng: random.Random) -> bytes:
    return text[: rng.randrange(len(text) + 1)]


def _drop_one(text: bytes, rng: random.Random, chars: bytes) -> bytes:
    where = [i for i, c in enumerate(text) if c in chars]
    if not where:
        return text
    i = rng.choice(where)
    return text[:i] + text[i + 1 :]


def unclose_quote(text: bytes, rng: random.Random) -> bytes:
    return _drop_one(text, rng, b'"')


def unclose_bracket(text: bytes, rng: random.Random) -> bytes:
    return _drop_one(text, rng, b">]})")


def insert_junk(text: bytes, rng: random.Random) -> bytes:
    i = rng.randrange(len(text) + 1)
    return text[:i] + rng.choice(JUNK) + text[i:]


def deep_nesting(text: bytes, rng: random.Random) -> bytes:
    depth = rng.choice((50, 300, 1000, 5000))
    opener, closer = rng.choice(((b"[", b"]"), (b"<", b">"), (b"(", b")"), (b"{", b"}"), (b"tensor<", b">")))
    tokens = _tokens_of(text)
    i = rng.choice(_word_indices(tokens))
    tokens[i] = opener * depth + tokens[i] + closer * depth * rng.randrange(2)
    return b"".join(tokens)


def _lines(text: bytes) -> list[bytes]:
    return text.split(b"\n")


def delete_line(text: bytes, rng: random.Random) -> bytes:
    lines = _lines(text)
    del lines[rng.randrange(len(lines))]
    return b"\n".join(lines)


def duplicate_line(text: bytes, rng: random.Random) -> bytes:
    lines = _lines(text)
    i = rng.randrange(len(lines))
    lines.insert(rng.randrange(len(lines) + 1), lines[i])
    return b"\n".join(lines)


def swap_lines(text: bytes, rng: random.Random) -> bytes:
    lines = _lines(text)
    i, j = rng.randrange(len(lines)), rng.randrange(len(lines))
    lines[i], lines[j] = lines[j], lines[i]
    return b"\n".join(lines)


def replace_op(text: bytes, rng: random.Random) -> bytes:
    spans = [m.span() for m in re.finditer(rb"\b(pcg|parallel|func)\.\w+", text)]
    if not spans:
        return text
    start, end = rng.choice(spans)
    return text[:start] + rng.choice(OP_NAMES) + text[end:]


def replace_value(text: bytes, rng: random.Random) -> bytes:
    """One use of an SSA value replaced by another value of the file."""
    names = sorted(set(re.findall(rb"%[\w.$-]+", text)))
    uses = [m.span(1) for m in re.finditer(rb"[,(\s](%[\w.$-]+)", text)]
    if len(names) < 2 or not uses:
        return text
    start, end = rng.choice(uses)
    return text[:start] + rng.choice(names) + text[end:]


MUTATIONS: tuple[Callable[[bytes, random.Random], bytes], ...] = (
    delete_token, duplicate_token, swap_tokens, replace_number, replace_number, replace_number,
    truncate, unclose_quote, unclose_bracket, insert_junk, deep_nesting, delete_line,
    duplicate_line, swap_lines, replace_op, replace_value, duplicate_definition,
)  # fmt: skip


MILD: tuple[Callable[[bytes, random.Random], bytes], ...] = (
    small_number, small_number, drop_attributes, replace_value, swap_lines, replace_op,
    duplicate_definition,
)  # fmt: skip


def mutate(text: bytes, rng: random.Random, mild: bool = False) -> tuple[bytes, list[str]]:
    applied: list[str] = []
    for _ in range(1 if mild else rng.choice((1, 1, 1, 2, 3))):
        mutation = rng.choice(MILD if mild else MUTATIONS)
        text = mutation(text, rng)
        applied.append(mutation.__name__)
    return text, applied


def is_training_graph(seed: Seed) -> bool:
    """A seed the search and codegen take whole: a graph whose first output is a scalar."""
    scalar_first = re.search(rb"func\.func @\w+\(\) -> \(?!pcg\.tensor<f", seed.text)
    return b"func.return" in seed.text and scalar_first is not None


# ------------------------------------------------------------------------------------------
# Pipelines and runs
# ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Pipeline:
    name: str
    tool: str  # "opt" or "run"
    args: tuple[str, ...]  # {file} and {out} are substituted

    def argv(self, file: str, out: str) -> list[str]:
        return [a.replace("{file}", file).replace("{out}", out) for a in self.args]


PIPELINES = (
    Pipeline("verify", "opt", ("{file}", "-o", "{out}")),
    Pipeline("canonicalize", "opt", ("{file}", "-p", "canonicalize", "-o", "{out}")),
    Pipeline("fuse-collectives", "opt", ("{file}", "-p", "fuse-collectives", "-o", "{out}")),
    Pipeline("estimate", "opt", ("{file}", "-p", 'estimate{machine="cpu:2"}', "-o", "{out}")),
    Pipeline("apply-rules", "opt", ("{file}", "-p", "apply-rules", "-o", "{out}")),
    Pipeline("torch", "opt", ("{file}", "-t", "torch", "-o", "{out}")),
    Pipeline("dot", "opt", ("{file}", "-t", "dot", "-o", "{out}")),
    Pipeline("data-parallel", "opt", ("{file}", "-p", 'data-parallel{machine="cpu:2"}', "-o", "{out}")),
    Pipeline(
        "unity-search",
        "opt",
        ("{file}", "--unity-search", "--machine", "cpu:2", "--budget", "2", "-o", "{out}"),
    ),
    Pipeline("run", "run", ("{file}",)),
)


@dataclass
class Result:
    outcome: str
    rc: int
    stderr: str
    detail: str = ""  # the traceback, for tracebacks and hangs


class _Hang(BaseException):
    pass


_rang: list[bool] = [False]
"""Whether the time limit of the input now running has passed (an alarm raised inside a
finalizer or weakref callback is printed and swallowed by Python, and the tool goes on)."""

LIMIT_SIGNAL = signal.SIGPROF
"""The limit is CPU seconds of the worker (user + system, `ITIMER_PROF`), not wall time: an
input that runs 10 s on a quiet machine is a hang, one slowed past 10 s by other jobs on the
machine is not. (A worker blocked without using CPU is caught by `Runner`'s wall-clock wait.)
The search's own `--time-limit` timer (`ITIMER_REAL`, SIGALRM) is left to the search."""


def _on_alarm(signum: int, frame: object) -> None:
    _rang[0] = True
    raise _Hang()


def run_tool(tool: str, argv: list[str], out: str | None, limit: float) -> Result:
    """Runs a tool's main in this process, with its output captured, under a CPU-time limit."""
    main = opt.main if tool == "opt" else run.main
    stdout, stderr = io.StringIO(), io.StringIO()
    detail = ""
    previous = signal.signal(LIMIT_SIGNAL, _on_alarm)
    _rang[0] = False
    signal.setitimer(signal.ITIMER_PROF, limit)
    try:
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            rc = main(argv)
    except SystemExit as e:
        rc = e.code if isinstance(e.code, int) else 1
    except _Hang:
        return Result("hang", -1, stderr.getvalue(), traceback.format_exc())
    except BaseException:
        rc, detail = -1, traceback.format_exc()
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(LIMIT_SIGNAL, previous)
    err = stderr.getvalue() + stdout.getvalue()[-2000:]
    if _rang[0]:  # past the limit, though the alarm was swallowed where it landed
        return Result("hang", -1, err, "the time limit passed (the alarm landed in a finalizer)")
    if detail or "Traceback (most recent call last)" in err:
        return Result("traceback", rc, err, detail or err)
    if rc == 0:
        return Result("accepted", rc, err)
    if out is not None and os.path.exists(out):
        return Result("partial", rc, err)
    if INTERNAL in err:  # an error the parser's safety net caught: located, but a defect
        return Result("internal", rc, err)
    return Result("located" if LOCATED.search(err) else "unlocated", rc, err)


def _worker(conn: Connection, limit: float) -> None:
    import warnings

    warnings.simplefilter("ignore")
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 1000))
    with tempfile.TemporaryDirectory(prefix="unityc-fuzz-") as tmp:
        while True:
            job = conn.recv()
            if job is None:
                return
            text, pipeline = job
            path, out = os.path.join(tmp, "input.mlir"), os.path.join(tmp, "out.txt")
            with contextlib.suppress(FileNotFoundError):
                os.remove(out)
            with open(path, "wb") as f:
                f.write(text)
            has_out = "{out}" in pipeline.args
            conn.send(run_tool(pipeline.tool, pipeline.argv(path, out), out if has_out else None, limit))


@dataclass
class Runner:
    """A worker process running inputs; restarted after a hard hang (past twice the limit)."""

    limit: float = 10.0
    _process: multiprocessing.process.BaseProcess | None = None
    _conn: Connection | None = None

    def _start(self) -> Connection:
        ctx = multiprocessing.get_context("spawn")
        parent, child = ctx.Pipe()
        self._process = ctx.Process(target=_worker, args=(child, self.limit), daemon=True)
        self._process.start()
        self._conn = parent
        return parent

    def run(self, text: bytes, pipeline: Pipeline) -> Result:
        conn = self._conn or self._start()
        conn.send((text, pipeline))
        if conn.poll(6 * self.limit + 60):  # CPU seconds pass slowly on a loaded machine; imports
            try:
                return conn.recv()
            except EOFError:
                self.close(kill=True)
                return Result("traceback", -1, "", "the worker process died (killed by the OS?)")
        self.close(kill=True)
        return Result("hang", -1, "", "no answer: the worker did not respond to its CPU-time limit")

    def close(self, kill: bool = False) -> None:
        if self._process is None or self._conn is None:
            return
        if kill:
            self._process.kill()
        else:
            self._conn.send(None)
        self._process.join(10)
        self._conn.close()
        self._process, self._conn = None, None


@dataclass
class Mutant:
    index: int
    seed: str
    mutations: list[str]
    pipeline: Pipeline
    text: bytes


def mutants(count: int, seed: int, corpus: Sequence[Seed]) -> Iterator[Mutant]:
    """Mostly any mutations of any seed; a third are one mild mutation of a training graph, so
    that the search, codegen and the interpreter see input that gets past the verifier."""
    graphs = [s for s in corpus if is_training_graph(s)] or list(corpus)
    plans = [s for s in graphs if b"unityc.model" in s.text] or graphs  # what -t torch takes whole
    for i in range(count):
        rng = random.Random(f"{seed}:{i}")
        pipeline = PIPELINES[i % len(PIPELINES)]
        mild = rng.random() < 1 / 3
        origin = rng.choice((plans if pipeline.name == "torch" else graphs) if mild else corpus)
        text, applied = mutate(origin.text, rng, mild)
        yield Mutant(i, origin.name, applied, pipeline, text)


@dataclass
class Report:
    counts: Counter[str] = field(default_factory=Counter)
    by_pipeline: dict[str, Counter[str]] = field(default_factory=dict)
    bad: list[tuple[Mutant, Result]] = field(default_factory=list)
    unlocated: list[tuple[Mutant, Result]] = field(default_factory=list)
    retried: int = 0  # inputs past the time limit once, run again

    def add(self, mutant: Mutant, result: Result) -> None:
        self.counts[result.outcome] += 1
        self.by_pipeline.setdefault(mutant.pipeline.name, Counter())[result.outcome] += 1
        if result.outcome in FAILURES:
            self.bad.append((mutant, result))
        elif result.outcome == "unlocated":
            self.unlocated.append((mutant, result))

    @property
    def errors(self) -> int:
        return sum(self.counts[o] for o in OUTCOMES if o != "accepted")

    def located_share(self) -> float:
        return self.counts["located"] / self.errors if self.errors else 1.0

    def table(self) -> str:
        header = f"| {'pipeline':<17} | inputs | " + " | ".join(OUTCOMES) + " |"
        rows = [header, "|" + "---|" * (len(OUTCOMES) + 2)]
        for name, counts in [*self.by_pipeline.items(), ("total", self.counts)]:
            cells = " | ".join(str(counts[o]) for o in OUTCOMES)
            rows.append(f"| {name:<17} | {sum(counts.values())} | {cells} |")
        rows.append(f"\nlocated errors: {100 * self.located_share():.2f} % of {self.errors}")
        rows.append(f"inputs past the time limit once and run again: {self.retried}")
        return "\n".join(rows)


def fuzz(
    count: int,
    seed: int = 0,
    limit: float = 10.0,
    progress: Callable[[int, Report], None] | None = None,
) -> Report:
    report = Report()
    runner = Runner(limit)
    try:
        for mutant in mutants(count, seed, seeds()):
            result = runner.run(mutant.text, mutant.pipeline)
            if result.outcome == "hang":  # a hang is past the limit twice: a loaded machine is slow
                report.retried += 1
                result = runner.run(mutant.text, mutant.pipeline)
            report.add(mutant, result)
            if progress is not None:
                progress(mutant.index, report)
    finally:
        runner.close()
    return report


def describe(mutant: Mutant, result: Result) -> str:
    text = result.detail.strip()[-1500:] or result.stderr.strip()[:600]
    return (
        f"--- mutant {mutant.index} ({mutant.pipeline.name}) of {mutant.seed} "
        f"by {', '.join(mutant.mutations)}: {result.outcome}\n{text}"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m unityc.tools.fuzz", description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=200, help="mutants to run (default 200)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the mutations (default 0)")
    parser.add_argument("--limit", type=float, default=10.0, help="CPU seconds per input (default 10)")
    parser.add_argument("--show-unlocated", type=int, default=0, help="print this many unlocated errors")
    parser.add_argument("--save", help="write each bad mutant to this directory")
    args = parser.parse_args(argv)

    shown = 0

    def progress(i: int, report: Report) -> None:
        nonlocal shown
        for mutant, result in report.bad[shown:]:  # as they come, in case the run is cut short
            print(describe(mutant, result), file=sys.stderr, flush=True)
        shown = len(report.bad)
        if (i + 1) % 500 == 0:
            print(f"[{i + 1}/{args.count}] {dict(report.counts)}", file=sys.stderr, flush=True)

    report = fuzz(args.count, args.seed, args.limit, progress)
    for mutant, result in report.bad:
        print(describe(mutant, result))
        if args.save:
            os.makedirs(args.save, exist_ok=True)
            Path(args.save, f"{mutant.index}-{mutant.pipeline.name}.mlir").write_bytes(mutant.text)
    for mutant, result in report.unlocated[: args.show_unlocated]:
        print(describe(mutant, result))
    print(report.table())
    return 1 if report.bad else 0


if __name__ == "__main__":
    sys.exit(main())
