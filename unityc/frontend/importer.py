"""Walks an exported FX graph (torch-mlir FX-importer style) and emits the pcg graph.

Every FX value maps to one of: an SSA value of the pcg graph; a `Const` (a real tensor: any
subgraph that depends on no input and no weight is evaluated here, so position ids, masks and
index tables become constants, not ops); an `Expanded` value (a broadcast that only elementwise
users may consume); a pending `LogSoftmax` (consumed by nll_loss as cross-entropy); `Unusable`
(a secondary result, such as pooling indices, that the PCG does not model); or a Python value.
"""

from __future__ import annotations

import difflib
import math
import operator
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import fx
from torch.export.graph_signature import InputKind, OutputKind
from torch.utils._pytree import tree_flatten, tree_map
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import SSAValue
from xdsl.utils.exceptions import VerifyException

from unityc.dialects import pcg
from unityc.dialects.forms import FormError
from unityc.dialects.pcg_types import FLOAT_TYPES, TensorType
from unityc.frontend.builder import ELEMENT_TYPES, GraphBuilder, compact
from unityc.frontend.export import Exported
from unityc.frontend.widening import drop_idle_widenings


class ImportFailure(ValueError):
    """An op or value the importer cannot express, located at the model's source."""


def _full(size: Any, fill_value: Any, *, dtype: torch.dtype | None = None, **_: Any) -> torch.Tensor:
    """A filled tensor's fold: one element, broadcast (a splat, never built at its size:
    DeepSeek-V3's keys are a `new_empty` of batch x heads x seq x 192 filled by two copies, 773
    GB at its paper shape; an uninitialized tensor's values are unspecified, zeros here)."""
    return torch.full((), fill_value, dtype=dtype).expand(tuple(size))


def _zeros(size: Any, *, dtype: torch.dtype | None = None, **_: Any) -> torch.Tensor:
    return _full(size, 0, dtype=dtype or torch.get_default_dtype())


def _ones(size: Any, *, dtype: torch.dtype | None = None, **_: Any) -> torch.Tensor:
    return _full(size, 1, dtype=dtype or torch.get_default_dtype())


def _new_full(
    x: torch.Tensor, size: Any, fill_value: Any, *, dtype: torch.dtype | None = None, **_: Any
) -> Any:
    return _full(size, fill_value, dtype=dtype or x.dtype)


def _new_zeros(x: torch.Tensor, size: Any, *, dtype: torch.dtype | None = None, **_: Any) -> torch.Tensor:
    return _full(size, 0, dtype=dtype or x.dtype)


aten_ops = torch.ops.aten
FOLDED_AS = {
    aten_ops.view.default: aten_ops.reshape.default,
    aten_ops._unsafe_view.default: aten_ops.reshape.default,
    aten_ops.empty.memory_format: _zeros,
    aten_ops.zeros.default: _zeros,
    aten_ops.ones.default: _ones,
    aten_ops.full.default: _full,
    aten_ops.new_empty.default: _new_zeros,
    aten_ops.new_zeros.default: _new_zeros,
    aten_ops.new_full.default: _new_full,
}
"""Ops folded on constants as another op of the same values (a view as a reshape, a filled or
uninitialized tensor as one element broadcast)."""


class LostConstant(ImportFailure):
    """A tensor the forward made at trace time has no value: made on the meta device beside
    meta weights (Falcon's index lists, `qkv[..., [-2]]`, become such constants)."""


@dataclass(frozen=True)
class Const:
    value: torch.Tensor


@dataclass(frozen=True)
class Expanded:
    value: SSAValue
    shape: tuple[int, ...]


@dataclass(frozen=True)
class LogSoftmax:
    value: SSAValue
    dim: int


@dataclass(frozen=True)
class Unusable:
    what: str


@dataclass(frozen=True)
class Complex:
    """A complex tensor as its real and imaginary parts (each an SSA value or a `Const` of the
    real dtype), so complex arithmetic (Llama 4's rotary `view_as_complex(x) * freqs_cis`)
    lowers to real ops; `aten_complex.py` has the ops that take one."""

    real: Any
    imag: Any


Lowering = Callable[..., Any]
LOWERINGS: dict[Any, Lowering] = {}
COMPLEX_LOWERINGS: dict[Any, Lowering] = {}
"""The lowerings of ops given a `Complex` operand (`aten_complex.py`)."""
MASK_MAKERS: set[Any] = set()
"""Ops that make masks (comparisons): on constants they fold only into a mask of at most
`FOLD_LIMIT` elements; a larger one stays an op of the graph on the compact constants it
compares, computed per piece when the program runs, so no mask of the batch or of the sequence
squared is ever built or stored."""
FOLD_LIMIT = 4096
"""Elements of the largest mask folded into a constant (a 64 x 64 causal mask)."""


def lowering(*targets: Any, makes_masks: bool = False) -> Callable[[Lowering], Lowering]:
    def register(fn: Lowering) -> Lowering:
        for t in targets:
            LOWERINGS[t] = fn
            if makes_masks:
                MASK_MAKERS.add(t)
        return fn

    return register


def node_origin(node: fx.Node) -> str:
    """`module path (Class), file:line` of the model code that produced `node`."""
    parts = []
    stack = node.meta.get("nn_module_stack") or {}
    if stack:
        path, cls = list(stack.values())[-1]
        name = cls if isinstance(cls, str) else getattr(cls, "__name__", str(cls))
        parts.append(f"module '{path or '<root>'}' ({name.rsplit('.', 1)[-1]})")
    trace = node.meta.get("stack_trace") or ""
    frames = [line.strip() for line in trace.splitlines() if line.strip().startswith("File ")]
    if frames:
        parts.append(frames[-1].removeprefix("File ").replace('", line ', ":").replace('"', ""))
    return ", ".join(parts) or "the model"


ASSERTIONS = frozenset(
    {
        torch.ops.aten._assert_scalar.default,
        torch.ops.aten._assert_async.default,
        torch.ops.aten._assert_async.msg,
        torch.ops.aten.sym_constrain_range.default,
        torch.ops.aten.sym_constrain_range_for_size.default,
    }
)
"""The runtime assertions torch.export records on values the model reads back from tensors
(XLM's `assert lengths.max().item() <= slen`)."""


def only_checked(graph: fx.Graph) -> set[fx.Node]:
    """The runtime assertions and the ops only they read (XLM's `max` -> `.item()` -> `<=`): they
    compute nothing the model returns, so the graph leaves them out, where a data-dependent one
    would have no lowering (an `.item()` is a number only known when the program runs). The
    program does not check them; the example inputs passed them when the model was exported."""
    checked: set[fx.Node] = set()
    for node in reversed(graph.nodes):
        if node.op != "call_function":
            continue
        if node.target in ASSERTIONS or (node.users and all(u in checked for u in node.users)):
            checked.add(node)
    return checked


class FxImporter:
    """Translates one exported program into a `GraphBuilder`'s graph."""

    def __init__(self, exported: Exported) -> None:
        self.exported = exported
        self.program = exported.program
        self.builder = GraphBuilder()
        self.env: dict[fx.Node, Any] = {}
        self.node: fx.Node | None = None
        self._constants: dict[tuple[Any, ...], tuple[torch.Tensor, SSAValue]] = {}
        self._weights: dict[str, SSAValue] = {}
        self._zeros: dict[tuple[tuple[int, ...], torch.dtype], SSAValue] = {}

    # --- driving -------------------------------------------------------------------------

    def run(self, attributes: dict[str, Any] | None = None) -> ModuleOp:
        outputs: list[SSAValue] = []
        checked = only_checked(self.program.graph)
        for node in self.program.graph.nodes:
            self.node = node
            if node in checked:
                self.env[node] = Unusable("a value only a runtime assertion reads")
            elif node.op == "placeholder":
                self.env[node] = self.placeholder(node)
            elif node.op == "call_function":
                self.env[node] = self.call(node)
            elif node.op == "output":
                outputs = self.outputs(node)
        if not outputs:
            raise ImportFailure("the model returns no tensor output (it should return its loss first)")
        return self.builder.module(outputs, attributes)

    def placeholder(self, node: fx.Node) -> Any:
        spec = next(s for s in self.program.graph_signature.input_specs if s.arg.name == node.name)
        val = node.meta["val"]
        if spec.kind == InputKind.PARAMETER:
            key = self.exported.parameter_keys.get(spec.target, spec.target)  # tied weights: one op
            if key not in self._weights:
                frozen = key in self.exported.frozen
                self._weights[key] = self.builder.source(pcg.WeightOp, key, val.shape, val.dtype, frozen)
            return self._weights[key]
        if spec.kind == InputKind.USER_INPUT:
            if not isinstance(val, torch.Tensor):
                raise self.fail(f"input '{node.name}' is not a tensor ({type(val).__name__})")
            return self.builder.source(pcg.InputOp, node.name, val.shape, val.dtype)
        if spec.kind == InputKind.BUFFER:
            if spec.target not in self.exported.buffers:
                raise self.fail(f"buffer '{spec.target}' has no value")
            return Const(self.exported.buffers[spec.target])
        if spec.kind in (InputKind.CONSTANT_TENSOR, InputKind.CUSTOM_OBJ):
            value = self.program.constants.get(spec.target)
            if not isinstance(value, torch.Tensor) or value.device.type == "meta":
                raise LostConstant(self.fail(f"constant '{spec.target}' has no value").args[0])
            return Const(value)
        raise self.fail(f"unsupported graph input kind {spec.kind.name} for '{node.name}'")

    def outputs(self, node: fx.Node) -> list[SSAValue]:
        results = []
        specs = self.program.graph_signature.output_specs
        for spec, arg in zip(specs, tree_flatten(node.args[0])[0], strict=True):
            if spec.kind != OutputKind.USER_OUTPUT:
                continue  # buffer mutations (batch-norm running stats) are not part of the PCG
            value = self.env[arg] if isinstance(arg, fx.Node) else arg
            results.append(self.tensor(value, f"output '{spec.arg.name}'"))
        return results

    def call(self, node: fx.Node) -> Any:
        args = tree_map(self._lookup, node.args)
        kwargs = tree_map(self._lookup, dict(node.kwargs))
        if node.target is operator.getitem:
            return args[0][args[1]]  # an Unusable result is only an error if something uses it
        self._reject_unusable(args, kwargs)
        if any(isinstance(x, Complex) for x in tree_flatten((args, kwargs))[0]):
            return self._complex(node, args, kwargs)
        random = torch.Tag.nondeterministic_seeded in getattr(node.target, "tags", ())
        if random and node.target not in LOWERINGS:
            raise self.fail(f"{_op_name(node)} draws random numbers, which unityc does not model")
        if not random and self._foldable(args, kwargs) and not self._mask_at_run_time(node, args):
            return self.fold(node, args, kwargs)
        fn = LOWERINGS.get(node.target)
        if fn is None:
            raise self.unsupported(node)
        try:
            return fn(self, node, *args, **kwargs)
        except (FormError, VerifyException) as e:
            raise self.fail(f"{_op_name(node)}: {e}") from None

    def _complex(self, node: fx.Node, args: Any, kwargs: Any) -> Any:
        fn = COMPLEX_LOWERINGS.get(node.target)
        if fn is None:
            supported = ", ".join(sorted({_short(t) for t in COMPLEX_LOWERINGS}))
            raise self.fail(
                f"{_op_name(node)} of a complex tensor is not supported (complex tensors are lowered"
                f" to real arithmetic; the ops that take one: {supported})"
            )
        try:
            return fn(self, node, *args, **kwargs)
        except (FormError, VerifyException) as e:
            raise self.fail(f"{_op_name(node)}: {e}") from None

    def _lookup(self, arg: Any) -> Any:
        return self.env[arg] if isinstance(arg, fx.Node) else arg

    def _reject_unusable(self, args: Any, kwargs: Any) -> None:
        for leaf in tree_flatten((args, kwargs))[0]:
            if isinstance(leaf, Unusable):
                raise self.fail(f"uses {leaf.what}, which unityc does not model")

    # --- constant folding ----------------------------------------------------------------

    @staticmethod
    def _foldable(args: Any, kwargs: Any) -> bool:
        leaves = tree_flatten((args, kwargs))[0]
        return not any(isinstance(x, SSAValue | Expanded | LogSoftmax) for x in leaves)

    @staticmethod
    def _mask_at_run_time(node: fx.Node, args: Any) -> bool:
        """Whether a mask maker on constants makes a mask too large to fold (see MASK_MAKERS)."""
        if node.target not in MASK_MAKERS:
            return False
        shapes = [compact(a.value).shape for a in tree_flatten(args)[0] if isinstance(a, Const)]
        return math.prod(torch.broadcast_shapes(*shapes)) > FOLD_LIMIT

    def fold(self, node: fx.Node, args: Any, kwargs: Any) -> Any:
        """Evaluates an op whose inputs are all known, on the CPU, on their compact parts: an
        element-wise op reads each constant with its broadcast dims at size 1 (a batch-sized
        mask is computed once, not per row), and every result keeps only its distinct part,
        broadcast (stride 0) along each dim it does not vary on."""
        pointwise = torch.Tag.pointwise in getattr(node.target, "tags", ())
        unwrap = (lambda x: compact(x.value)) if pointwise else (lambda x: x.value)
        real_args = tree_map(lambda x: unwrap(x) if isinstance(x, Const) else x, args)
        real_kwargs = tree_map(lambda x: unwrap(x) if isinstance(x, Const) else x, kwargs)
        if "device" in real_kwargs:
            real_kwargs["device"] = torch.device("cpu")
        # A folded constant is a value, its strides are the fold's own (broadcast, compact): a
        # view of it that strides do not allow (GPT-J's interleaved rotary table, after a
        # repeat_interleave) is the same reshape of its values.
        target = FOLDED_AS.get(node.target, node.target)  # type: ignore[call-overload]  # an OpOverload
        try:
            result = target(*real_args, **real_kwargs)  # type: ignore[operator]
        except Exception as e:
            raise self.fail(f"cannot fold {_op_name(node)} into a constant: {e}") from None
        if pointwise and isinstance(result, torch.Tensor):
            result = result.expand(self.meta_shape(node))
        return tree_map(lambda x: Const(collapse(x)) if isinstance(x, torch.Tensor) else x, result)

    # --- helpers for lowerings -----------------------------------------------------------

    def stop_gradient(self, value: Any) -> Any:
        """`value` with no gradient flowing back through it: a floating-point SSA value (or the
        one an `Expanded` broadcasts) through `pcg.stop_gradient`, each of a tuple's; constants,
        integers and masks as they are (they carry none)."""
        if isinstance(value, tuple | list):
            return type(value)(self.stop_gradient(v) for v in value)
        if isinstance(value, Expanded):
            return Expanded(self.stop_gradient(value.value), value.shape)
        if isinstance(value, SSAValue) and tensor_type(value).element_type in FLOAT_TYPES:
            return self.op(pcg.StopGradientOp, [value])
        return value

    def op(self, cls: type[pcg.PcgOp], operands: list[Any], **attrs: Any) -> Any:
        hint = self.node.name if self.node is not None else None
        return self.builder.op(cls, operands, hint, **attrs)

    def tensor(
        self,
        value: Any,
        what: str = "operand",
        partner: tuple[int, ...] | None = None,
        dtype: torch.dtype | None = None,
    ) -> SSAValue:
        """An SSA value for `value`, materializing constants (converted to `dtype` if given). A
        constant broadcast against an operand of shape `partner` is shrunk along the dims that
        operand restores."""
        if isinstance(value, SSAValue):
            return value
        if isinstance(value, Const):
            return self.constant(value.value, partner, dtype)
        if isinstance(value, Expanded):
            return self.materialize(value, what)
        if isinstance(value, LogSoftmax):
            raise self.fail(f"{what} is a log_softmax, supported only as the input of nll_loss")
        if isinstance(value, Unusable):
            raise self.fail(f"{what} is {value.what}, which unityc does not model")
        if isinstance(value, Complex):
            raise self.fail(f"{what} is a complex tensor, supported only as real and imaginary parts")
        raise self.fail(f"{what} is not a tensor ({value!r})")

    def materialize(self, value: Expanded, what: str = "operand") -> SSAValue:
        """A broadcast (expand) as a tensor, for a consumer that is not elementwise: `pcg.add` of
        the value and a zero constant that is size 1 except along the broadcast dims. Exact
        (x + 0 == x; the gradient sums over the broadcast dims, as expand's does), and the add's
        parallel forms keep every dim the value has at full size shardable: GQA's KV head
        repeated for its query group (`[B, KV, 1, S, D]` -> `[B, KV, R, S, D]`, then a reshape
        to `[B, KV*R, S, D]`) stays with that group when the KV dim is split; ViT's CLS token
        expanded over the batch splits with the batch."""
        base = tensor_type(value.value)
        dtype = next((d for d, t in ELEMENT_TYPES.items() if t == base.element_type), None)
        if dtype is None or not dtype.is_floating_point:
            raise self.fail(f"{what} is a non-float broadcast (expand): only elementwise ops may consume it")
        offset = len(value.shape) - base.rank
        zeros_shape = [
            size if d < offset or base.shape[d - offset] != size else 1 for d, size in enumerate(value.shape)
        ]
        key = (tuple(zeros_shape), dtype)
        if key not in self._zeros:  # one per shape: every layer's K and V share it
            self._zeros[key] = self.builder.constant(torch.zeros(zeros_shape, dtype=dtype), "zeros")
        return self.op(pcg.AddOp, [value.value, self._zeros[key]])

    def constant(
        self, value: torch.Tensor, partner: tuple[int, ...] | None = None, dtype: torch.dtype | None = None
    ) -> SSAValue:
        """A `pcg.constant` of `value`, one per distinct tensor view: every layer's view of the
        same folded rotary table or mask is one op, stored once."""
        if value.numel() == 0:
            raise self.fail("an empty tensor (a zero-size slice) is used by an op other than cat")
        key = (*_view_key(value), partner, dtype)
        if key not in self._constants:
            literal = compact_constant(value, partner) if partner is not None else value
            if dtype is not None:  # converted where it holds values: a broadcast stays one
                literal = compact(literal).to(dtype).expand(literal.shape)
            hint = self.node.name if self.node is not None else None
            self._constants[key] = (value, self.builder.constant(literal, hint))
        return self._constants[key][1]

    def erase_unread(self, value: SSAValue) -> None:
        """Erases the op of `value` if nothing reads it (an earlier scatter's concat a later one
        covered), then each constant it read that nothing else reads (and its cache entry)."""
        op = value.owner
        if not isinstance(op, pcg.PcgOp) or any(r.uses for r in op.results):
            return
        operands = list(op.operands)
        op.detach()
        op.erase()
        for v in operands:
            if isinstance(v.owner, pcg.ConstantOp) and not v.uses:
                self._constants = {k: c for k, c in self._constants.items() if c[1] is not v}
                v.owner.detach()
                v.owner.erase()

    def fail(self, message: str) -> ImportFailure:
        where = node_origin(self.node) if self.node is not None else "the model"
        return ImportFailure(f"{where}: {message}")

    def unsupported(self, node: fx.Node) -> ImportFailure:
        """Names the op (and supported ones like it); the supported ops follow, wrapped."""
        supported = sorted({_short(t) for t in LOWERINGS})
        name = _op_name(node)
        similar = difflib.get_close_matches(name, supported, n=3, cutoff=0.7)
        like = f" (supported ops like it: {', '.join(similar)})" if similar else ""
        listing = textwrap.fill(", ".join(supported), width=100, initial_indent="  ", subsequent_indent="  ")
        return self.fail(
            f"unsupported operator {name}{like}; the {len(supported)} supported ATen ops:\n{listing}"
        )

    def meta_shape(self, node: fx.Node | None = None) -> tuple[int, ...]:
        val = (node or self.node).meta["val"]  # type: ignore[union-attr]
        return tuple(int(s) for s in val.shape)


def tensor_type(v: SSAValue) -> TensorType:
    assert isinstance(v.type, TensorType)
    return v.type


def filled(shape: tuple[int, ...], value: float | int | bool, dtype: torch.dtype) -> Const:
    """A constant of `shape` whose every element is `value`: one element, broadcast (a splat,
    `builder.dense_literal`; never built at its size)."""
    return Const(torch.full((), value, dtype=dtype).expand(shape))


def compact_constant(value: torch.Tensor, partner: tuple[int, ...]) -> torch.Tensor:
    """Shrinks to size 1 each dim along which `value` is constant and which `partner` (the other
    operand of a broadcasting op) has at full size, so broadcasting restores it."""
    offset = value.dim() - len(partner)
    for d in range(value.dim()):
        restored = d >= offset and partner[d - offset] == value.shape[d]
        if not restored or value.shape[d] == 1:
            continue
        first = value.narrow(d, 0, 1)
        if value.stride(d) == 0 or torch.equal(value, first.expand_as(value)):
            value = first
    return value


def collapse(value: torch.Tensor) -> torch.Tensor:
    """`value` as a broadcast (stride 0) of its smallest part along each dim it is constant on:
    equal values, no copy of the repeated rows (position ids or masks repeated over the batch)."""
    part = compact(value)
    for d in range(part.dim()):
        if part.shape[d] > 1 and torch.equal(part, part.narrow(d, 0, 1).expand_as(part)):
            part = part.narrow(d, 0, 1)
    return part.expand(value.shape)


def _view_key(value: torch.Tensor) -> tuple[Any, ...]:
    """What makes two tensors the same view of the same memory (the tensor is kept alive beside
    its key, so its address is not reused)."""
    if value.device.type == "meta":
        return (id(value),)
    storage = value.untyped_storage().data_ptr()
    return (storage, value.storage_offset(), tuple(value.shape), value.stride(), value.dtype)


def _op_name(node: fx.Node) -> str:
    return _short(node.target)


def _short(target: Any) -> str:
    name = str(target)
    return name.removesuffix(".default")


def import_program(exported: Exported, attributes: dict[str, Any] | None = None) -> ModuleOp:
    from unityc.frontend import (  # noqa: F401  (they register LOWERINGS)
        aten,
        aten_complex,
        aten_logic,
        aten_moe,
        aten_nn,
        aten_reduce,
        aten_scatter,
        aten_select,
        aten_strided,
    )

    module = FxImporter(exported).run(attributes)
    drop_idle_widenings(module)
    return module
