"""Copy-on-read: workers reading a big list of Python strings copy its pages; a BufferList
(numpy buffers) does not. Measured as each worker's growth in unique memory (psutil USS)."""

import psutil
import pytest

from ember.data import BufferList, DataLoader2, IterDataPipe, MultiProcessingReadingService
from ember.data.datapipes.iter import IterableWrapper

# large enough that a worker's fixed costs (allocator arenas, a few 2 MB huge pages copied
# whole) stay far below a quarter of the list's growth: at 400k strings one run saw 10 MB
N = 1_200_000


class ReportMemory(IterDataPipe):
    """Yields this process's USS, then reads every item, then yields the USS again."""

    def __init__(self, data):
        self.data = data

    def __iter__(self):
        me = psutil.Process()
        yield ("before", me.memory_full_info().uss)
        total = 0
        for s in self.data:
            total += len(s)
        yield ("after", me.memory_full_info().uss)
        yield ("total", total)


def growth(data) -> tuple[int, int]:
    dl = DataLoader2(ReportMemory(data),
                     reading_service=MultiProcessingReadingService(1, timeout=60,
                                                                   multiprocessing_context="fork"))
    try:
        out = dict(dl)
    finally:
        dl.shutdown()
    return out["after"] - out["before"], out["total"]


@pytest.mark.skipif(not hasattr(psutil.Process(), "memory_full_info"), reason="no USS")
def test_buffer_list_avoids_copy_on_read():
    strings = [f"sample-{i:08d}-some-metadata" for i in range(N)]
    packed = BufferList(strings)
    assert packed[123] == strings[123] and len(packed) == N
    list_growth, total = growth(IterableWrapper(strings, deepcopy=False))
    buffer_growth, total2 = growth(IterableWrapper(packed, deepcopy=False))
    assert total == total2 == sum(map(len, strings))
    # A list of 1.2M str objects is ~100 MB of refcounted objects; reading them in the worker
    # dirties most of those pages. The packed buffer is only read, never written.
    assert list_growth > 10 * 2**20, list_growth
    assert buffer_growth < list_growth / 4, (buffer_growth, list_growth)
