"""Extension points: how modules built on ``column`` and ``dataframe`` add to their classes.

pandas' accessor pattern: ``dataframe``, ``accessors``, ``interop`` and ``tensor`` register
accessors, methods and converters here when they are imported (``ember.arrow`` imports them
all), so Column and DataFrame never import the modules that extend them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class Accessor:
    """``obj.<name>``: ``methods(obj)`` when ``accepts(obj.dtype)``, else a TypeError that says
    which dtype it ``needs``; on the class, the methods class itself (for ``help``)."""

    def __init__(self, name: str, methods: type, accepts: Callable[[Any], bool], needs: str):
        self._name, self._methods, self._accepts, self._needs = name, methods, accepts, needs
        self.__doc__ = methods.__doc__

    def __get__(self, obj, owner=None):
        if obj is None:
            return self._methods
        if not self._accepts(obj.dtype):
            raise TypeError(f".{self._name} needs {self._needs}, got {obj.dtype}")
        return self._methods(obj)


def register_accessor(owner: type, name: str, accepts: Callable[[Any], bool], needs: str):
    """Class decorator: the class becomes accessor ``owner.<name>`` (as ``col.str``)."""

    def decorate(methods: type) -> type:
        setattr(owner, name, Accessor(name, methods, accepts, needs))
        return methods

    return decorate


def register_method(*owners: type, name: str | None = None):
    """Function decorator: the function becomes method ``name`` (default: its own name) of
    every owner; it is returned unchanged, so it stays a module-level function too."""

    def decorate(fn: Callable) -> Callable:
        for owner in owners:
            setattr(owner, name or fn.__name__, fn)
        return fn

    return decorate


_CONVERTERS: dict[str, Callable] = {}


def register_converter(fn: Callable) -> Callable:
    """Function decorator: ``fn`` (``from_pandas``, ``from_tensor``, ...) becomes
    ``converter(fn.__name__)`` for the constructors, which sit below the module defining it."""
    _CONVERTERS[fn.__name__] = fn
    return fn


def converter(name: str) -> Callable:
    """The converter registered under ``name`` (``ember.arrow`` registers all at import)."""
    return _CONVERTERS[name]


_DEFERRING: tuple[type, ...] = ()


def defer_column_operators(cls: type) -> type:
    """Class decorator: ``column <op> obj`` returns NotImplemented for ``cls`` instances, so
    Python calls ``cls``'s reflected operator (a DataFrame applies it to every column)."""
    global _DEFERRING
    _DEFERRING += (cls,)
    return cls


def defers_column_operators(obj) -> bool:
    """Whether ``obj``'s own reflected operators take ``column <op> obj`` over."""
    return isinstance(obj, _DEFERRING)
