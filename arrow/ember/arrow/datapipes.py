"""DataPipe integration (torchdata's names): rows to DataFrames, Parquet and CSV loaders.

``pipe.dataframe(dataframe_size=...)`` batches rows into DataFrames;
``pipe.load_parquet_as_df()`` yields one DataFrame per Parquet row group and
``pipe.load_csv_as_df()`` one per CSV file (or per ``dataframe_size`` rows). The results
are ordinary pipe items, so they shard, shuffle and load through DataLoader2 as any other.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from ember.arrow import dtypes as dt
from ember.arrow.column import Column
from ember.arrow.dataframe import DataFrame, dataframe
from ember.arrow.interop import from_arrow
from ember.data.datapipes import IterDataPipe, functional_datapipe
from ember.data.datapipes.iter_basic import Batcher, FlatMapper, Mapper

__all__ = ["CSVDFLoader", "DataFrameMaker", "ParquetDFLoader"]


def _check_struct(dtype, name: str) -> None:
    if dtype is not None and not isinstance(dtype, dt.Struct):
        raise TypeError(f"{name}: dtype must be an ember.arrow Struct, got {dtype!r}")


class _RowsToFrame:
    """Picklable batch -> DataFrame function (DataLoader2 workers pickle the graph)."""

    def __init__(self, dtype: dt.Struct | None, columns: Sequence[str] | None):
        self.dtype, self.columns = dtype, None if columns is None else list(columns)

    def __call__(self, rows: list) -> DataFrame:
        if self.dtype is not None:
            return dataframe(rows, dtype=self.dtype)
        if rows and all(isinstance(r, dict) for r in rows):
            names = self.columns or list(rows[0])
            return dataframe({n: [r.get(n) for r in rows] for n in names})
        if self.columns is None:
            names = getattr(rows[0], "_fields", None) if rows else None
            if names is None:
                raise TypeError("dataframe(): rows that are not dicts or named tuples need "
                                "dtype= or columns=")
            return dataframe(rows, columns=names)
        return dataframe(rows, columns=self.columns)


@functional_datapipe("dataframe")
class DataFrameMaker(IterDataPipe):
    """Groups rows (dicts, tuples, named tuples) into DataFrames of ``dataframe_size`` rows."""

    def __init__(self, source_dp: IterDataPipe, dataframe_size: int = 1000,
                 dtype: dt.Struct | None = None, columns: Sequence[str] | None = None) -> None:
        if not isinstance(source_dp, IterDataPipe):
            raise TypeError(f"source_dp must be an IterDataPipe, got {type(source_dp).__name__}")
        if not isinstance(dataframe_size, int) or dataframe_size <= 0:
            raise ValueError(f"dataframe_size must be a positive int, got {dataframe_size!r}")
        _check_struct(dtype, "dataframe()")
        self.source, self.dataframe_size = source_dp, dataframe_size
        self.dtype, self.columns = dtype, columns

    def _iterator(self):
        pipe = Mapper(Batcher(self.source, self.dataframe_size),
                      _RowsToFrame(self.dtype, self.columns))
        return pipe._iterator()


def _open(item) -> tuple[str, Any]:
    """A pipe item as (name, source): a path, or ``(path, stream)`` from ``open_files``."""
    if isinstance(item, tuple) and len(item) == 2:
        return str(item[0]), item[1]
    return str(item), str(item)


class _ParquetFrames:
    def __init__(self, dtype, columns, use_threads: bool):
        self.dtype, self.columns, self.use_threads = dtype, columns, use_threads

    def __call__(self, item) -> list[DataFrame]:
        import pyarrow.parquet as pq

        name, src = _open(item)
        try:
            f = pq.ParquetFile(src)
            tables = [f.read_row_group(i, columns=self.columns, use_threads=self.use_threads)
                      for i in range(f.num_row_groups)]
        except (pa.ArrowException, OSError) as e:
            raise RuntimeError(f"load_parquet_as_df(): cannot read {name!r}: {e}") from None
        return [_finish(from_arrow(t), self.dtype, name) for t in tables]


def _finish(df: DataFrame, dtype, name: str) -> DataFrame:
    if dtype is None:
        return df
    try:
        return df.cast(dtype)
    except (TypeError, ValueError) as e:
        raise type(e)(f"{name!r}: {e}") from None


@functional_datapipe("load_parquet_as_df")
class ParquetDFLoader(IterDataPipe):
    """Reads Parquet files (paths or ``(path, stream)``) into one DataFrame per row group."""

    def __init__(self, source_dp: IterDataPipe, dtype: dt.Struct | None = None,
                 columns: Sequence[str] | None = None, use_threads: bool = False) -> None:
        if not isinstance(source_dp, IterDataPipe):
            raise TypeError(f"source_dp must be an IterDataPipe, got {type(source_dp).__name__}")
        _check_struct(dtype, "load_parquet_as_df()")
        self.source, self.dtype = source_dp, dtype
        self.columns, self.use_threads = None if columns is None else list(columns), use_threads

    def _iterator(self):
        fn = _ParquetFrames(self.dtype, self.columns, self.use_threads)
        return FlatMapper(self.source, fn)._iterator()


class _CSVFrames:
    def __init__(self, dtype, columns, dataframe_size, delimiter: str):
        self.dtype, self.columns = dtype, columns
        self.dataframe_size, self.delimiter = dataframe_size, delimiter

    def __call__(self, item) -> list[DataFrame]:
        import pyarrow.csv as csv

        name, src = _open(item)
        types = None if self.dtype is None else {
            f.name: dt.to_arrow_type(f.dtype) for f in self.dtype.fields}
        try:
            table = csv.read_csv(
                src, parse_options=csv.ParseOptions(delimiter=self.delimiter),
                convert_options=csv.ConvertOptions(column_types=types, strings_can_be_null=True,
                                                   include_columns=self.columns))
        except (pa.ArrowException, OSError) as e:
            raise RuntimeError(f"load_csv_as_df(): cannot read {name!r}: {e}") from None
        size = self.dataframe_size or max(table.num_rows, 1)
        parts = [table.slice(i, size) for i in range(0, table.num_rows, size)] or [table]
        return [_finish(_tight(from_arrow(p)), self.dtype, name) for p in parts]


def _tight(df: DataFrame) -> DataFrame:
    return DataFrame({n: Column(c.to_arrow()) for n, c in df._cols.items()})


@functional_datapipe("load_csv_as_df")
class CSVDFLoader(IterDataPipe):
    """Reads CSV files (with a header row) into DataFrames: one per file, or per
    ``dataframe_size`` rows."""

    def __init__(self, source_dp: IterDataPipe, dtype: dt.Struct | None = None,
                 columns: Sequence[str] | None = None, dataframe_size: int | None = None,
                 delimiter: str = ",") -> None:
        if not isinstance(source_dp, IterDataPipe):
            raise TypeError(f"source_dp must be an IterDataPipe, got {type(source_dp).__name__}")
        _check_struct(dtype, "load_csv_as_df()")
        if dataframe_size is not None and (not isinstance(dataframe_size, int)
                                           or dataframe_size <= 0):
            raise ValueError(f"dataframe_size must be a positive int, got {dataframe_size!r}")
        self.source, self.dtype, self.dataframe_size = source_dp, dtype, dataframe_size
        self.columns, self.delimiter = None if columns is None else list(columns), delimiter

    def _iterator(self):
        fn = _CSVFrames(self.dtype, self.columns, self.dataframe_size, self.delimiter)
        return FlatMapper(self.source, fn)._iterator()
