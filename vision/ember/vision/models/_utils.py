"""Helpers shared by the model builders (kept apart from the registry)."""

from __future__ import annotations


def fixed(kwargs: dict, **values) -> dict:
    """``kwargs`` with ``values`` set; a caller's different value for one raises, as in
    torchvision (a builder's defining hyper-parameters cannot be overridden)."""
    for key, value in values.items():
        if key in kwargs and kwargs[key] != value:
            raise ValueError(f"The parameter '{key}' expected value {value} "
                             f"but got {kwargs[key]} instead.")
    return {**kwargs, **values}


def divisible(v: float, divisor: int = 8, min_value: int | None = None) -> int:
    """Round ``v`` to a multiple of ``divisor`` (not below ``min_value``, not more than 10%
    down): the channel rounding of the MobileNet family."""
    min_value = divisor if min_value is None else min_value
    new = max(min_value, int(v + divisor / 2) // divisor * divisor)
    return new + divisor if new < 0.9 * v else new
