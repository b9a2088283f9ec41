"""Symbolic expressions over a DataFrame's columns: ``df[me["a"] > 3]``.

``me["a"]`` stands for column ``a`` of whatever frame the expression is applied to; any
operator or method call on it is recorded and replayed on the real columns by ``bind``.
"""

from __future__ import annotations

from typing import Any


class Expression:
    """A recorded computation: a column reference, an attribute, a call or an operator."""

    __slots__ = ("_kind", "_args")
    __hash__ = None  # type: ignore[assignment]

    def __init__(self, kind: str, *args: Any):
        self._kind, self._args = kind, args

    def __getattr__(self, name: str) -> Expression:
        if name.startswith("__"):
            raise AttributeError(name)
        return Expression("attr", self, name)

    def __call__(self, *args, **kwargs) -> Expression:
        return Expression("call", self, args, kwargs)

    def __getitem__(self, key) -> Expression:
        return Expression("op", "__getitem__", self, key)

    def __bool__(self):
        raise ValueError("an Expression has no truth value; use & | ~ instead of and/or/not")

    def __repr__(self) -> str:
        k, a = self._kind, self._args
        if k == "col":
            return f"me[{a[0]!r}]"
        if k == "attr":
            return f"{a[0]!r}.{a[1]}"
        if k == "call":
            parts = [repr(x) for x in a[1]] + [f"{n}={v!r}" for n, v in a[2].items()]
            return f"{a[0]!r}({', '.join(parts)})"
        return f"{a[1]!r}.{a[0]}({', '.join(repr(x) for x in a[2:])})"


def _op(name: str):
    def method(self, *others):
        return Expression("op", name, self, *others)

    method.__name__ = name
    return method


for _name in ("add", "radd", "sub", "rsub", "mul", "rmul", "truediv", "rtruediv", "floordiv",
              "rfloordiv", "mod", "rmod", "pow", "rpow", "eq", "ne", "lt", "le", "gt", "ge",
              "and", "rand", "or", "ror", "xor", "rxor", "invert", "neg", "abs"):
    setattr(Expression, f"__{_name}__", _op(f"__{_name}__"))


class _Me:
    """``me["name"]`` refers to column ``name`` of the frame an expression is bound to."""

    def __getitem__(self, name: str) -> Expression:
        if not isinstance(name, str):
            raise TypeError(f"me[...] takes a column name, got {type(name).__name__}")
        return Expression("col", name)

    def __repr__(self) -> str:
        return "me"


me = _Me()


def bind(value: Any, frame) -> Any:
    """Replay ``value`` (an Expression, or anything holding them) on ``frame``'s columns."""
    if isinstance(value, (list, tuple)):
        return type(value)(bind(v, frame) for v in value)
    if isinstance(value, dict):
        return {k: bind(v, frame) for k, v in value.items()}
    if not isinstance(value, Expression):
        return value
    k, a = value._kind, value._args
    if k == "col":
        return frame[a[0]]
    if k == "attr":
        return getattr(bind(a[0], frame), a[1])
    if k == "call":
        return bind(a[0], frame)(*bind(a[1], frame), **bind(a[2], frame))
    target = bind(a[1], frame)
    result = getattr(target, a[0])(*bind(a[2:], frame))
    if result is NotImplemented:
        raise TypeError(f"operator {a[0]} is not supported for {type(target).__name__}")
    return result
