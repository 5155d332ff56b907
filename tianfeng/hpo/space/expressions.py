"""A small, safe expression language for derived values and conditions in search spaces,
e.g. `base_lr * batch_size / 256` or `optimizer == 'lars'`. Parsed with `ast`, evaluated by
walking a whitelist of node types: no attribute access, no subscripts, no `eval`."""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Mapping
from typing import Any

_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
           ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
           ast.Pow: operator.pow}
_COMPARE = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
            ast.Gt: operator.gt, ast.GtE: operator.ge}
_FUNCTIONS = {"min": min, "max": max, "round": round, "int": int, "float": float, "abs": abs,
              "sqrt": math.sqrt, "log": math.log, "log2": math.log2, "exp": math.exp}
MAX_TEXT = 1000  # characters of an expression
MAX_DEPTH = 40  # nesting of its syntax tree
MAX_INT = 2**63  # the largest integer any step may produce
MAX_STRING = 1000  # the longest string any step may produce
ALLOWED = "numbers, strings, names, + - * / // % **, comparisons, and/or/not, x if c else y, " \
          f"[lists of these] and the functions {', '.join(_FUNCTIONS)}"


class ExpressionError(ValueError):
    pass


class Expression:
    """A parsed expression; `names` are the variables it reads."""

    def __init__(self, text: str) -> None:
        self.text = text
        if len(text) > MAX_TEXT:
            raise ExpressionError(f"{text[:40]!r}...: longer than {MAX_TEXT} characters")
        try:
            self._tree = ast.parse(text.strip(), mode="eval").body
        except (SyntaxError, RecursionError, MemoryError) as exc:
            raise ExpressionError(f"cannot parse {text[:80]!r}: {getattr(exc, 'msg', 'too deeply nested')}") from None
        self.names: set[str] = set()
        self._check(self._tree, 0)

    def __eq__(self, other: object) -> bool:  # the same text is the same expression (a pickled space's too)
        return isinstance(other, Expression) and other.text == self.text

    def __hash__(self) -> int:
        return hash(self.text)

    def _check(self, node: ast.AST, depth: int) -> None:
        if depth > MAX_DEPTH:
            raise ExpressionError(f"{self.text[:80]!r}: nested more than {MAX_DEPTH} levels deep")
        depth += 1
        match node:
            case ast.Constant(value=v) if isinstance(v, int | float | str | bool):
                pass
            case ast.Name(id=name):
                self.names.add(name)
            case ast.BinOp(op=op, left=left, right=right) if type(op) in _BINARY:
                self._check(left, depth)
                self._check(right, depth)
            case ast.UnaryOp(op=ast.USub() | ast.UAdd() | ast.Not(), operand=operand):
                self._check(operand, depth)
            case ast.BoolOp(values=values):
                for v in values:
                    self._check(v, depth)
            case ast.Compare(left=left, ops=ops, comparators=rest) if all(type(o) in _COMPARE for o in ops):
                self._check(left, depth)
                for v in rest:
                    self._check(v, depth)
            case ast.IfExp(test=test, body=body, orelse=orelse):
                for v in (test, body, orelse):
                    self._check(v, depth)
            case ast.Call(func=ast.Name(id=fn), args=args, keywords=[]) if fn in _FUNCTIONS:
                for v in args:
                    self._check(v, depth)
            case ast.List(elts=items):  # a literal list, e.g. step milestones
                for v in items:
                    self._check(v, depth)
            case _:
                raise ExpressionError(f"{self.text!r}: {ast.unparse(node)!r} is not allowed; "
                                      f"allowed: {ALLOWED}")

    def evaluate(self, variables: Mapping[str, Any]) -> Any:
        """Evaluate with `variables`; like Python, `a if c else b` and and/or only evaluate
        the branch they need, so a branch may read a parameter that is inactive."""
        try:
            return self._eval(self._tree, variables)
        except ExpressionError:
            raise
        except (ArithmeticError, TypeError, ValueError, OverflowError) as exc:
            raise ExpressionError(f"{self.text!r}: {exc}") from None

    def _bounded(self, value: Any) -> Any:
        """Every intermediate value stays small: no step may build a huge integer or string."""
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_INT:
            raise ExpressionError(f"{self.text!r}: an intermediate value exceeds 2**63")
        if isinstance(value, str) and len(value) > MAX_STRING:
            raise ExpressionError(f"{self.text!r}: an intermediate string exceeds {MAX_STRING} characters")
        if isinstance(value, float) and not math.isfinite(value):
            raise ExpressionError(f"{self.text!r}: gives {value}, not a finite number")
        return value

    def _eval(self, node: ast.AST, env: Mapping[str, Any]) -> Any:
        match node:
            case ast.Constant(value=v):
                return self._bounded(v)
            case ast.Name(id=name):
                if name not in env:
                    raise ExpressionError(f"{self.text!r}: {name!r} has no value here")
                return env[name]
            case ast.BinOp(op=op, left=left, right=right):
                a, b = self._eval(left, env), self._eval(right, env)
                self._check_operands(op, a, b)
                return self._bounded(_BINARY[type(op)](a, b))
            case ast.UnaryOp(op=ast.USub(), operand=x):
                return -self._eval(x, env)
            case ast.UnaryOp(op=ast.UAdd(), operand=x):
                return +self._eval(x, env)
            case ast.UnaryOp(op=ast.Not(), operand=x):
                return not self._eval(x, env)
            case ast.BoolOp(op=op, values=values):
                # as in Python: the first false (and) or true (or) operand, else the last
                stop = (lambda v: not v) if isinstance(op, ast.And) else bool
                for v in values[:-1]:
                    value = self._eval(v, env)
                    if stop(value):
                        return value
                return self._eval(values[-1], env)
            case ast.Compare(left=left, ops=ops, comparators=rest):
                current = self._eval(left, env)
                for op, right in zip(ops, rest, strict=True):
                    value = self._eval(right, env)
                    if not _COMPARE[type(op)](current, value):
                        return False
                    current = value
                return True
            case ast.IfExp(test=test, body=body, orelse=orelse):
                return self._eval(body, env) if self._eval(test, env) else self._eval(orelse, env)
            case ast.Call(func=ast.Name(id=fn), args=args):
                return self._bounded(_FUNCTIONS[fn](*(self._eval(a, env) for a in args)))
            case ast.List(elts=items):
                return [self._eval(v, env) for v in items]
        raise ExpressionError(f"{self.text!r}: cannot evaluate {ast.unparse(node)!r}")

    def _check_operands(self, op: ast.operator, a: Any, b: Any) -> None:
        """Refuse, before computing it, what would be too large to compute."""
        if isinstance(a, list) or isinstance(b, list):
            raise ExpressionError(f"{self.text!r}: lists are written out, not computed with {type(op).__name__}")
        if isinstance(a, str) or isinstance(b, str):
            if isinstance(op, ast.Mod):
                raise ExpressionError(f"{self.text!r}: % does not format strings here")
            if isinstance(op, ast.Mult):
                text, times = (a, b) if isinstance(a, str) else (b, a)
                if isinstance(times, int) and len(text) * max(times, 0) > MAX_STRING:
                    raise ExpressionError(f"{self.text!r}: an intermediate string exceeds {MAX_STRING} characters")
        if isinstance(op, ast.Pow) and isinstance(a, int) and isinstance(b, int | float) and (
                abs(b) > 64 or (b > 0 and abs(a) > 1 and math.log2(abs(a)) * b > 63)):
            raise ExpressionError(f"{self.text!r}: {a} ** {b} is too large")
        if isinstance(op, ast.Pow) and isinstance(a, float) and abs(b) > 1024:
            raise ExpressionError(f"{self.text!r}: exponent {b} is too large")
