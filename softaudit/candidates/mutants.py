"""Mutants of the built-ins: each built-in's module with one mistake made in its source, labelled with the mistake.

A mutant is the module's source parsed with `ast`, one node changed by one operator class (an `ast.NodeTransformer`
each: an arithmetic operator swapped, a comparison moved across its boundary, a numeric constant changed, max for min,
a guard (np.where) or branch (if) dropped, a cast or a rescale dropped, a slice bound off by one, np.where's branches
swapped), compiled and run as a module of its own. Its candidate is the built-in's function in that module: a
mistake in a helper of the module (`_normalised`, `_online`) makes a mutant of every built-in of the module that
reaches the helper; helpers imported from another module (`_ops`, another kind's) stay as they are.

`mutants(builtin)` lists a built-in's mutants; `Mutant.candidate()` compiles one into a Candidate that softaudit.audit
and the hunt take like any other. benchmarks/mutation.py measures what `run` and the hunt detect (docs/mutation.md).

(Longer than the house's 400 lines: the operator classes, a dozen lines each, share the walk that finds a built-in's
mutable parts and the compile step, and read as one catalogue.)
"""

from __future__ import annotations

import ast
import copy
import dataclasses
import functools
import inspect
import sys
import types
from collections.abc import Iterator

import numpy as np

from ..adapters import Candidate
from ..adapters import marking as _marking


@dataclasses.dataclass(frozen=True)
class Mutant:
    """One mistake made in one built-in's module: `mistake` names the operator class, `label` the change and where."""

    builtin: str  # the built-in candidate's name ("softmax.max_shifted")
    kind: str
    module: str  # the module the mistake is made in ("softaudit.candidates.softmax")
    mistake: str  # the operator class: "operator", "max for min", "guard dropped", ...
    label: str  # "operator + -> - at candidates/softmax.py:42"
    line: int
    site: tuple  # (top-level statement, operator class, occurrence): what `candidate()` makes again

    @property
    def name(self) -> str:
        """The mutant's candidate name: the built-in's, with the line and operator class of the mistake."""
        return f"{self.builtin}~{self.site[1]}@{self.line}.{self.site[2]}"

    def source(self) -> str:
        """The mutated function's source (the top-level statement the mistake is in), as ast.unparse writes it."""
        return ast.unparse(_mutated(self.module, self.site).body[self.site[0]])

    def original(self) -> str:
        """The same statement's source before the mistake, as ast.unparse writes it."""
        return ast.unparse(_tree(self.module).body[self.site[0]])

    def candidate(self) -> Candidate:
        """The mutated built-in, compiled in a module of its own; a Candidate like the built-in's."""
        namespace = _compiled(self.module, self.site)
        fn = namespace[_attributes(self.module)[self.builtin]]
        return Candidate(self.kind, self.name, fn)


def _is_np(node, *names) -> bool:
    return (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id in ("np", "numpy")
        and node.attr in names
    )


def _call_named(node, *names) -> bool:
    """Whether node is a call of np.<name> or of a bare <name>."""
    if not isinstance(node, ast.Call):
        return False
    f = node.func
    return _is_np(f, *names) or (isinstance(f, ast.Name) and f.id in names)


class _Operator(ast.NodeTransformer):
    """One operator class: `eligible(node)` picks its sites, `mutate(node)` returns (new node, what changed). With
    `target` None it counts the sites (and their lines); otherwise it changes the target-th one."""

    mistake = ""

    def __init__(self, target: int | None = None):
        self.target, self.count, self.found = target, 0, []

    def eligible(self, node) -> bool:
        raise NotImplementedError

    def mutate(self, node):
        raise NotImplementedError

    def visit(self, node):
        node = super().visit(node)  # (children first: the occurrence order is the same with and without a target)
        if isinstance(node, ast.AST) and self.eligible(node):
            index = self.count
            self.count += 1
            if self.target is None:
                self.found.append((getattr(node, "lineno", 0), self.describe(node)))
            elif index == self.target:
                new, _ = self.mutate(node)
                return ast.copy_location(new, node) if isinstance(new, ast.expr) else new
        return node

    def describe(self, node) -> str:
        return self.mutate(copy.deepcopy(node))[1]


_SWAP = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Div, ast.Div: ast.Mult}
_SYMBOL = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/"}


class Arithmetic(_Operator):
    """+ for -, * for / and back."""

    mistake = "operator"

    def eligible(self, node):
        return isinstance(node, ast.BinOp) and type(node.op) in _SWAP and not _constant_only(node)

    def mutate(self, node):
        old = type(node.op)
        node.op = _SWAP[old]()
        return node, f"operator {_SYMBOL[old]} -> {_SYMBOL[_SWAP[old]]}"


_MOVED = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq, ast.NotEq: ast.Eq}
_MOVED |= {ast.Is: ast.IsNot, ast.IsNot: ast.Is}
_CMP = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!=", ast.Is: "is"}
_CMP |= {ast.IsNot: "is not"}


class Comparison(_Operator):
    """< for <=, > for >=, == for != and is for is not (and back)."""

    mistake = "comparison"

    def eligible(self, node):
        return isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _MOVED

    def mutate(self, node):
        old, text = type(node.ops[0]), _source(node)
        node.ops = [_MOVED[old]()]
        return node, f"comparison {_CMP[old]} -> {_CMP[_MOVED[old]]} in {text}"


def _number(node):
    """The number a literal (or a negated literal) holds, else None; booleans are not numbers here."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = _number(node.operand)
        return None if inner is None else -inner
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return node.value
    return None


def _constant_only(node) -> bool:
    return all(isinstance(n, (ast.Constant, ast.BinOp, ast.UnaryOp, ast.operator, ast.unaryop)) for n in ast.walk(node))


class Constant(_Operator):
    """A numeric literal changed: an integer n to n + 1, a float c to c + 1 (c / 10 beyond 100 in size)."""

    mistake = "constant"

    def eligible(self, node):
        value = _number(node)
        if value is None or getattr(node, "_softaudit_skip", False):
            return False
        return not (isinstance(node, ast.Constant) and getattr(node, "_softaudit_negated", False))

    def mutate(self, node):
        value = _number(node)
        new = value + 1 if isinstance(value, int) else (value / 10 if abs(value) > 100 else value + 1)
        made = ast.Constant(abs(new))
        return (ast.UnaryOp(ast.USub(), made) if new < 0 else made), f"constant {value!r} -> {new!r}"


_OPPOSITE = {"maximum": "minimum", "minimum": "maximum", "max": "min", "min": "max", "argmax": "argmin"}
_OPPOSITE |= {"argmin": "argmax", "fmax": "fmin", "fmin": "fmax", "row_max": "_mutant_row_min"}


def _row_min(x):
    """row_max's mistaken twin: the minimum along the last axis (keeps the axis)."""
    if x.shape[-1] == 0:
        return np.full(x.shape[:-1] + (1,), -np.inf).astype(x.dtype)
    return x.min(axis=-1, keepdims=True)


class MaxMin(_Operator):
    """max for min (np.maximum, np.max, .max(), max(), argmax, row_max) and back."""

    mistake = "max for min"

    def eligible(self, node):
        if not isinstance(node, ast.Call):
            return False
        f = node.func
        if isinstance(f, ast.Attribute):
            return f.attr in _OPPOSITE and f.attr != "row_max"
        return isinstance(f, ast.Name) and f.id in ("max", "min", "row_max")

    def mutate(self, node):
        f = node.func
        if isinstance(f, ast.Attribute):
            old, f.attr = f.attr, _OPPOSITE[f.attr]
            return node, f"{old} -> {f.attr}"
        old = f.id
        f.id = _OPPOSITE[old]
        return node, f"{old} -> {'min' if old == 'row_max' else f.id}"


def _source(node) -> str:
    text = ast.unparse(node)
    return text if len(text) <= 60 else text[:57] + "..."


class GuardDropped(_Operator):
    """np.where(c, a, b) -> a: the guard (a mask, a finite check, an empty-row test) dropped, the value kept."""

    mistake = "guard dropped"

    def eligible(self, node):
        return _call_named(node, "where") and len(node.args) == 3

    def mutate(self, node):
        return node.args[1], f"guard dropped: {_source(node)} -> {_source(node.args[1])}"


class WhereSwapped(_Operator):
    """np.where(c, a, b) -> np.where(c, b, a)."""

    mistake = "where swapped"

    def eligible(self, node):
        return _call_named(node, "where") and len(node.args) == 3

    def mutate(self, node):
        node.args[1], node.args[2] = node.args[2], node.args[1]
        return node, f"where's branches swapped: {_source(node.args[0])}"


class CastDropped(_Operator):
    """x.astype(d) -> x, and const(value, d) -> value: a cast (an upcast, the rounding to the dtype) dropped."""

    mistake = "cast dropped"

    def eligible(self, node):
        if not isinstance(node, ast.Call):
            return False
        f = node.func
        if isinstance(f, ast.Attribute) and f.attr == "astype":
            return True
        return isinstance(f, ast.Name) and f.id == "const" and node.args and _number(node.args[0]) is not None

    def mutate(self, node):
        f = node.func
        kept = f.value if isinstance(f, ast.Attribute) else node.args[0]
        return kept, f"cast dropped: {_source(node)} -> {_source(kept)}"


_RESCALES = ("exp", "correction", "scale", "sqrt", "sink", "total", "sum")


class FactorDropped(_Operator):
    """a * b -> a and a / b -> a: a rescale (exp(m_old - m_new), the 1 / sqrt(d) scale) or a normalisation dropped."""

    mistake = "rescale dropped"

    def eligible(self, node):
        return isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Mult, ast.Div)) and not _constant_only(node)

    def mutate(self, node):
        dropped = ast.unparse(node.right)
        what = "rescale" if any(word in dropped for word in _RESCALES) else "factor"
        return node.left, f"{what} dropped: {_source(node)} -> {_source(node.left)}"


class TermDropped(_Operator):
    """a - b -> a and a + b -> a: the max shift (x - max), a bias, the sink's term of a sum dropped."""

    mistake = "term dropped"

    def eligible(self, node):
        return isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub)) and not _constant_only(node)

    def mutate(self, node):
        dropped = ast.unparse(node.right)
        shift = isinstance(node.op, ast.Sub) and ("max" in dropped or dropped in ("m", "new_m", "safe_m", "lse"))
        what = "max shift" if shift else "term"
        return node.left, f"{what} dropped: {_source(node)} -> {_source(node.left)}"


def _index(node):
    """The integer literal a subscript indexes with (x[0], x[..., 0]), else None."""
    if isinstance(node, ast.Tuple) and node.elts:
        node = node.elts[-1]
    value = _number(node)
    return value if isinstance(value, int) else None


class OffByOne(_Operator):
    """A slice's bound off by one (its start one later, its stop one earlier), an integer index one further on, or
    range()'s start one later."""

    mistake = "off by one"

    def eligible(self, node):
        if isinstance(node, ast.Slice):
            return node.lower is not None or node.upper is not None
        if isinstance(node, ast.Subscript):
            return _index(node.slice) is not None
        return _call_named(node, "range") and len(node.args) >= 2

    def mutate(self, node):
        def plus(bound, step):
            value = _number(bound)
            if value is not None:
                return (
                    ast.Constant(value + step)
                    if value + step >= 0
                    else ast.UnaryOp(ast.USub(), ast.Constant(-value - step))
                )
            return ast.BinOp(bound, ast.Add() if step > 0 else ast.Sub(), ast.Constant(1))

        if isinstance(node, ast.Slice):
            old = _source(node)
            if node.upper is not None:
                node.upper = plus(node.upper, -1)
            else:
                node.lower = plus(node.lower, 1)
            return node, f"off by one: [{old}] -> [{_source(node)}]"
        if isinstance(node, ast.Subscript):
            old = _source(node)
            if isinstance(node.slice, ast.Tuple):
                node.slice.elts[-1] = plus(node.slice.elts[-1], 1)
            else:
                node.slice = plus(node.slice, 1)
            return node, f"off by one: {old} -> {_source(node)}"
        old = _source(node)
        node.args[0] = plus(node.args[0], 1)
        return node, f"off by one: {old} -> {_source(node)}"


class BranchDropped(_Operator):
    """An `if` statement dropped (its else kept): a modifier, a guard or a special case left unhandled."""

    mistake = "branch dropped"

    def eligible(self, node):
        return isinstance(node, ast.If)

    def mutate(self, node):
        label = f"branch dropped: if {_source(node.test)}"
        return (node.orelse or [ast.Pass()]), label


#: The operator classes, in the order their mutants are listed.
OPERATORS = (
    Arithmetic,
    Comparison,
    Constant,
    MaxMin,
    GuardDropped,
    WhereSwapped,
    CastDropped,
    FactorDropped,
    TermDropped,
    OffByOne,
    BranchDropped,
)
_BY_NAME = {op.__name__: op for op in OPERATORS}


def _mark_skipped(tree: ast.Module) -> None:
    """Mark the literals no operator may change: a keyword's (axis=-1, keepdims, initial), a slice's or an index's
    (OffByOne's), an annotation's or a default's, and the literal under a negation (the negation is the literal)."""
    for node in ast.walk(tree):
        skipped = []
        if isinstance(node, ast.keyword) and node.arg in ("axis", "keepdims", "copy"):
            skipped.append(node.value)
        elif isinstance(node, ast.Subscript):
            skipped.append(node.slice)
        elif isinstance(node, ast.arguments):
            skipped += node.defaults + node.kw_defaults
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            node.operand._softaudit_negated = True
        for each in skipped:
            for inner in ast.walk(each) if each is not None else ():
                inner._softaudit_skip = True


def _statements(tree: ast.Module) -> list[tuple[int, ast.stmt, set]]:
    """(index, statement, names it defines) of each top-level function or assignment the operators may change:
    not imports, not the docstring, not a decorator's arguments."""
    found = []
    for i, stmt in enumerate(tree.body):
        if isinstance(stmt, ast.FunctionDef):
            found.append((i, stmt, {stmt.name}))
        elif isinstance(stmt, (ast.Assign, ast.AnnAssign)):
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            found.append((i, stmt, {t.id for t in targets if isinstance(t, ast.Name)}))
    return found


def _mutable_parts(stmt) -> list:
    """The parts of a top-level statement the operators change: a function's body (not its decorators, defaults or
    docstring), an assignment's value."""
    if isinstance(stmt, ast.FunctionDef):
        body = stmt.body
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
            body = body[1:]
        return body
    return [stmt.value] if stmt.value is not None else []


def _visit_parts(stmt, op: _Operator) -> None:
    """Run op over a statement's mutable parts, in place (a part it replaces is put back)."""
    if isinstance(stmt, ast.FunctionDef):
        start = (
            1
            if stmt.body and isinstance(stmt.body[0], ast.Expr) and isinstance(stmt.body[0].value, ast.Constant)
            else 0
        )
        stmt.body[start:] = _visit_list(stmt.body[start:], op)
    elif stmt.value is not None:
        stmt.value = op.visit(stmt.value)


def _visit_list(stmts: list, op: _Operator) -> list:
    out = []
    for s in stmts:
        new = op.visit(s)
        if new is None:
            continue
        out += new if isinstance(new, list) else [new]
    return out or [ast.Pass()]


@functools.cache
def _tree(module: str) -> ast.Module:
    source = inspect.getsource(sys.modules[module])  # (imported: a built-in of it was marked there)
    tree = ast.parse(source)
    _mark_skipped(tree)
    return tree


def _depends(tree: ast.Module) -> dict[str, set]:
    """Each top-level name's dependencies among the module's top-level names, transitively (itself included)."""
    stmts = _statements(tree)
    defined = {name for _, _, names in stmts for name in names}
    direct = {}
    for _, stmt, names in stmts:
        used = {n.id for n in ast.walk(stmt) if isinstance(n, ast.Name)} & defined
        for name in names:
            direct[name] = used | {name}
    closed = {}
    for name in direct:
        seen, todo = set(), [name]
        while todo:
            n = todo.pop()
            if n not in seen:
                seen.add(n)
                todo += direct.get(n, ())
        closed[name] = seen
    return closed


@functools.cache
def _attributes(module: str) -> dict[str, str]:
    """The module's built-ins: candidate name -> the module attribute holding it."""
    mod = sys.modules[module]
    found = {}
    for attr, fn in vars(mod).items():
        mark = _marking(fn) if callable(fn) else None
        if mark is not None and mark.owner == module and mark.name not in found:
            found[mark.name] = attr
    return found


def _mutated(module: str, site: tuple) -> ast.Module:
    """The module's tree with the one mistake at `site` made: (statement index, operator class, occurrence)."""
    tree = copy.deepcopy(_tree(module))
    index, op_name, occurrence = site
    op = _BY_NAME[op_name](occurrence)
    _visit_parts(tree.body[index], op)
    return ast.fix_missing_locations(tree)


@functools.cache
def _compiled(module: str, site: tuple) -> dict:
    """The module's namespace with the one mistake at `site` made."""
    tree = _mutated(module, site)
    package, _, leaf = module.rpartition(".")
    # (a name of its own: cloudpickle would otherwise send the built-in by reference to a worker)
    namespace = {"__name__": f"{module}__mutant", "__package__": package, "_mutant_row_min": _row_min}
    code = compile(tree, f"candidates/{leaf}.py", "exec")
    mod = types.ModuleType(namespace["__name__"])
    mod.__dict__.update(namespace)
    exec(code, mod.__dict__)
    return mod.__dict__


def mutants(builtin: Candidate, operators=OPERATORS) -> list[Mutant]:
    """The built-in's mutants: one per site of each operator class in the code of its module that it reaches."""
    module = _module_of(builtin)
    tree = _tree(module)
    attr = _attributes(module).get(builtin.name)
    if attr is None:
        raise ValueError(f"{builtin.name} is not a built-in of {module}")
    reach = _depends(tree).get(attr, {attr})
    leaf = module.rpartition(".")[2]
    found = []
    for index, stmt, names in _statements(tree):
        if not names & reach:
            continue
        for op_class in operators:
            op = op_class()
            _visit_parts(copy.deepcopy(stmt), op)
            for occurrence, (line, change) in enumerate(op.found):
                site = (index, op_class.__name__, occurrence)
                label = f"{change} at candidates/{leaf}.py:{line}"
                found.append(Mutant(builtin.name, builtin.kind, module, op_class.mistake, label, line, site))
    return found


def _module_of(builtin: Candidate) -> str:
    fn = builtin.call
    mark = _marking(fn)
    if mark is None or not mark.owner:
        raise ValueError(f"{builtin.name} is not a built-in")
    return mark.owner


def every_mutant(builtins) -> Iterator[Mutant]:
    """The mutants of each built-in, in order."""
    for b in builtins:
        yield from mutants(b)
