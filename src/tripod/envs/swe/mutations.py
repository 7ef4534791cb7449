"""Seeded bug injection by AST mutation, applied as minimal source-line edits.

Mutants are found on the AST but written back by editing only the characters of the mutated
node (an operator, a constant, two arguments) or deleting whole lines (a dropped branch), so
the gold patch that undoes a bug is as small as a human fix, not a reformatted file.

Operators (the issue's list, plus boolean operators):
- ``flip_compare``: ``<`` <-> ``<=``, ``>`` <-> ``>=``, ``==`` <-> ``!=``, ``is`` <-> ``is not``,
  ``in`` <-> ``not in``
- ``off_by_one``: an integer in an index, slice, ``range`` call or ``+``/``-`` becomes n+1 or n-1
- ``swap_args``: the first two positional arguments of a call trade places
- ``drop_branch``: an ``if`` without ``else`` is deleted (a guard or special case vanishes)
- ``wrong_constant``: ``True`` <-> ``False``; other integers become 0 (or 1 if they were 0)
- ``flip_boolop``: ``and`` <-> ``or``
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from tripod.envs.swe.patches import split_lines

_COMPARE_FLIPS: dict[type, tuple[str, str]] = {
    ast.Lt: ("<", "<="), ast.LtE: ("<=", "<"), ast.Gt: (">", ">="), ast.GtE: (">=", ">"),
    ast.Eq: ("==", "!="), ast.NotEq: ("!=", "=="), ast.Is: ("is", "is not"),
    ast.IsNot: ("is not", "is"), ast.In: ("in", "not in"), ast.NotIn: ("not in", "in"),
}


@dataclass(frozen=True)
class Mutation:
    """Replace lines `first..last` (1-based, inclusive) of `path` by `new_lines`."""

    path: str
    first: int
    last: int
    new_lines: tuple[str, ...]
    operator: str
    description: str

    def overlaps(self, other: Mutation) -> bool:
        return self.path == other.path and not (self.last < other.first - 1 or
                                                 other.last < self.first - 1)


def apply_mutations(text: str, mutations: list[Mutation]) -> str:
    """Apply non-overlapping mutations of one file (bottom-up so line numbers hold)."""
    lines = split_lines(text)
    for m in sorted(mutations, key=lambda m: m.first, reverse=True):
        lines[m.first - 1:m.last] = list(m.new_lines)
    return "".join(lines)


class _Finder(ast.NodeVisitor):
    """Collects every mutation of one module."""

    def __init__(self, path: str, source: str) -> None:
        self.path = path
        self.lines = split_lines(source)
        self.found: list[Mutation] = []
        self._index_context = 0

    # -- helpers -------------------------------------------------------------------------

    def _one_line(self, *nodes: ast.AST) -> bool:
        return all(getattr(n, "lineno", None) is not None and n.lineno == n.end_lineno
                   == nodes[0].lineno for n in nodes)

    def _splice(self, line_no: int, start: int, end: int, text: str, op: str,
                what: str) -> None:
        """Replace columns [start, end) of a line (columns are UTF-8 byte offsets)."""
        raw = self.lines[line_no - 1].encode("utf-8")
        if "pragma: no cover" in self.lines[line_no - 1]:
            return
        new = (raw[:start] + text.encode("utf-8") + raw[end:]).decode("utf-8")
        if new != self.lines[line_no - 1]:
            self.found.append(Mutation(self.path, line_no, line_no, (new,), op,
                                       f"{what} ({self.path}, line {line_no})"))

    def _segment(self, node: ast.AST) -> str:
        raw = self.lines[node.lineno - 1].encode("utf-8")  # type: ignore[attr-defined]
        return raw[node.col_offset:node.end_col_offset].decode("utf-8")  # type: ignore[attr-defined]

    # -- operators -----------------------------------------------------------------------

    def visit_Compare(self, node: ast.Compare) -> None:
        flip = _COMPARE_FLIPS.get(type(node.ops[0]))
        if len(node.ops) == 1 and flip and self._one_line(node.left, node.comparators[0]):
            left, right = node.left, node.comparators[0]
            raw = self.lines[node.lineno - 1].encode("utf-8")
            between = raw[left.end_col_offset:right.col_offset].decode("utf-8")
            old, new = flip
            replaced = _replace_token(between, old, new)
            if replaced is not None:
                self._splice(node.lineno, left.end_col_offset, right.col_offset, replaced,
                             "flip_compare", f"`{old}` became `{new}`")
        self.generic_visit(node)

    def visit_BoolOp(self, node: ast.BoolOp) -> None:
        if len(node.values) == 2 and self._one_line(*node.values):
            a, b = node.values
            raw = self.lines[a.lineno - 1].encode("utf-8")
            between = raw[a.end_col_offset:b.col_offset].decode("utf-8")
            old, new = ("and", "or") if isinstance(node.op, ast.And) else ("or", "and")
            replaced = _replace_token(between, old, new)
            if replaced is not None:
                self._splice(a.lineno, a.end_col_offset, b.col_offset, replaced,
                             "flip_boolop", f"`{old}` became `{new}`")
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        args = node.args
        if (len(args) >= 2 and not any(isinstance(a, ast.Starred) for a in args[:2])
                and self._one_line(args[0], args[1])):
            first, second = self._segment(args[0]), self._segment(args[1])
            if first != second:
                raw = self.lines[args[0].lineno - 1].encode("utf-8")
                middle = raw[args[0].end_col_offset:args[1].col_offset].decode("utf-8")
                self._splice(args[0].lineno, args[0].col_offset, args[1].end_col_offset,
                             second + middle + first, "swap_args",
                             "two arguments were swapped")
        is_range = isinstance(node.func, ast.Name) and node.func.id == "range"
        self._index_context += is_range
        self.generic_visit(node)
        self._index_context -= is_range

    def visit_Subscript(self, node: ast.Subscript) -> None:
        self.visit(node.value)
        self._index_context += 1
        self.visit(node.slice)
        self._index_context -= 1

    def visit_BinOp(self, node: ast.BinOp) -> None:
        arith = isinstance(node.op, ast.Add | ast.Sub)
        self._index_context += arith
        self.generic_visit(node)
        self._index_context -= arith

    def visit_Constant(self, node: ast.Constant) -> None:
        value = node.value
        if not self._one_line(node):
            return
        segment = self._segment(node)
        if isinstance(value, bool):
            self._splice(node.lineno, node.col_offset, node.end_col_offset, str(not value),
                         "wrong_constant", f"`{value}` became `{not value}`")
        elif isinstance(value, int) and segment == str(value):
            if self._index_context:
                for new in (value + 1, value - 1):
                    if new >= 0:
                        self._splice(node.lineno, node.col_offset, node.end_col_offset,
                                     str(new), "off_by_one", f"`{value}` became `{new}`")
            else:
                new = 1 if value == 0 else 0
                self._splice(node.lineno, node.col_offset, node.end_col_offset, str(new),
                             "wrong_constant", f"`{value}` became `{new}`")

    def _visit_block(self, body: list[ast.stmt]) -> None:
        for stmt in body:
            if (isinstance(stmt, ast.If) and not stmt.orelse and len(body) >= 2
                    and not _is_type_checking(stmt)
                    and not self._shares_lines(stmt)):
                self.found.append(Mutation(
                    self.path, stmt.lineno, stmt.end_lineno or stmt.lineno, (), "drop_branch",
                    f"an `if` branch was dropped ({self.path}, line {stmt.lineno})"))

    def _shares_lines(self, stmt: ast.stmt) -> bool:
        first = self.lines[stmt.lineno - 1]
        last = self.lines[(stmt.end_lineno or stmt.lineno) - 1]
        return first[:stmt.col_offset].strip() != "" or last.rstrip().endswith(("\\", ";"))

    def generic_visit(self, node: ast.AST) -> None:
        for name in ("body", "orelse", "finalbody"):
            block = getattr(node, name, None)
            if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
                self._visit_block(block)
        super().generic_visit(node)


def _replace_token(between: str, old: str, new: str) -> str | None:
    """Swap the operator `old` for `new` in the text between two operands, if it is there
    exactly once as a whole word (so ``not in`` is not mistaken for ``in``)."""
    words = between.split()
    core = [w for w in words if w not in ("(", ")")]
    if " ".join(core).strip("()") != old:
        return None
    return between.replace(old, new, 1)


def _is_type_checking(stmt: ast.If) -> bool:
    test = stmt.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _docstring_lines(tree: ast.AST) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(
                node.value.value, str):
            lines.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
    return lines


def find_mutations(path: str, source: str) -> list[Mutation]:
    """Every candidate mutation of one module, in source order (deduplicated)."""
    tree = ast.parse(source)
    finder = _Finder(path, source)
    finder.visit(tree)
    skip = _docstring_lines(tree)
    seen: set[tuple[int, int, tuple[str, ...]]] = set()
    out = []
    for m in sorted(finder.found, key=lambda m: (m.first, m.last, m.operator, m.new_lines)):
        key = (m.first, m.last, m.new_lines)
        if key in seen or m.first in skip:
            continue
        seen.add(key)
        mutated = apply_mutations(source, [m])
        try:
            ast.parse(mutated)
        except SyntaxError:
            continue
        out.append(m)
    return out


def enclosing_functions(source: str) -> dict[int, str]:
    """{line: qualified name of the innermost function or class around it} for one module
    (lines outside any are absent): what a task's bug is "in", for held-out functions."""
    names: dict[int, str] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                name = f"{prefix}{child.name}"
                for line in range(child.lineno, (child.end_lineno or child.lineno) + 1):
                    names[line] = name
                visit(child, f"{name}.")
            else:
                visit(child, prefix)

    visit(ast.parse(source), "")
    return names
