"""Constraint expressions of a search space, parsed and evaluated in a sandbox.

A constraint is a Python expression over parameter names and context names
(``tp_size * pp_size <= gpus_per_node``, ``heads % tp_size == 0``). Only a safe subset is
accepted (``EXPR_RULE``): it is parsed with ``ast`` and every node checked before anything
is evaluated, and evaluation walks the tree itself (no ``eval``). ``parse_constraint``
refuses what is not allowed with one ``BadInput``; ``Constraint.evaluate`` answers True
when a parameter it mentions is inactive, and raises ``ConstraintError`` for values it
cannot compare.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NoReturn

from orchestrator.config.yaml_input import did_you_mean, same, scalar, shown
from orchestrator.core.errors import BadInput, brief

EXPR_RULE = ("names, numbers, strings, true/false, comparisons (== != < <= > >=, in / not in a "
             "literal list), + - * / // %, and/or/not and parentheses")
MAX_EXPR_CHARS = 500  # a constraint is one line: real ones are under 100 characters


class ConstraintError(Exception):
    """A constraint could not be evaluated for some values (e.g. comparing a string and a number)."""


_BINOPS = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.Div: lambda a, b: a / b,
    ast.FloorDiv: lambda a, b: a // b,
    ast.Mod: lambda a, b: a % b,
}
_CMPOPS = {
    ast.Eq: lambda a, b: same(a, b),
    ast.NotEq: lambda a, b: not same(a, b),
    ast.Lt: lambda a, b: a < b,
    ast.LtE: lambda a, b: a <= b,
    ast.Gt: lambda a, b: a > b,
    ast.GtE: lambda a, b: a >= b,
    ast.In: lambda a, b: any(same(a, x) for x in b),
    ast.NotIn: lambda a, b: not any(same(a, x) for x in b),
}
_NODE_WORDS = {
    ast.Call: "a function call", ast.Subscript: "indexing", ast.Lambda: "a lambda",
    ast.Pow: "**", ast.BitAnd: "&", ast.BitOr: "|", ast.BitXor: "^", ast.LShift: "<<",
    ast.RShift: ">>", ast.Is: "is", ast.IsNot: "is not", ast.IfExp: "if/else",
    ast.Invert: "~", ast.MatMult: "@", ast.Dict: "a dict", ast.Set: "a set",
    ast.ListComp: "a comprehension", ast.GeneratorExp: "a comprehension",
    ast.Starred: "*", ast.JoinedStr: "an f-string", ast.NamedExpr: ":=",
}


@dataclass(frozen=True)
class Constraint:
    """A boolean expression over params and context names (see the module docstring)."""

    expr: str
    names: tuple[str, ...]  # every name it mentions
    params: tuple[str, ...]  # the names that are parameters of the space
    tree: ast.Expression = field(compare=False, repr=False)

    def evaluate(self, values: Mapping[str, Any]) -> bool:
        """True/False for ``values`` (params + context); True when a param is absent
        (inactive). Raises ConstraintError when it cannot be evaluated."""
        if any(p not in values for p in self.params):
            return True
        try:
            return bool(_eval(self.tree.body, values))
        except ConstraintError:
            raise
        except (TypeError, ZeroDivisionError, ValueError, OverflowError) as exc:
            raise ConstraintError(str(exc)) from None


def parse_constraint(expr: Any, known: Sequence[str], params: Sequence[str], *,
                     file: str | None, key: str) -> Constraint:
    """Parse and check one constraint; BadInput for syntax, disallowed parts, unknown names."""
    if not isinstance(expr, str) or not expr.strip():
        raise BadInput(f"a constraint must be a non-empty string expression such as "
                       f"'tp_size <= gpus_per_node', not {shown(expr)}", file=file, key=key)
    if len(expr) > MAX_EXPR_CHARS:  # bounds parsing and evaluation (no deep trees, no huge products)
        raise BadInput(f"constraint {brief(expr)} is {len(expr)} characters long; a constraint is at most "
                       f"{MAX_EXPR_CHARS}", file=file, key=key)
    try:
        tree = ast.parse(expr.strip(), mode="eval")
    except (SyntaxError, RecursionError, MemoryError) as exc:
        why = exc.msg if isinstance(exc, SyntaxError) else "nested too deeply"
        raise BadInput(f"cannot parse constraint {brief(expr)}: {why}; allowed: {EXPR_RULE}",
                       file=file, key=key) from None
    names: list[str] = []
    _check_node(tree.body, names, expr, file, key)
    for name in names:
        if name not in known:
            raise BadInput(
                f"unknown name {brief(name)} in constraint {brief(expr)}{did_you_mean(name, known)}; "
                f"allowed names: params of this space ({', '.join(params) or 'none'}) and context "
                f"names ({', '.join(n for n in known if n not in params) or 'none'})",
                file=file, key=key)
    unique = tuple(dict.fromkeys(names))
    return Constraint(expr=expr.strip(), names=unique,
                      params=tuple(n for n in unique if n in params), tree=tree)


def _dotted(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr}" if base else None
    return None


def _check_node(node: ast.AST, names: list[str], expr: str, file, key) -> None:
    def refuse(what: str) -> NoReturn:
        raise BadInput(f"constraint {brief(expr)} uses {what}, which constraints do not allow; "
                       f"allowed: {EXPR_RULE}", file=file, key=key)

    if isinstance(node, (ast.Name, ast.Attribute)):
        name = _dotted(node)
        if name is None:
            refuse("an attribute of an expression")
        names.append(name)
    elif isinstance(node, ast.Constant):
        if not scalar(node.value):
            refuse(f"the constant {brief(node.value)}")
    elif isinstance(node, ast.BoolOp):
        for v in node.values:
            _check_node(v, names, expr, file, key)
    elif isinstance(node, ast.UnaryOp):
        if not isinstance(node.op, (ast.Not, ast.USub, ast.UAdd)):
            refuse(_NODE_WORDS.get(type(node.op), type(node.op).__name__))
        _check_node(node.operand, names, expr, file, key)
    elif isinstance(node, ast.BinOp):
        if type(node.op) not in _BINOPS:
            refuse(_NODE_WORDS.get(type(node.op), type(node.op).__name__))
        _check_node(node.left, names, expr, file, key)
        _check_node(node.right, names, expr, file, key)
    elif isinstance(node, ast.Compare):
        _check_node(node.left, names, expr, file, key)
        for op, comp in zip(node.ops, node.comparators):
            if type(op) not in _CMPOPS:
                refuse(_NODE_WORDS.get(type(op), type(op).__name__))
            if isinstance(op, (ast.In, ast.NotIn)):
                if not isinstance(comp, (ast.List, ast.Tuple)):
                    refuse("'in' with something other than a literal list")
                for elt in comp.elts:
                    if not isinstance(elt, ast.Constant) or not scalar(elt.value):
                        refuse("a list of something other than constants")
            else:
                _check_node(comp, names, expr, file, key)
    else:
        refuse(_NODE_WORDS.get(type(node), type(node).__name__))


def _eval(node: ast.AST, env: Mapping[str, Any]) -> Any:
    if isinstance(node, (ast.Name, ast.Attribute)):
        name = _dotted(node)
        if name is None:  # refused by _check_node
            raise ConstraintError("an attribute of an expression")
        return env[name]
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.BoolOp):
        if isinstance(node.op, ast.And):
            result: Any = True
            for v in node.values:
                result = _eval(v, env)
                if not result:
                    return result
            return result
        result = False
        for v in node.values:
            result = _eval(v, env)
            if result:
                return result
        return result
    if isinstance(node, ast.UnaryOp):
        operand = _eval(node.operand, env)
        if isinstance(node.op, ast.Not):
            return not operand
        if isinstance(operand, str):
            raise ConstraintError(f"cannot negate the string {brief(operand)}")
        return -operand if isinstance(node.op, ast.USub) else +operand
    if isinstance(node, ast.BinOp):
        left, right = _eval(node.left, env), _eval(node.right, env)
        if isinstance(left, str) or isinstance(right, str):
            if not (isinstance(node.op, ast.Add) and isinstance(left, str) and isinstance(right, str)):
                raise ConstraintError(f"arithmetic on a string ({brief(left)}, {brief(right)})")
        return _BINOPS[type(node.op)](left, right)
    if isinstance(node, ast.Compare):
        left = _eval(node.left, env)
        for op, comp in zip(node.ops, node.comparators):
            if isinstance(op, (ast.In, ast.NotIn)):
                assert isinstance(comp, (ast.List, ast.Tuple))  # of constants: _check_node allows nothing else
                right = [e.value for e in comp.elts if isinstance(e, ast.Constant)]
            else:
                right = _eval(comp, env)
                if isinstance(op, (ast.Lt, ast.LtE, ast.Gt, ast.GtE)) and (
                        isinstance(left, str) != isinstance(right, str) or left is None or right is None):
                    raise ConstraintError(f"cannot order {brief(left)} and {brief(right)}")
            if not _CMPOPS[type(op)](left, right):
                return False
            left = right
        return True
    raise ConstraintError(f"unsupported expression {ast.dump(node)}")  # guarded by _check_node
