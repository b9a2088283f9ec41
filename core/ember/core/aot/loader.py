"""``aot_load``: run a package from Python. Nothing is compiled: the package's library is
mapped from memory (``memfd``), its weights are read once, and each call hands the wrapper's
C entry ``at::Tensor`` handles of the weights and the caller's tensors."""

from __future__ import annotations

import ctypes
import os
import threading

import torch
from torch.utils import _pytree as pytree

from ember.core import __version__
from ember.core.aot import package
from ember.core.aot.package import PackageError
from ember.core.compiler.runtime import isa

_ERR_LEN = 4096
# torch's AOTInductor helpers pass at::Tensor* handles as PyCapsules (name NULL)
_capsule_ptr = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_ptr.restype, _capsule_ptr.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]


class AOTInputError(ValueError):
    """A call's inputs (or supplied weights) do not match what the package was built for."""


def check_compatible(meta: package.Metadata, path: str) -> None:
    """Refuse a package this Ember, torch or CPU cannot run, naming the difference."""
    if meta.format != package.FORMAT:
        raise PackageError(f"{path}: package format {meta.format}, this Ember reads "
                           f"{package.FORMAT}")
    if meta.ember_version != __version__:
        raise PackageError(f"{path} was built by Ember {meta.ember_version}; this is Ember "
                           f"{__version__}: rebuild it with aot_compile")
    if meta.torch_version != torch.__version__:
        raise PackageError(f"{path} was built against torch {meta.torch_version}; this "
                           f"process has torch {torch.__version__}: rebuild it")
    why = isa.cannot_run(meta.isa_needs) if meta.isa in isa.LEVELS else None
    if why:
        raise PackageError(f"{path} was built for {meta.isa}; {why}")


def _map_library(data: memoryview, name: str) -> ctypes.CDLL:
    """dlopen ``data`` from an anonymous memory file, through a symlink of a name used once.

    The dynamic loader hands back an already loaded library whose path string matches, and
    ``/proc/self/fd/N`` repeats as soon as descriptor N is reused: every package would run
    the first one's code. A fresh private directory per load makes the name unique; the
    memory file's inode stays unique while its library is mapped."""
    import tempfile

    d = tempfile.mkdtemp(prefix="ember-aot-")
    link = os.path.join(d, "model.so")
    try:
        if hasattr(os, "memfd_create"):
            fd = os.memfd_create(name, getattr(os, "MFD_CLOEXEC", 0))
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
                os.symlink(f"/proc/{os.getpid()}/fd/{fd}", link)
                return ctypes.CDLL(link)
            finally:
                os.close(fd)
        with open(link, "wb") as f:
            f.write(data)
        return ctypes.CDLL(link)
    finally:
        if os.path.lexists(link):
            os.unlink(link)
        os.rmdir(d)


def _tensor(blob: memoryview, a: package.Arg) -> torch.Tensor:
    """A packaged tensor as a view of the mapped package (copy-on-write: no copy at load)."""
    dtype = package.DTYPES[a.dtype]
    if a.nbytes == 0:
        return torch.empty(a.size, dtype=dtype)
    if a.offset + a.nbytes > len(blob):
        raise PackageError(f"weight {a.name!r} lies outside the package's weights")
    raw = torch.frombuffer(blob, dtype=torch.uint8, count=a.nbytes, offset=a.offset)
    # the writer aligns every weight; an offset that is not (a hand-edited package) would
    # crash ATen's kernels, which need elements at their natural alignment (complex128 at an
    # odd address crashes a copy): such bytes are copied into fresh, aligned memory
    if raw.data_ptr() % dtype.itemsize:
        raw = raw.clone()
    t = raw.view(dtype)
    if a.channels_last:  # stored NHWC
        if len(a.size) != 4:
            raise PackageError(f"weight {a.name!r}: channels-last but {len(a.size)}-D")
        n, c, h, w = a.size
        return t.reshape(n, h, w, c).permute(0, 3, 1, 2)
    return t.reshape(a.size)


class AOTModel:
    """A loaded package: call it with the model's inputs, get the model's outputs."""

    def __init__(self, path: str, weights: dict | None = None):
        contents = package.read(path)
        meta = self.meta = contents.meta
        check_compatible(meta, path)
        self.path = path
        self._in_spec = pytree.treespec_loads(meta.in_spec)
        self._out_spec = pytree.treespec_loads(meta.out_spec)
        tensors: list = []
        blob = contents.weights
        for a in meta.args:
            if a.kind == "input":
                tensors.append(None)
            elif a.kind == "weight" and weights is not None:
                tensors.append(_supplied(weights, a))
            elif a.offset < 0:
                raise AOTInputError(f"{path} was built without its weights: pass "
                                    f"aot_load(path, weights=state_dict) ({a.name!r} missing)")
            else:
                tensors.append(_tensor(blob, a))
        if weights is not None:
            known = {a.name for a in meta.args if a.kind == "weight"}
            extra = sorted(set(weights) - known)
            if extra:
                raise AOTInputError(f"weights has entries the package does not use: "
                                    f"{', '.join(extra[:5])}")
        self._tensors = tensors
        self._inputs = [i for i, a in enumerate(meta.args) if a.kind == "input"]
        self._lib = _map_library(contents.library, os.path.basename(path))
        self._run = getattr(self._lib, package.ENTRY)
        self._run.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p,
                              ctypes.c_int64]
        self._run.restype = ctypes.c_int
        aoti = torch._C._aoti
        self._alloc, self._steal = (aoti.unsafe_alloc_void_ptrs_from_tensors,
                                    aoti.alloc_tensors_by_stealing_from_void_ptrs)
        # the weights' handles live as long as the model: a call only makes its inputs'
        self._weight_handles = self._alloc([t for t in tensors if t is not None])
        ptrs = iter([_capsule_ptr(h, None) for h in self._weight_handles])
        self._arg_ptrs = [None if t is None else next(ptrs) for t in tensors]
        # positional tensors only: the call skips flattening (the spec it would get is this)
        n = len(self._inputs)
        self._positional = self._in_spec == pytree.tree_flatten((tuple(range(n)), {}))[1]
        self._single_out = self._out_spec.is_leaf()
        self._scratch = threading.local()

    def __del__(self):
        release = getattr(getattr(self, "_lib", None), package.RELEASE, None)
        if release is not None:  # ctypes never unmaps a library: its caches are emptied
            release.restype = None
            release()
        handles = getattr(self, "_weight_handles", None)
        if handles:
            self._steal(handles)  # frees the handles (the tensors stay with the model)

    def __call__(self, *args, **kwargs):
        if (kwargs or not self._positional or len(args) != len(self._inputs)
                or not all(isinstance(x, torch.Tensor) for x in args)):
            args = self._flatten(args, kwargs)
        handles = self._alloc(args)
        arg_array, out_array, err = self._buffers()
        for pos, h in zip(self._inputs, handles):
            arg_array[pos] = _capsule_ptr(h, None)
        try:
            status = self._run(arg_array, out_array, err, _ERR_LEN)
        finally:
            self._steal(handles)  # frees the input handles (the tensors stay with the caller)
        if status != 0:
            message = err.value.decode(errors="replace")
            if status == 1:
                raise AOTInputError(message)
            if status == 3:
                raise IndexError(message)
            raise RuntimeError(f"{self.path}: {message}")
        outs = self._steal([_capsule_new(out_array[i], None, None)
                            for i in range(self.meta.n_outputs)])
        return outs[0] if self._single_out else pytree.tree_unflatten(outs, self._out_spec)

    def _flatten(self, args: tuple, kwargs: dict) -> list:
        """The call's tensors in the exported order, checked against the export's structure."""
        flat, spec = pytree.tree_flatten((args, kwargs))
        if spec != self._in_spec:
            names = ", ".join(self.meta.args[i].name for i in self._inputs)
            raise AOTInputError(f"{self.path} takes {len(self._inputs)} tensor input(s) "
                                f"({names}) as the model was exported; got {len(args)} "
                                f"positional argument(s) and keywords {sorted(kwargs)} "
                                f"(structure {spec.num_leaves} leaves)")
        for pos, x in zip(self._inputs, flat):
            if not isinstance(x, torch.Tensor):
                raise AOTInputError(f"input {self.meta.args[pos].name!r} must be a tensor, "
                                    f"got {type(x).__name__}")
        return flat

    def _buffers(self):
        """This thread's argument array (the weights' pointers filled in), output array and
        error buffer: made on the thread's first call, reused by its later calls."""
        got = getattr(self._scratch, "buffers", None)
        if got is None:
            got = ((ctypes.c_void_p * len(self._arg_ptrs))(*self._arg_ptrs),
                   (ctypes.c_void_p * max(self.meta.n_outputs, 1))(),
                   ctypes.create_string_buffer(_ERR_LEN))
            self._scratch.buffers = got
        return got


def _supplied(weights: dict, a: package.Arg) -> torch.Tensor:
    if a.name not in weights:
        raise AOTInputError(f"weights has no entry {a.name!r}")
    t = weights[a.name]
    if not isinstance(t, torch.Tensor):
        raise AOTInputError(f"weights[{a.name!r}] must be a tensor, got {type(t).__name__}")
    want = package.DTYPES[a.dtype]
    if t.dtype != want or list(t.shape) != list(a.size) or t.device.type != "cpu":
        raise AOTInputError(f"weights[{a.name!r}] must be a CPU {a.dtype} tensor of shape "
                            f"{tuple(a.size)}; got {t.dtype} {tuple(t.shape)} on {t.device}")
    return t.detach().contiguous(memory_format=package.layout(a))


def aot_load(path: str, *, weights: dict | None = None) -> AOTModel:
    """Load a package made by ``aot_compile``; ``weights`` (a state_dict) replaces the
    packaged weights or supplies those left out."""
    return AOTModel(os.fspath(path), weights)
