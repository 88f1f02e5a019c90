"""Spatial parallelism end to end (issue 29): images split over height and width, halos
exchanged between neighbouring ranks, batch norms synchronized. Plans of a ResNet-style graph
(the `resnet50` zoo model), an Inception-style one (`inception_tiny.py`: four branches, 1x1 to
5x5 windows and an average pool, concatenated) and the `unet` zoo model, from the `spatial`
baseline's strategy (`spatial_layout.spatial_graph`) alone and with data parallelism, are checked
by the interpreter (outputs) and under torchrun on 2 and 4 gloo ranks (`--check`: loss, every
gradient, every updated weight). Under bf16-mixed too: the U-Net's data-parallel plan (2 ranks)
and its padded 3-way spatial plan (below; 3 ranks), whose synchronized batch norms compute in
fp32 as torch's does under autocast. And a plan made by the CNN rules alone
(`rewrites/library/spatial.rules`), a different form per op: a pool on height shards, a
convolution on width shards, a conv -> batch norm -> ReLU chain on channel shards. And the
Inception-style graph with each block's four branches on their own rank (`search/branches.py`:
inter-op placement), the stem and classifier data parallel over all four. And the U-Net on 3
ranks, whose rows (16, 8, 4) no 3-way split divides: its image padded to 24 rows
(`search/padding.py`: zero rows, row masks, batch norms over the real count, the real rows
sliced off before the loss), every window split 3 ways over height, in fp32 and bf16-mixed; the
fp32 one saves a checkpoint that the unpadded 4-way plan resumes (steps 3 and 4, checked).
One torchrun per rank count runs every program (`unityc.runtime.batch`)."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
from plans import base_graph, interpret_equal
from torchrun import Run, torchrun, without_compiler, write_program
from xdsl.dialects.builtin import StringAttr

from unityc.cost.pricing import placement
from unityc.dialects.precision import BF16_MIXED, precision_attrs
from unityc.graph import Graph, to_module
from unityc.machine.presets import preset
from unityc.rewrites.match import compile_rules, rewrites
from unityc.rewrites.parser import load_library
from unityc.search.branches import branch_plan
from unityc.search.padding import pad_images, padded_rows
from unityc.search.plans import Pricing, finish
from unityc.search.spatial_layout import spatial_graph

pytestmark = pytest.mark.torchrun

INCEPTION = str(Path(__file__).parent / "inception_tiny.py") + ":make"
MODELS = {"resnet": "resnet50", "inception": INCEPTION, "unet": "unet"}
# (model, ranks, data-parallel degree, precision): the rest of the ranks split height x width
PLANS = [
    ("resnet", 2, 1, "fp32"),
    ("inception", 2, 1, "fp32"),
    ("unet", 2, 1, "fp32"),
    ("unet", 2, 2, BF16_MIXED),
    ("resnet", 4, 1, "fp32"),
    ("inception", 4, 2, "fp32"),
    ("unet", 4, 1, "fp32"),
]
RULES = ("pool2d_height_parallel", "conv2d_width_parallel", "conv_bn_relu_channel_parallel")
"""The rules the rule-made plan applies, each at its first match, in this order."""
RULES_PLAN = "rules-unet-2"
CONV1D = str(Path(__file__).parent / "vision_models.py") + ":conv1d"
RULES_1D = ("conv2d_width_parallel", "conv2d_bias_width_parallel", "pool2d_width_parallel")
"""A Conv1d / MaxPool1d / AvgPool1d model's length split: a 1-D op is a 2-D one over a height of 1
(frontend/aten.py), so the width rules split its length."""
RULES_1D_PLAN = "rules-conv1d-2"
BRANCHES_PLAN = "branches-inception-4"
PADDED_PLANS = {"padded-unet-3": "fp32", "padded-unet-3-bf16": BF16_MIXED}
RESUMES = "spatial-unet-4"
"""The plan that resumes the fp32 padded plan's checkpoint (same weights: padding adds none)."""
BATCH_TIMEOUT_S = 1200


def _name(model: str, n: int, batch: int, precision: str) -> str:
    name = f"spatial-{model}-{n}" + (f"-data{batch}" if batch > 1 else "")
    return name + ("-bf16" if precision == BF16_MIXED else "")


def _plan(model: str, n: int, batch: int, precision: str) -> Graph:
    base = base_graph(MODELS[model])
    if precision == BF16_MIXED:
        base = base.copy()  # base_graph's is shared
        base.function_attrs.update(precision_attrs(BF16_MIXED))
    plan = finish("spatial", spatial_graph(base, n, batch), preset(f"cpu:{n}"), Pricing()).graph
    windows = [node for node in plan.nodes.values() if node.op in ("pcg.conv2d", "pcg.pool2d")]
    split = [node for node in windows if math.prod(plan.type_of(node.operands[0]).shard[2:]) == n // batch]
    # all but the last stage's (a 1x1 or 2x2 image in the ResNet at 2 and 4 ranks)
    assert len(split) >= len(windows) - 3, (
        f"{len(windows) - len(split)} windows not split over {n // batch} ranks"
    )
    interpret_equal(base, plan)
    plan.module_attrs["unityc.machine"] = StringAttr(f"cpu:{n}")
    return plan


def _rules_plan() -> Graph:
    """unet small on 2 ranks with each of `RULES` applied once (degree 2)."""
    base = base_graph("unet")
    compiled = {c.rule.name: c for c in compile_rules([r for r in load_library() if r.name in RULES])}
    graph = base
    for name in RULES:
        graph = next(new for _, new in rewrites(graph, [compiled[name]], degrees=(2,)))
    plan = finish("rules", graph, preset("cpu:2"), Pricing()).graph
    windows = ("pcg.pool2d", "pcg.conv2d", "pcg.batch_norm")
    forms = {(n.op, plan.type_of(n.operands[0]).shard) for n in plan.nodes.values() if n.op in windows}
    wanted = {("pcg.pool2d", (1, 1, 2, 1)), ("pcg.conv2d", (1, 1, 1, 2)), ("pcg.batch_norm", (1, 2, 1, 1))}
    assert wanted <= forms, forms
    interpret_equal(base, plan)
    plan.module_attrs["unityc.machine"] = StringAttr("cpu:2")
    return plan


def _rules_1d_plan() -> Graph:
    """The Conv1d model on 2 ranks with each of `RULES_1D` applied at its first match (degree 2)."""
    base = base_graph(CONV1D)
    compiled = {c.rule.name: c for c in compile_rules([r for r in load_library() if r.name in RULES_1D])}
    graph = base
    for name in RULES_1D:
        graph = next(new for _, new in rewrites(graph, [compiled[name]], degrees=(2,)))
    plan = finish("rules", graph, preset("cpu:2"), Pricing()).graph
    windows = ("pcg.conv2d", "pcg.pool2d")
    forms = [(n.op, plan.type_of(n.operands[0]).shard) for n in plan.nodes.values() if n.op in windows]
    # both convolutions on length shards (the second dilated, grouped and biased), and one pooling
    assert forms.count(("pcg.conv2d", (1, 1, 1, 2))) == 2 and ("pcg.pool2d", (1, 1, 1, 2)) in forms, forms
    interpret_equal(base, plan)
    plan.module_attrs["unityc.machine"] = StringAttr("cpu:2")
    return plan


def _branches_plan() -> Graph:
    """The Inception-style graph (4 images) on 4 ranks, each block's branches on their own rank."""
    base = base_graph(INCEPTION, batch="4")
    machine = preset("cpu:4")
    priced = branch_plan(base, machine, Pricing())
    assert priced is not None
    plan = priced.graph
    ranks = [
        frozenset(placement(node.types[0], node.plan.view, machine).values())
        for node in plan.nodes.values()
        if node.op == "pcg.conv2d"
    ]
    # the stem on all four; each block's 6 convolutions on one rank each, all four ranks used
    assert ranks.count(frozenset(range(4))) == 1 and len(ranks) == 13, ranks
    assert {r for r in ranks if len(r) == 1} == {frozenset({i}) for i in range(4)}, ranks
    interpret_equal(base, plan)
    plan.module_attrs["unityc.machine"] = StringAttr("cpu:4")
    return plan


def _padded_plan(precision: str) -> Graph:
    """unet small (16 rows, down-sampled 4x) on 3 ranks: padded to 24 rows, split 3 ways over height."""
    base = base_graph("unet")
    if precision == BF16_MIXED:
        base = base.copy()  # base_graph's is shared
        base.function_attrs.update(precision_attrs(BF16_MIXED))
    assert padded_rows(base, 3) == 24
    plan = finish("spatial", spatial_graph(pad_images(base, 24), 3), preset("cpu:3"), Pricing()).graph
    windows = [node for node in plan.nodes.values() if node.op in ("pcg.conv2d", "pcg.pool2d")]
    assert len(windows) == 15 and all(plan.type_of(w.operands[0]).shard == (1, 1, 3, 1) for w in windows)
    interpret_equal(base, plan)
    plan.module_attrs["unityc.machine"] = StringAttr("cpu:3")
    return plan


def _sections(output: str) -> dict[str, str]:
    found = re.finditer(r"^=== (\S+)\n(.*?)^=== \1: exit (\d+)$", output, re.M | re.S)
    return {m.group(1): m.group(2) + f"exit {m.group(3)}" for m in found}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, str], dict[int, Run]]:
    directory = tmp_path_factory.mktemp("spatial")
    entries: dict[int, list[dict[str, object]]] = {2: [], 3: [], 4: []}
    checkpoint = str(directory / "padded-checkpoint")
    for plan in PLANS:
        name = _name(*plan)
        program = write_program(to_module(_plan(*plan)), directory, name)
        n = plan[1]
        # the unpadded 4-way U-Net resumes the padded 3-way plan's checkpoint: steps 3 and 4
        args = ["--steps", "4", "--resume", checkpoint] if name == RESUMES else ["--steps", "2"]
        entries[n].append({"name": name, "program": str(program), "args": ["--check", *args]})
    program = write_program(to_module(_rules_plan()), directory, RULES_PLAN)
    entries[2].append({"name": RULES_PLAN, "program": str(program), "args": ["--check", "--steps", "2"]})
    program = write_program(to_module(_rules_1d_plan()), directory, RULES_1D_PLAN)
    entries[2].append({"name": RULES_1D_PLAN, "program": str(program), "args": ["--check", "--steps", "2"]})
    program = write_program(to_module(_branches_plan()), directory, BRANCHES_PLAN)
    entries[4].append({"name": BRANCHES_PLAN, "program": str(program), "args": ["--check", "--steps", "2"]})
    for name, precision in PADDED_PLANS.items():
        program = write_program(to_module(_padded_plan(precision)), directory, name)
        saves = ["--save", checkpoint] if precision == "fp32" else []
        entries[3].append(
            {"name": name, "program": str(program), "args": ["--check", "--steps", "2", *saves]}
        )
    sections: dict[str, str] = {}
    results: dict[int, Run] = {}
    for n, batch_entries in entries.items():
        manifest = directory / f"batch{n}.json"
        manifest.write_text(json.dumps(batch_entries))
        run = torchrun(
            "unityc.runtime.batch", n, str(manifest), timeout=BATCH_TIMEOUT_S, env=without_compiler(directory)
        )
        results[n] = run
        sections.update(_sections(run.output))
    return sections, results


@pytest.mark.parametrize(("model", "n", "batch", "precision"), PLANS, ids=[_name(*p) for p in PLANS])
def test_spatial_plan_trains_like_the_reference(runs, model: str, n: int, batch: int, precision: str) -> None:
    sections, results = runs
    name = _name(model, n, batch, precision)
    assert name in sections, results[n].report()
    section = sections[name]
    assert section.endswith("exit 0") and "check passed: 2 step(s)" in section, section
    assert (f"{BF16_MIXED} (autocast)" in section) == (precision == BF16_MIXED), section


def test_a_plan_made_by_the_cnn_rules_trains_like_the_reference(runs) -> None:
    sections, results = runs
    assert RULES_PLAN in sections, results[2].report()
    section = sections[RULES_PLAN]
    assert section.endswith("exit 0") and "check passed: 2 step(s)" in section, section


def test_a_conv1d_plan_split_on_length_trains_like_the_reference(runs) -> None:
    sections, results = runs
    assert RULES_1D_PLAN in sections, results[2].report()
    section = sections[RULES_1D_PLAN]
    assert section.endswith("exit 0") and "check passed: 2 step(s)" in section, section


def test_inception_branches_on_disjoint_ranks_train_like_the_reference(runs) -> None:
    sections, results = runs
    assert BRANCHES_PLAN in sections, results[4].report()
    section = sections[BRANCHES_PLAN]
    assert section.endswith("exit 0") and "check passed: 2 step(s)" in section, section


@pytest.mark.parametrize("name", sorted(PADDED_PLANS))
def test_an_image_padded_to_a_3_way_split_trains_like_the_reference(runs, name: str) -> None:
    sections, results = runs
    assert name in sections, results[3].report()
    section = sections[name]
    assert section.endswith("exit 0") and "check passed: 2 step(s)" in section, section
    assert (f"{BF16_MIXED} (autocast)" in section) == (PADDED_PLANS[name] == BF16_MIXED), section


def test_an_unpadded_plan_resumes_the_padded_plans_checkpoint(runs) -> None:
    sections, _ = runs
    assert "saved " in sections["padded-unet-3"] and "padded-checkpoint/step-2" in sections["padded-unet-3"]
    section = sections[RESUMES]
    assert "resumed at step 2" in section and "step 4: loss" in section, section
