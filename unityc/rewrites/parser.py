"""Parses `.rules` files (axioms and rewrite rules) into the AST of `terms.py`.

The grammar is `grammar.lark` (LALR). On top of the grammar this module resolves op names to
full names (`relu` -> `pcg.relu`; `reduce` exists in both dialects and must be prefixed),
orders properties as the op declares them, places operands in definition order (optional ones
by keyword: `linear(x, w, bias=b)`), substitutes `let` names, expands chained comparisons and
parses example types with xDSL. Every problem is a `RuleSyntaxError` whose message starts
`path:line:col: `.

Canonical forms, so that printing and re-parsing gives an equal AST: a list of integer
literals is `Lit(tuple)`, a float property holds a float, `-literal` is a negative literal,
a flag written `=false` is dropped (unset), a dtype is the xDSL element type.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import math
import os
import pickle
from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import Path
from typing import Any

from lark import Lark, Token, Tree
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken
from xdsl.context import Context
from xdsl.dialects.builtin import Builtin
from xdsl.irdl import OptOperandDef, VarOperandDef, VarResultDef
from xdsl.parser import Parser
from xdsl.utils.exceptions import ParseError, VerifyException

from unityc.dialects.parallel import PARALLEL
from unityc.dialects.pcg import PCG
from unityc.dialects.pcg_types import ELEMENT_TYPES, TensorType
from unityc.dialects.syntax import Kind
from unityc.graph import SOURCE_OPS, op_class, op_classes
from unityc.rewrites.printer import format_axiom, format_rule
from unityc.rewrites.rule_checks import (
    attr_kinds,
    attr_vars_of_rule,
    check_axiom,
    check_rule_scopes,
    tensor_names,
)
from unityc.rewrites.terms import (
    App,
    AttrVar,
    Axiom,
    BinOp,
    Cond,
    Domain,
    EvalError,
    Expr,
    ListExpr,
    Lit,
    Loc,
    Query,
    Rule,
    RuleFile,
    Term,
    Var,
    eval_expr,
)

__all__ = [
    "RuleSyntaxError",
    "format_axiom",
    "format_rule",
    "load_axioms",
    "load_library",
    "load_rule_file",
    "parse_rules",
]

AXIOM_DIR = Path(__file__).with_name("axioms")
LIBRARY_DIR = Path(__file__).with_name("library")
ELEMENT_TYPE_NAMES = {str(t): t for t in ELEMENT_TYPES}


def _children(tree: Tree) -> list[Any]:
    """A parse tree's children: tokens or subtrees, as the grammar has them at that node (lark
    types them as either, so each unpacking site would otherwise need a cast)."""
    return tree.children


class RuleSyntaxError(ValueError):
    """A problem in a rules file, located: the message starts `path:line:col: `."""

    def __init__(self, path: str, line: int, column: int, message: str):
        super().__init__(f"{path}:{line}:{column}: {message}")
        self.path, self.line, self.column, self.reason = path, line, column, message


@cache
def _lark() -> Lark:
    grammar = Path(__file__).with_name("grammar.lark").read_text()
    return Lark(grammar, parser="lalr", propagate_positions=True, maybe_placeholders=True)


def parse_rules(text: str, path: str = "<string>") -> RuleFile:
    """Parses a rules file. Raises RuleSyntaxError (located) on any problem."""
    try:
        tree = _lark().parse(text)
    except UnexpectedInput as e:
        raise _syntax_error(e, path) from None
    _check_limits(tree, path)
    out = RuleFile(path)
    names: set[str] = set()
    for statement in tree.children:
        assert isinstance(statement, Tree)
        converter = _Converter(path)
        item = converter.axiom(statement) if statement.data == "axiom" else converter.rule(statement)
        if item.name in names:
            raise converter.error(statement.children[0], f"'{item.name}' is defined twice in this file")
        names.add(item.name)
        (out.axioms if isinstance(item, Axiom) else out.rules).append(item)  # type: ignore[arg-type]
    return out


def load_rule_file(path: str | os.PathLike[str]) -> RuleFile:
    """Reads and parses one rules file (OSError if it cannot be read; text that is not UTF-8 is
    a located RuleSyntaxError)."""
    data = Path(path).read_bytes()
    return parse_rules(_decode(data, str(path)), str(path))


def load_axioms(directory: Path = AXIOM_DIR) -> list[Axiom]:
    """The shipped operator axioms (every `axioms/*.rules` file, in name order)."""
    return [a for f in _rule_files(directory) for a in f.axioms]


def load_library(directory: Path = LIBRARY_DIR) -> list[Rule]:
    """The shipped rewrite rules (every `library/*.rules` file, in name order)."""
    return [r for f in _rule_files(directory) for r in f.rules]


def _rule_files(directory: Path) -> list[RuleFile]:
    files = sorted(directory.glob("*.rules"))
    return [_parse_file(str(p), p.stat().st_mtime_ns) for p in files]


@cache
def _parse_file(path: str, mtime_ns: int) -> RuleFile:
    """A parsed rules file, from the on-disk cache when this text was parsed before by this
    parser (parsing the library takes seconds, loading its pickle a fraction of one)."""
    data = Path(path).read_bytes()
    cached = _cache_path(path, data)
    if cached is not None and cached.exists():
        try:
            with cached.open("rb") as f:
                loaded = pickle.load(f)
            if isinstance(loaded, RuleFile):
                return loaded
        except Exception:  # a stale or broken cache entry: parse again
            pass
    parsed = parse_rules(_decode(data, path), path)
    if cached is not None:
        _store(cached, parsed)
    return parsed


def _cache_path(path: str, data: bytes) -> Path | None:
    """Where the parse of `data` (at `path`) is cached: keyed by the text, the path (locations
    name it), the parser's own source files and the dialect (op arities); None if no cache
    directory can be had."""
    root = os.environ.get("UNITYC_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "unityc"
    )
    digest = hashlib.sha256(data + b"\0" + os.path.abspath(path).encode())
    for source in _PARSER_SOURCES:
        digest.update(source.read_bytes())
    return Path(root) / "rules" / f"{digest.hexdigest()}.pickle"


_PARSER_SOURCES = (
    *(Path(__file__).with_name(n) for n in ("parser.py", "terms.py", "rule_checks.py", "grammar.lark")),
    *sorted((Path(__file__).parent.parent / "dialects" / "pcg").glob("*.py")),  # an op's arity pads the terms
)


def _store(target: Path, parsed: RuleFile) -> None:
    """Writes the cache entry atomically; a cache that cannot be written is no error."""
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_suffix(f".{os.getpid()}.tmp")
        with tmp.open("wb") as f:
            pickle.dump(parsed, f)
        tmp.replace(target)
    except (OSError, pickle.PicklingError, RecursionError):
        pass


def _decode(data: bytes, path: str) -> str:
    """The text of a rules file; not UTF-8 is a located error."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        column = e.start - (data.rfind(b"\n", 0, e.start) + 1) + 1
        raise RuleSyntaxError(path, line, column, f"not UTF-8 text (byte 0x{data[e.start]:02x})") from None


# --- syntax errors --------------------------------------------------------------------------

MAX_TREE_DEPTH = 200
"""The deepest parse tree read (a term nests about three levels per op): the conversion to the
AST and everything after it recurse over terms."""

MAX_DIGITS = 18
"""The longest integer literal (int64 range, and far below Python's int-to-string limit)."""


def _check_limits(tree: Tree, path: str) -> None:
    """Refuses, located, a parse tree nested too deep or an integer literal too long (walked
    without recursion)."""
    stack: list[tuple[Tree | Token, int]] = [(tree, 0)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, Token):
            digits = len(str(node))
            if node.type == "INT" and digits > MAX_DIGITS:
                message = f"integer too long ({digits} digits; at most {MAX_DIGITS})"
                raise RuleSyntaxError(path, *_position(node), message)
            if node.type == "FLOAT" and not math.isfinite(float(node)):
                raise RuleSyntaxError(path, *_position(node), "number out of range (not a finite float)")
            continue
        if depth > MAX_TREE_DEPTH:
            raise RuleSyntaxError(path, *_position(node), "terms nested too deeply")
        stack.extend((child, depth + 1) for child in node.children if isinstance(child, Tree | Token))


_READABLE = {"NAME": "a name", "QNAME": "an op name", "INT": "an integer", "FLOAT": "a number"}
_READABLE |= {"STRING": "a string", "TENSOR_TYPE": "a !pcg.tensor type", "$END": "end of file"}


def _syntax_error(e: UnexpectedInput, path: str) -> RuleSyntaxError:
    if isinstance(e, UnexpectedCharacters):
        return RuleSyntaxError(path, e.line, e.column, f"unexpected character {e.char!r}")
    if isinstance(e, UnexpectedEOF):
        return RuleSyntaxError(path, e.line if e.line > 0 else 1, max(e.column, 1), "unexpected end of file")
    assert isinstance(e, UnexpectedToken)
    token = e.token
    text = str(token)
    got = "end of file" if token.type == "$END" else repr(text if len(text) <= 40 else text[:37] + "...")
    expected = sorted({_readable(t) for t in e.expected})
    shown = ", ".join(expected[:8]) + (", ..." if len(expected) > 8 else "")
    line = token.line if token.line is not None else 1
    column = token.column if token.column is not None else 1
    return RuleSyntaxError(path, line, column, f"unexpected {got}; expected {shown}")


def _readable(terminal: str) -> str:
    if terminal in _READABLE:
        return _READABLE[terminal]
    pattern = _lark().get_terminal(terminal).pattern
    return repr(pattern.value) if pattern.type == "str" else terminal.lower()


# --- tree -> AST ----------------------------------------------------------------------------


@dataclass
class _Scope:
    """What names mean where a term is read."""

    side: str
    """'axiom', 'source', 'target' (target, lets, conditions, domains)."""
    lets: dict[str, Term] = field(default_factory=dict)
    tensors: frozenset[str] | None = None
    """Tensor variables that may be used (None: any)."""


@dataclass
class _Converter:
    path: str
    attr_locs: dict[str, Token] = field(default_factory=dict)
    tensor_locs: dict[str, Token] = field(default_factory=dict)

    def error(self, at: Tree | Token | None, message: str) -> RuleSyntaxError:
        line, column = _position(at)
        return RuleSyntaxError(self.path, line, column, message)

    def loc(self, tree: Tree) -> Loc:
        return Loc(self.path, *_position(tree))

    # --- statements -------------------------------------------------------------------------

    def axiom(self, tree: Tree) -> Axiom:
        name, lhs, rhs, conds = tree.children
        scope = _Scope("axiom")
        axiom = Axiom(
            str(name),
            self.term(lhs, scope),
            self.term(rhs, scope),
            self.conditions(conds, scope) if conds is not None else (),
            self.loc(tree),
        )
        check_axiom(axiom, self)
        return axiom

    def rule(self, tree: Tree) -> Rule:
        name, doc, source_tree, target_tree, *clauses = _children(tree)
        by_kind: dict[str, Tree] = {}
        for clause in clauses:
            assert isinstance(clause, Tree)
            if clause.data in by_kind:
                word = clause.data.removesuffix("_clause").replace("cond", "if")
                raise self.error(clause, f"a rule has one '{word}' clause; list its items with commas")
            by_kind[clause.data] = clause
        source = self.terms(source_tree, _Scope("source"))
        tensors = frozenset(tensor_names(source))
        lets = self.lets(by_kind.get("let_clause"), tensors)
        target_scope = _Scope("target", lets, tensors)
        target = self.terms(target_tree, target_scope)
        if len(target) != len(source):
            raise self.error(
                target_tree, f"the source has {len(source)} outputs but the target has {len(target)}"
            )
        params = self.params(by_kind.get("where_clause"), target_scope)
        conds = by_kind.get("cond_clause")
        rule = Rule(
            str(name),
            source,
            target,
            self.conditions(conds, target_scope) if conds is not None else (),
            params,
            json.loads(doc) if doc is not None else "",
            (),
            self.loc(tree),
        )
        check_rule_scopes(rule, self, by_kind.get("where_clause"))
        example = by_kind.get("example_clause")
        return replace(rule, examples=self.example(example, rule)) if example is not None else rule

    def lets(self, clause: Tree | None, tensors: frozenset[str]) -> dict[str, Term]:
        lets: dict[str, Term] = {}
        if clause is None:
            return lets
        for binding in clause.children:
            name, body = binding.children
            if str(name) in lets or str(name) in tensors:
                raise self.error(name, f"'{name}' is already a {'let name' if name in lets else 'tensor'}")
            lets[str(name)] = self.term(body, _Scope("target", dict(lets), tensors))
        return lets

    def params(self, clause: Tree | None, scope: _Scope) -> tuple[tuple[str, Domain], ...]:
        if clause is None:
            return ()
        params: dict[str, Domain] = {}
        for param in clause.children:
            name, domain = param.children
            if str(name) in params:
                raise self.error(name, f"parameter '{name}' is declared twice")
            params[str(name)] = self.domain(domain, scope)
        return tuple(params.items())

    def domain(self, tree: Tree, scope: _Scope) -> Domain:
        if tree.data == "degree_domain":
            return Domain("degree")
        if tree.data == "dim_domain":
            return Domain("dim", self.term(tree.children[0], scope))
        lo, hi = (self.constant(e, scope, "range bounds") for e in tree.children)
        if not isinstance(lo, int) or not isinstance(hi, int) or isinstance(lo, bool) or lo >= hi:
            raise self.error(tree, f"range({lo}, {hi}) needs integers lo < hi")
        return Domain("range", None, lo, hi)

    def example(self, clause: Tree, rule: Rule) -> tuple[tuple[str, Any], ...]:
        tensors = tensor_names(rule.source)
        attrs = attr_vars_of_rule(rule)
        kinds = attr_kinds([*rule.source, *rule.target])
        bindings: dict[str, Any] = {}
        for binding in clause.children:
            name = str(binding.children[0])
            if name in bindings:
                raise self.error(binding, f"example binds '{name}' twice")
            if binding.data == "type_binding":
                if name not in tensors:
                    raise self.error(
                        binding, f"example binds '{name}', which is no tensor variable of the source"
                    )
                bindings[name] = self.tensor_type(_children(binding)[1])
                continue
            if name not in attrs:
                raise self.error(
                    binding, f"example binds '{name}', which is no attribute variable of the rule"
                )
            value = self.constant(binding.children[1], _Scope("target"), "example values")
            bindings[name] = _canonical_value(kinds.get(name), value)
        return tuple(bindings.items())

    def tensor_type(self, token: Token) -> TensorType:
        try:
            parsed = Parser(_type_context(), str(token)).parse_type()
        except (ParseError, VerifyException) as e:
            message = e.msg if isinstance(e, ParseError) else str(e)
            raise self.error(token, message.strip().splitlines()[0]) from None
        if not isinstance(parsed, TensorType):
            raise self.error(token, f"expected a !pcg.tensor type, got {parsed}")
        return parsed

    # --- terms ------------------------------------------------------------------------------

    def terms(self, tree: Tree, scope: _Scope) -> tuple[Term, ...]:
        return tuple(self.term(t, scope) for t in tree.children)

    def term(self, tree: Tree, scope: _Scope) -> Term:
        if tree.data == "var":
            return self.var(_children(tree)[0], scope)
        if tree.data == "let_result":
            return self.let_result(tree, scope)
        return self.app(tree, scope)

    def var(self, token: Token, scope: _Scope) -> Term:
        name = str(token)
        if name in scope.lets:
            return scope.lets[name]
        if scope.tensors is not None and name not in scope.tensors:
            raise self.error(token, f"tensor variable '{name}' is not bound by the source")
        self.tensor_locs.setdefault(name, token)
        return Var(name)

    def let_result(self, tree: Tree, scope: _Scope) -> Term:
        name, index = _children(tree)
        bound = scope.lets.get(str(name))
        if bound is None:
            where = "the source may not use let names" if scope.side == "source" else "no let binds it"
            raise self.error(name, f"'{name}.{index}': '{name}' is not a let name ({where})")
        if not isinstance(bound, App):
            raise self.error(name, f"'{name}' is the tensor '{bound}', which has no results to pick")
        if bound.result != 0:
            raise self.error(name, f"'{name}' already picks result {bound.result} of {bound.op}")
        self.check_result(bound.op, int(index), name)
        return replace(bound, result=int(index))

    def app(self, tree: Tree, scope: _Scope) -> App:
        opname, props, *rest = _children(tree)
        result = rest.pop()
        token = opname.children[0]
        op = self.resolve(token)
        attrs = self.properties(op, props, scope, token)
        args = self.operands(op, [a for a in rest if a is not None], scope, token)
        index = int(result) if result is not None else 0
        if result is not None:
            self.check_result(op, index, result)
            sizes = dict(attrs).get("sizes")
            if isinstance(sizes, Lit) and index >= len(sizes.value):
                raise self.error(result, f"{op} with {len(sizes.value)} sizes has no result {index}")
        return App(op, args, attrs, index)

    def resolve(self, token: Token) -> str:
        name = str(token)
        known = op_classes()
        if "." in name:
            if name not in known:
                raise self.error(token, f"unknown op '{name}'{_suggest(name, known)}")
            full = name
        else:
            found = [f"{d}.{name}" for d in ("pcg", "parallel") if f"{d}.{name}" in known]
            if not found:
                short = {k.split(".", 1)[1] for k in known}
                raise self.error(token, f"unknown op '{name}'{_suggest(name, short)}")
            if len(found) > 1:
                raise self.error(token, f"'{name}' is ambiguous: write {' or '.join(found)}")
            full = found[0]
        if full in SOURCE_OPS:
            raise self.error(token, f"{full} cannot appear in a term: use a tensor variable")
        return full

    def check_result(self, op: str, index: int, at: Token) -> None:
        results = op_class(op).get_irdl_definition().results
        variadic = any(isinstance(d, VarResultDef) for _, d in results)
        if not variadic and index >= len(results):
            raise self.error(
                at, f"{op} has {len(results)} result{'s' * (len(results) != 1)}; .{index} is none"
            )

    def operands(self, op: str, args: list[Tree], scope: _Scope, at: Token) -> tuple[Term | None, ...]:
        slots = op_class(op).get_irdl_definition().operands
        positional = [self.term(a.children[0], scope) for a in args if a.data == "arg"]
        keywords = {str(a.children[0]): a for a in args if a.data == "keyword_arg"}
        if any(isinstance(d, VarOperandDef) and not isinstance(d, OptOperandDef) for _, d in slots):
            if keywords or not positional:
                raise self.error(at, f"{op} takes one or more operands, positionally")
            return tuple(positional)
        optional = [n for n, d in slots if isinstance(d, OptOperandDef)]
        required = [n for n, d in slots if not isinstance(d, OptOperandDef)]
        for name, tree in keywords.items():
            if name not in optional:
                what = f"its optional operands: {', '.join(optional)}" if optional else "it has none"
                raise self.error(tree, f"'{name}' is not an optional operand of {op} ({what})")
        if len(positional) < len(required) or len(positional) > len(slots):
            want = f"{len(required)}" if not optional else f"{len(required)} to {len(slots)}"
            noun = "operand" if want == "1" else "operands"
            raise self.error(
                at, f"{op} takes {want} {noun} ({', '.join(n for n, _ in slots)}), got {len(positional)}"
            )
        out: list[Term | None] = []
        for i, (name, _) in enumerate(slots):
            if name in keywords and i < len(positional):
                raise self.error(keywords[name], f"operand '{name}' of {op} is given twice")
            if i < len(positional):
                out.append(positional[i])
            elif name in keywords:
                out.append(self.term(keywords[name].children[1], scope))
            else:
                out.append(None)
        return tuple(out)

    def properties(
        self, op: str, tree: Tree | None, scope: _Scope, at: Token
    ) -> tuple[tuple[str, Expr], ...]:
        declared = {name: (kind, optional) for name, kind, optional in op_class(op).PROPS}
        given: dict[str, Expr] = {}
        for prop in tree.children if tree is not None else ():
            if prop is None:
                continue
            name, value = prop.children
            if str(name) not in declared:
                known = f"properties: {', '.join(declared)}" if declared else "it has none"
                raise self.error(name, f"{op} has no property '{name}' ({known})")
            if str(name) in given:
                raise self.error(name, f"property '{name}' is given twice")
            given[str(name)] = self.property_value(op, str(name), declared[str(name)][0], value, scope)
        for name, (kind, optional) in declared.items():
            if not optional and kind is not Kind.FLAG and name not in given:
                raise self.error(at, f"{op} needs property '{name}'")
        ordered = [(name, given[name]) for name in declared if name in given]
        return tuple((n, e) for n, e in ordered if not (isinstance(e, Lit) and e.value is False))

    def property_value(self, op: str, name: str, kind: Kind, tree: Tree, scope: _Scope) -> Expr:
        e = self.expr(tree, scope)
        if not isinstance(e, Lit):
            if isinstance(e, ListExpr) and kind is not Kind.INTS:
                raise self.error(tree, f"property '{name}' of {op} is not a list")
            return e
        v = e.value
        ok = {
            Kind.INT: isinstance(v, int) and not isinstance(v, bool),
            Kind.INTS: isinstance(v, tuple),
            Kind.FLOAT: isinstance(v, int | float) and not isinstance(v, bool),
            Kind.STR: isinstance(v, str),
            Kind.FLAG: isinstance(v, bool),
            Kind.TYPE: isinstance(v, str) and v in ELEMENT_TYPE_NAMES,
        }.get(kind, False)
        if not ok:
            want = {
                Kind.INT: "an integer",
                Kind.INTS: "a list of integers",
                Kind.FLOAT: "a number",
                Kind.STR: "a string",
                Kind.FLAG: "true or false",
                Kind.TYPE: f"an element type ({', '.join(map(json.dumps, ELEMENT_TYPE_NAMES))})",
            }.get(kind, "a value the rule language cannot write")
            raise self.error(tree, f"property '{name}' of {op} takes {want}")
        if kind is Kind.FLOAT:
            return Lit(float(v))
        if kind is Kind.TYPE:
            return Lit(ELEMENT_TYPE_NAMES[v])
        return e

    # --- expressions ------------------------------------------------------------------------

    def expr(self, tree: Tree, scope: _Scope) -> Expr:
        kind = tree.data
        children = _children(tree)
        if kind in _LITERALS:
            return Lit(_LITERALS[kind](children[0] if children else None))
        if kind == "attr_var":
            self.attr_locs.setdefault(str(children[0]), children[0])
            return AttrVar(str(children[0]))
        if kind == "list_expr":
            items = tuple(self.expr(c, scope) for c in children if c is not None)
            if all(isinstance(i, Lit) and type(i.value) is int for i in items):
                return Lit(tuple(i.value for i in items))  # type: ignore[union-attr]
            return ListExpr(items)
        if kind == "neg":
            inner = self.expr(children[0], scope)
            if isinstance(inner, Lit) and type(inner.value) in (int, float):
                return Lit(-inner.value)
            return BinOp("-", Lit(0), inner)
        if kind == "binop":
            left, op, right = children
            return BinOp(str(op.children[0]), self.expr(left, scope), self.expr(right, scope))
        return self.query(tree, scope)

    def query(self, tree: Tree, scope: _Scope) -> Query:
        fn_tree, term_tree, dim_tree = tree.children
        fn = str(fn_tree.children[0])
        term = self.term(term_tree, scope)
        if fn in ("size", "shard"):
            if dim_tree is None:
                raise self.error(tree, f"{fn}(tensor, dim) needs a dimension")
            return Query(fn, term, self.expr(dim_tree, scope))
        if dim_tree is not None:
            raise self.error(dim_tree, f"{fn}(tensor) takes no dimension")
        return Query(fn, term)

    def conditions(self, clause: Tree, scope: _Scope) -> tuple[Cond, ...]:
        out: list[Cond] = []
        for cond in clause.children:
            items = cond.children
            exprs = [self.expr(items[i], scope) for i in range(0, len(items), 2)]
            ops = [str(items[i].children[0]) for i in range(1, len(items), 2)]
            for i, op in enumerate(ops):
                left, right = exprs[i], exprs[i + 1]
                types = [_is_type_query(left), _is_type_query(right)]
                if any(types) and (not all(types) or op not in ("==", "!=")):
                    raise self.error(items[2 * i + 1], "type(t) may only be compared with == or != to a type")
                out.append(Cond(op, left, right))
        return tuple(out)

    def constant(self, tree: Tree, scope: _Scope, what: str) -> Any:
        e = self.expr(tree, scope)
        try:
            return eval_expr(e, {}, _no_types)
        except (EvalError, TypeError) as err:
            raise self.error(tree, f"{what} must be constants ({err})") from None


_LITERALS: dict[str, Any] = {
    "int_lit": lambda t: int(t),
    "float_lit": lambda t: float(t),
    "str_lit": lambda t: json.loads(t),
    "true_lit": lambda t: True,
    "false_lit": lambda t: False,
}


def _no_types(term: Term) -> Any:
    raise EvalError("a type query is not a constant")


def _is_type_query(e: Expr) -> bool:
    return isinstance(e, Query) and e.fn == "type"


def _canonical_value(kind: Kind | None, value: Any) -> Any:
    """An example value as the property holds it: floats for floats, xDSL element types."""
    if kind is Kind.FLOAT and type(value) is int:
        return float(value)
    if kind is Kind.TYPE and isinstance(value, str) and value in ELEMENT_TYPE_NAMES:
        return ELEMENT_TYPE_NAMES[value]
    return value


@cache
def _type_context() -> Context:
    """An xDSL context that parses `!pcg.tensor<...>` types (for examples)."""
    ctx = Context()
    for dialect in (Builtin, PCG, PARALLEL):
        ctx.load_dialect(dialect)
    return ctx


def _position(at: Tree | Token | None) -> tuple[int, int]:
    if isinstance(at, Token):
        return (at.line or 1), (at.column or 1)
    if isinstance(at, Tree) and not at.meta.empty:
        return at.meta.line, at.meta.column
    if isinstance(at, Tree):
        for child in at.children:
            if isinstance(child, Tree | Token):
                return _position(child)
    return 1, 1


def _suggest(name: str, known: Any) -> str:
    close = difflib.get_close_matches(name, sorted(known), n=1)
    return f" (did you mean '{close[0]}'?)" if close else ""
