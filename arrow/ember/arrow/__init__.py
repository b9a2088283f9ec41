"""ember.arrow: a TorchArrow-style DataFrame for ML preprocessing, held in Arrow memory.

``dataframe``/``column`` build frames and columns (dtypes inferred as TorchArrow does),
operations run through ``pyarrow.compute`` or torch over zero-copy buffer views, and
``to_tensor`` hands the data to PyTorch without copying where the memory allows.

Importing the package imports ``accessors``, ``interop`` and ``tensor``, which attach
``.str``/``.list``/``.maps``, ``to_pandas`` and ``to_tensor`` to Column and DataFrame.
"""

from ember.arrow import (
    accessors,  # noqa: F401  (registers .str, .list, .maps on Column)
    datapipes,
    dtypes,
    functional,
)
from ember.arrow.column import Column, column
from ember.arrow.dataframe import ColumnNotFoundError, DataFrame, GroupedDataFrame, dataframe
from ember.arrow.expression import Expression, me
from ember.arrow.functional import if_else
from ember.arrow.interop import (
    from_arrow,
    from_pandas,
    from_polars,
    to_arrow,
    to_pandas,
    to_pylist,
)
from ember.arrow.lazy import set_compile_threshold
from ember.arrow.tensor import (
    PackedList,
    PackedMap,
    PadSequence,
    WithPresence,
    from_tensor,
    to_tensor,
)

__all__ = [
    "Column", "ColumnNotFoundError", "DataFrame", "Expression", "GroupedDataFrame",
    "PackedList", "PackedMap", "PadSequence", "WithPresence", "column", "dataframe",
    "datapipes", "dtypes", "from_arrow", "from_pandas", "from_polars", "from_tensor",
    "functional", "if_else", "me", "set_compile_threshold", "to_arrow", "to_pandas", "to_pylist",
    "to_tensor",
]
