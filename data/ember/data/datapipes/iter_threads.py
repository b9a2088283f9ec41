"""Thread-backed pipes: prefetch (a producer thread) and threadpool_map (ordered pool map).

Their state_dict holds the items already pulled from the source but not yet yielded, so a
restore continues exactly where the consumer stopped.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from ember.data.datapipes.base import IterDataPipe, PipeIterator, check_pipe, functional_datapipe
from ember.data.datapipes.iter_basic import Mapper, _SourceIterator

__all__ = ["Prefetcher", "ThreadPoolMapper"]


@functional_datapipe("prefetch")
class Prefetcher(IterDataPipe):
    """Reads up to ``buffer_size`` items ahead in a background thread."""

    def __init__(self, source_datapipe: IterDataPipe, buffer_size: int = 10) -> None:
        check_pipe(source_datapipe, "source_datapipe")
        if not isinstance(buffer_size, int) or buffer_size <= 0:
            raise ValueError(f"buffer_size must be a positive int, got {buffer_size!r}")
        self.source, self.buffer_size = source_datapipe, buffer_size

    def _iterator(self) -> PipeIterator:
        return _PrefetchIterator(self)

    def __len__(self) -> int:
        return len(self.source)


class _PrefetchIterator(_SourceIterator):
    def __init__(self, pipe) -> None:
        super().__init__(pipe)
        self.buffer: deque = deque()
        self.cond = threading.Condition()
        self.src_lock = threading.Lock()
        self.done = False
        self.error: BaseException | None = None
        self.stop = False
        self.thread: threading.Thread | None = None

    def _run(self) -> None:
        while True:
            with self.cond:
                while len(self.buffer) >= self.pipe.buffer_size and not self.stop:
                    self.cond.wait(0.1)
                if self.stop:
                    return
            with self.src_lock:
                try:
                    item = next(self.src)
                except StopIteration:
                    with self.cond:
                        self.done = True
                        self.cond.notify_all()
                    return
                except BaseException as e:  # handed to the consumer, raised there
                    with self.cond:
                        self.error = e
                        self.cond.notify_all()
                    return
                with self.cond:
                    self.buffer.append(item)
                    self.cond.notify_all()

    def _start(self) -> None:
        if self.thread is None and not self.done:
            self.stop = False
            self.thread = threading.Thread(target=self._run, name="ember-prefetch", daemon=True)
            self.thread.start()

    def __next__(self):
        self._start()
        with self.cond:
            while not self.buffer and not self.done and self.error is None:
                self.cond.wait(0.1)
            if self.buffer:
                item = self.buffer.popleft()
                self.cond.notify_all()
                return item
            if self.error is not None:
                err, self.error = self.error, None
                self.done = True
                raise err
            raise StopIteration

    def _halt(self) -> None:
        if self.thread is not None:
            with self.cond:
                self.stop = True
                self.cond.notify_all()
            self.thread.join()
            self.thread = None

    def state_dict(self) -> dict:
        with self.src_lock, self.cond:
            return {"src": self.src.state_dict(), "buffer": list(self.buffer), "done": self.done}

    def load_state_dict(self, state: dict) -> None:
        self._halt()
        self.src.load_state_dict(state["src"])
        self.buffer = deque(state["buffer"])
        self.done, self.error = state["done"], None

    def close(self) -> None:
        self._halt()
        super().close()

    def __del__(self) -> None:
        if self.thread is not None:
            self.stop = True


@functional_datapipe("threadpool_map")
class ThreadPoolMapper(Mapper):
    """``map`` run on a thread pool, in order, with up to ``scheduled_tasks`` in flight."""

    def __init__(self, source_datapipe: IterDataPipe, fn: Callable, input_col=None,
                 output_col=None, scheduled_tasks: int = 128, max_workers: int | None = None,
                 **threadpool_kwargs) -> None:
        super().__init__(source_datapipe, fn, input_col, output_col)
        if not isinstance(scheduled_tasks, int) or scheduled_tasks <= 0:
            raise ValueError(f"scheduled_tasks must be a positive int, got {scheduled_tasks!r}")
        self.scheduled_tasks, self.max_workers = scheduled_tasks, max_workers
        self.threadpool_kwargs = threadpool_kwargs

    def _iterator(self) -> PipeIterator:
        return _PoolIterator(self)


class _PoolIterator(_SourceIterator):
    def __init__(self, pipe) -> None:
        super().__init__(pipe)
        self.pool: ThreadPoolExecutor | None = None
        self.futures: deque = deque()
        self.ready: deque = deque()
        self.src_done = False

    def _fill(self) -> None:
        if self.pool is None:
            self.pool = ThreadPoolExecutor(self.pipe.max_workers, **self.pipe.threadpool_kwargs)
        while not self.src_done and len(self.futures) < self.pipe.scheduled_tasks:
            try:
                item = next(self.src)
            except StopIteration:
                self.src_done = True
                break
            self.futures.append(self.pool.submit(self.pipe.apply, item))

    def __next__(self):
        if self.ready:
            return self.ready.popleft()
        self._fill()
        if not self.futures:
            self.close()
            raise StopIteration
        return self.futures.popleft().result()

    def state_dict(self) -> dict:
        # In-flight results are finished and stored, so the restore does not map them again.
        while self.futures:
            self.ready.append(self.futures.popleft().result())
        return {"src": self.src.state_dict(), "ready": list(self.ready),
                "src_done": self.src_done}

    def load_state_dict(self, state: dict) -> None:
        self.futures.clear()
        self.src.load_state_dict(state["src"])
        self.ready = deque(state["ready"])
        self.src_done = state["src_done"]

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)
            self.pool = None
        super().close()
