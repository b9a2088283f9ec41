"""Iterable pipes by class name, as ``torchdata.datapipes.iter`` exposes them."""

from ember.data.datapipes.base import IterDataPipe
from ember.data.datapipes.iter_archive import (
    ArchiveMemberTooLarge,
    TarArchiveLoader,
    UnsafeArchiveError,
    ZipArchiveLoader,
)
from ember.data.datapipes.iter_basic import (
    Batcher,
    Collator,
    Concater,
    Cycler,
    Enumerator,
    Filter,
    FlatMapper,
    Header,
    IterableWrapper,
    Mapper,
    Multiplexer,
    MultiplexerLongest,
    ShardingFilter,
    UnBatcher,
    Zipper,
)
from ember.data.datapipes.iter_cache import (
    EndOnDiskCacheHolder,
    InMemoryCacheHolder,
    OnDiskCacheHolder,
)
from ember.data.datapipes.iter_combine import Demultiplexer, Forker
from ember.data.datapipes.iter_files import (
    CSVParser,
    FileLister,
    FileOpener,
    JsonParser,
    LineReader,
)
from ember.data.datapipes.iter_group import Grouper
from ember.data.datapipes.iter_random import (
    BucketBatcher,
    InBatchShuffler,
    RandomSplitter,
    Shuffler,
)
from ember.data.datapipes.iter_threads import Prefetcher, ThreadPoolMapper
from ember.data.datapipes.map_pipes import MapShuffler, MapToIterConverter

__all__ = [
    "ArchiveMemberTooLarge", "Batcher", "BucketBatcher", "CSVParser", "Collator", "Concater",
    "Cycler", "Demultiplexer",
    "EndOnDiskCacheHolder", "Enumerator", "FileLister", "FileOpener", "Filter", "FlatMapper",
    "Forker", "Grouper", "Header", "InBatchShuffler", "InMemoryCacheHolder", "IterDataPipe",
    "IterableWrapper", "JsonParser", "LineReader", "MapShuffler", "MapToIterConverter", "Mapper",
    "Multiplexer", "MultiplexerLongest", "OnDiskCacheHolder", "Prefetcher", "RandomSplitter",
    "ShardingFilter", "Shuffler", "TarArchiveLoader", "ThreadPoolMapper", "UnBatcher",
    "UnsafeArchiveError", "ZipArchiveLoader", "Zipper",
]
