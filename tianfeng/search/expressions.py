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
ALLOWED = "numbers, strings, names, + - * / // % **, comparisons, and/or/not, x if c else y, " \
          f"and the functions {', '.join(_FUNCTIONS)}"


class ExpressionError(ValueError):
    pass


class Expression:
    """A parsed expression; `names` are the variables it reads."""

    def __init__(self, text: str) -> None:
        self.text = text
        try:
            self._tree = ast.parse(text.strip(), mode="eval").body
        except SyntaxError as exc:
            raise ExpressionError(f"cannot parse {text!r}: {exc.msg}") from None
        self.names: set[str] = set()
        self._check(self._tree)

    def _check(self, node: ast.AST) -> None:
        match node:
            case ast.Constant(value=v) if isinstance(v, int | float | str | bool):
                pass
            case ast.Name(id=name):
                self.names.add(name)
            case ast.BinOp(op=op, left=left, right=right) if type(op) in _BINARY:
                self._check(left)
                self._check(right)
            case ast.UnaryOp(op=ast.USub() | ast.UAdd() | ast.Not(), operand=operand):
                self._check(operand)
            case ast.BoolOp(values=values):
                for v in values:
                    self._check(v)
            case ast.Compare(left=left, ops=ops, comparators=rest) if all(type(o) in _COMPARE for o in ops):
                self._check(left)
                for v in rest:
                    self._check(v)
            case ast.IfExp(test=test, body=body, orelse=orelse):
                for v in (test, body, orelse):
                    self._check(v)
            case ast.Call(func=ast.Name(id=fn), args=args, keywords=[]) if fn in _FUNCTIONS:
                for v in args:
                    self._check(v)
            case _:
                raise ExpressionError(f"{self.text!r}: {ast.unparse(node)!r} is not allowed; "
                                      f"allowed: {ALLOWED}")

    def evaluate(self, variables: Mapping[str, Any]) -> Any:
        """Evaluate with `variables`; like Python, `a if c else b` and and/or only evaluate
        the branch they need, so a branch may read a parameter that is inactive."""
        try:
            return self._eval(self._tree, variables)
        except (ArithmeticError, TypeError, ValueError, OverflowError) as exc:
            raise ExpressionError(f"{self.text!r}: {exc}") from None

    def _eval(self, node: ast.AST, env: Mapping[str, Any]) -> Any:
        match node:
            case ast.Constant(value=v):
                return v
            case ast.Name(id=name):
                if name not in env:
                    raise ExpressionError(f"{self.text!r}: {name!r} has no value here")
                return env[name]
            case ast.BinOp(op=ast.Pow(), left=left, right=right):
                base, exponent = self._eval(left, env), self._eval(right, env)
                if abs(exponent) > 64:  # keeps `10 ** 10 ** 10` from hanging the loader
                    raise ExpressionError(f"{self.text!r}: exponent {exponent} is too large")
                return base**exponent
            case ast.BinOp(op=op, left=left, right=right):
                return _BINARY[type(op)](self._eval(left, env), self._eval(right, env))
            case ast.UnaryOp(op=ast.USub(), operand=x):
                return -self._eval(x, env)
            case ast.UnaryOp(op=ast.UAdd(), operand=x):
                return +self._eval(x, env)
            case ast.UnaryOp(op=ast.Not(), operand=x):
                return not self._eval(x, env)
            case ast.BoolOp(op=ast.And(), values=values):
                return all(self._eval(v, env) for v in values)
            case ast.BoolOp(op=ast.Or(), values=values):
                return any(self._eval(v, env) for v in values)
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
                return _FUNCTIONS[fn](*(self._eval(a, env) for a in args))
        raise ExpressionError(f"{self.text!r}: cannot evaluate {ast.unparse(node)!r}")
