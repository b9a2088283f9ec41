"""Moving a worker's output to the main process through shared memory.

Each worker owns ``prefetch`` slots: 1-D shared uint8 tensors. A produced item is pickled
with every tensor / numpy array swapped for a reference; the array bytes are copied into the
item's slot and only the small pickle crosses the pipe. A slot's shared tensor itself crosses
once (torch's fd-passing reductions) when it is created or grown. The main process copies
the arrays out and frees the slot, so slots are reused without any lifetime tracking.
"""

from __future__ import annotations

import io
import pickle
from multiprocessing.reduction import ForkingPickler

import numpy as np
import torch
import torch.multiprocessing

_ALIGN = 64
_INLINE_BELOW = 512  # bytes; smaller arrays ride in the pickle itself


def _plain(t: torch.Tensor) -> bool:
    return t.layout == torch.strided and not t.is_quantized and t.device.type == "cpu"


class _CollectingPickler(pickle.Pickler):
    def __init__(self, buf: io.BytesIO) -> None:
        super().__init__(buf, protocol=pickle.HIGHEST_PROTOCOL)
        self.arrays: list = []

    def persistent_id(self, obj):
        if isinstance(obj, torch.Tensor) and type(obj) is torch.Tensor and _plain(obj):
            if obj.numel() * obj.element_size() >= _INLINE_BELOW:
                self.arrays.append(obj)
                return ("t", len(self.arrays) - 1)
        elif type(obj) is np.ndarray and obj.dtype != object and obj.nbytes >= _INLINE_BELOW:
            self.arrays.append(obj)
            return ("n", len(self.arrays) - 1)
        return None


def _as_bytes(a) -> torch.Tensor:
    if isinstance(a, torch.Tensor):
        t = a.detach().contiguous()
        return t.reshape(-1).view(torch.uint8) if t.numel() else torch.empty(0, dtype=torch.uint8)
    return torch.from_numpy(np.ascontiguousarray(a).reshape(-1).view(np.uint8))


class SlotWriter:
    """Worker side: encodes items into this worker's slots."""

    def __init__(self, num_slots: int) -> None:
        self.slots: list[torch.Tensor | None] = [None] * num_slots

    def encode(self, item, slot: int) -> tuple:
        """Return ``(pickle bytes, array metas, new slot handle or None)``."""
        buf = io.BytesIO()
        p = _CollectingPickler(buf)
        p.dump(item)
        metas, offset, chunks = [], 0, []
        for a in p.arrays:
            raw = _as_bytes(a)
            n = raw.numel()
            if isinstance(a, torch.Tensor):
                metas.append(("t", offset, n, a.dtype, tuple(a.shape)))
            else:
                metas.append(("n", offset, n, a.dtype.str, tuple(a.shape)))
            chunks.append((offset, raw))
            offset += -(-n // _ALIGN) * _ALIGN
        handle = None
        if offset:
            cur = self.slots[slot]
            if cur is None or cur.numel() < offset:
                cur = torch.empty(max(offset, 2 * (0 if cur is None else cur.numel())),
                                  dtype=torch.uint8).share_memory_()
                self.slots[slot] = cur
                handle = bytes(ForkingPickler.dumps(cur))
            dst = cur.numpy()
            for off, raw in chunks:  # numpy memcpy: no intra-op thread pool wake-ups
                dst[off:off + raw.numel()] = raw.numpy()
        return buf.getvalue(), metas, handle


class _Unpickler(pickle.Unpickler):
    def __init__(self, data: bytes, arrays: list) -> None:
        super().__init__(io.BytesIO(data))
        self.arrays = arrays

    def persistent_load(self, pid):
        return self.arrays[pid[1]]


class SlotReader:
    """Main side: decodes items from one worker's slots (copying arrays out)."""

    def __init__(self, num_slots: int, pin_memory: bool = False) -> None:
        self.slots: list[torch.Tensor | None] = [None] * num_slots
        self.pin_memory = pin_memory

    def decode(self, data: bytes, metas: list, handle: bytes | None, slot: int):
        if handle is not None:
            self.slots[slot] = pickle.loads(handle)
        arrays = []
        src = self.slots[slot].numpy() if metas else None
        for kind, off, n, dtype, shape in metas:
            # A numpy copy is one memcpy; torch's clone may wake its thread pool per call,
            # which costs milliseconds on a loaded machine.
            raw = src[off:off + n].copy()
            if kind == "t":
                t = torch.from_numpy(raw).view(dtype).reshape(shape) if n else torch.empty(
                    shape, dtype=dtype)
                arrays.append(t.pin_memory() if self.pin_memory else t)
            else:
                arrays.append(raw.view(np.dtype(dtype)).reshape(shape))
        return _Unpickler(data, arrays).load()
