"""The ahead-of-time package file: one uncompressed zip (``.pt2``) that both loaders read.

Members: ``manifest.txt`` (one record per line, what the C++ loader reads), ``metadata.json``
(the same plus the call's pytree specs, for Python), ``model.so`` (kernels and the C++
wrapper, linked against libtorch), ``weights.bin`` (every weight and constant, each at a
64-byte aligned offset; weights may be left out), and ``source/`` (the generated C++, for
reading). Every member is checked against its zip CRC-32 when read, so a truncated or altered
package is refused before anything is loaded from it.
"""

from __future__ import annotations

import io
import json
import mmap
import os
import struct
import zipfile
import zlib
from dataclasses import asdict, dataclass, field

import torch

FORMAT = 2  # 2: weights may be stored channels-last
ENTRY = "ember_aot_run"  # the library's C entry (codegen/cpp_wrapper.py renders it)
RELEASE = "ember_aot_release"  # the C entry a loader calls as its model goes
ALIGN = 64
MANIFEST, METADATA, LIBRARY, WEIGHTS = "manifest.txt", "metadata.json", "model.so", "weights.bin"
DTYPES = {
    "float32": torch.float32, "float64": torch.float64, "float16": torch.float16,
    "bfloat16": torch.bfloat16, "int64": torch.int64, "int32": torch.int32,
    "int16": torch.int16, "int8": torch.int8, "uint8": torch.uint8, "bool": torch.bool,
    "complex64": torch.complex64, "complex128": torch.complex128,
}
DTYPE_NAMES = {v: k for k, v in DTYPES.items()}


class PackageError(ValueError):
    """A package that cannot be used here: unreadable, altered, or built for another
    Ember, torch or instruction set."""


@dataclass
class Arg:
    """One entry of the wrapper's argument array (placeholders, then lowering constants)."""

    kind: str  # "weight" | "constant" | "input"
    name: str  # state_dict key, constant name or input name
    dtype: str = ""
    size: list = field(default_factory=list)  # ints, or size expressions (str) for inputs
    offset: int = -1  # in weights.bin; -1: not in the package
    nbytes: int = 0
    channels_last: bool = False  # a 4-D weight stored (and handed to the wrapper) as NHWC


@dataclass
class Metadata:
    ember_version: str
    torch_version: str
    isa: str  # the x86-64 level the library was built for ("native" off x86)
    isa_needs: list  # CPU flags that level needs
    args: list  # Arg records
    n_outputs: int
    ranges: dict  # size symbol -> [lo, hi]
    in_spec: str  # torch.utils._pytree.treespec_dumps of the call's (args, kwargs)
    out_spec: str
    weights_included: bool
    format: int = FORMAT

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1)

    @classmethod
    def from_json(cls, text: str) -> Metadata:
        d = json.loads(text)
        d["args"] = [Arg(**a) for a in d["args"]]
        return cls(**d)


def manifest(meta: Metadata) -> str:
    """The C++ loader's view of the metadata: whitespace-separated records, one per line."""
    lines = [f"ember-aot {meta.format}", f"ember {meta.ember_version}",
             f"torch {meta.torch_version}", " ".join(["isa", meta.isa, *meta.isa_needs]),
             f"outputs {meta.n_outputs}", f"weights {int(meta.weights_included)}"]
    for i, a in enumerate(meta.args):
        if a.kind == "input":
            lines.append(f"input {i} {a.name}")
        else:
            lines.append(f"tensor {i} {a.kind} {a.name} {a.dtype} {len(a.size)} "
                         f"{' '.join(map(str, a.size))} {a.offset} {a.nbytes} "
                         f"{int(a.channels_last)}".replace("  ", " "))
    return "\n".join(lines) + "\n"


def layout(a: Arg) -> torch.memory_format:
    return torch.channels_last if a.channels_last else torch.contiguous_format


def memory_order(t: torch.Tensor, a: Arg) -> torch.Tensor:
    """``t``'s elements as one contiguous tensor in the memory order ``a`` asks for."""
    t = t.contiguous(memory_format=layout(a))
    return t.permute(0, 2, 3, 1) if a.channels_last else t


def weights_blob(meta: Metadata, tensors: list, include_weights: bool) -> bytes:
    """Lay the tensors out (in their memory order, aligned) and record each offset in
    ``meta.args``."""
    out = io.BytesIO()
    for a, t in zip(meta.args, tensors):
        if t is None or (a.kind == "weight" and not include_weights):
            continue
        pad = (-out.tell()) % ALIGN
        out.write(b"\0" * pad)
        data = memory_order(t.detach().cpu(), a)
        raw = data.reshape(-1).view(torch.uint8).numpy().tobytes() if data.numel() else b""
        a.offset, a.nbytes = out.tell(), len(raw)
        out.write(raw)
    return out.getvalue()


def _aligned(z: zipfile.ZipFile, name: str) -> zipfile.ZipInfo:
    """A stored member whose data starts ALIGN bytes into the file from the next local
    header, padded by an extra field (zipalign's idea): weights mapped from the file are then
    aligned for every dtype (a complex128 tensor at an odd address crashes ATen's copies)."""
    info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
    info.compress_type = zipfile.ZIP_STORED
    start = z.fp.tell() + 30 + len(name.encode()) + 4  # local header, name, extra header
    pad = (-start) % ALIGN
    info.extra = struct.pack("<HH", 0xD935, pad) + b"\0" * pad
    return info


def write(path: str, meta: Metadata, library: bytes, weights: bytes,
          sources: dict[str, str]) -> None:
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED, allowZip64=False) as z:
        z.writestr(MANIFEST, manifest(meta))
        z.writestr(METADATA, meta.to_json())
        z.writestr(LIBRARY, library)
        z.writestr(_aligned(z, WEIGHTS), weights)
        for name, text in sources.items():
            z.writestr(f"source/{name}", text)


@dataclass
class Contents:
    meta: Metadata
    library: memoryview
    weights: memoryview  # writable (a private copy-on-write mapping of the file)


def _member(z: zipfile.ZipFile, mapped: mmap.mmap, name: str) -> memoryview:
    """A stored member as a view of the mapped file, after its CRC-32 matched."""
    info = z.getinfo(name)
    if info.compress_type != zipfile.ZIP_STORED or info.compress_size != info.file_size:
        raise PackageError(f"member {name} is compressed; packages store members as they are")
    header = mapped[info.header_offset:info.header_offset + 30]
    if len(header) < 30 or header[:4] != b"PK\x03\x04":
        raise PackageError(f"member {name} has no local header")
    start = info.header_offset + 30 + int.from_bytes(header[26:28], "little") + \
        int.from_bytes(header[28:30], "little")
    if start + info.file_size > len(mapped):
        raise PackageError(f"member {name} runs past the end of the file (truncated?)")
    view = memoryview(mapped)[start:start + info.file_size]
    if zlib.crc32(view) != info.CRC:
        raise PackageError(f"member {name} fails its CRC-32 check (the file was altered)")
    return view


def read(path: str) -> Contents:
    """Read and check a package; any damage raises :class:`PackageError` naming it.

    The file is mapped copy-on-write: weights become tensors over the mapping without a
    copy, and every member is checked against its CRC-32 first."""
    try:
        with open(path, "rb") as f:
            if os.fstat(f.fileno()).st_size == 0:
                raise PackageError(f"{path} is damaged or not an Ember package: empty file")
            mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
        with zipfile.ZipFile(path) as z:
            names = set(z.namelist())
            missing = {MANIFEST, METADATA, LIBRARY, WEIGHTS} - names
            if missing:
                raise PackageError(f"{path} is not an Ember package (no "
                                   f"{', '.join(sorted(missing))})")
            meta = Metadata.from_json(bytes(_member(z, mapped, METADATA)).decode())
            return Contents(meta, _member(z, mapped, LIBRARY), _member(z, mapped, WEIGHTS))
    except PackageError as e:
        if str(e).startswith(path):
            raise
        raise PackageError(f"{path} is damaged or not an Ember package: {e}") from e
    except FileNotFoundError as e:
        raise PackageError(f"no package at {path}") from e
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, OSError, KeyError,
            ValueError, TypeError, UnicodeDecodeError) as e:
        raise PackageError(f"{path} is damaged or not an Ember package: "
                           f"{type(e).__name__}: {e}") from e
