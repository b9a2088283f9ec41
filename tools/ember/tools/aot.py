"""`ember aot compile MODULE:FACTORY --example-shape 1,3,224,224 -o model.pt2` and
`ember aot run model.pt2 --input x.pt`: ahead-of-time packages from the command line."""

from __future__ import annotations

import argparse
import importlib
import sys
import time

DTYPES = ("float32", "bfloat16", "float64", "float16")


class CliError(ValueError):
    """A command-line argument that cannot be used, with what was wrong."""


def _factory(spec: str):
    module, sep, name = spec.partition(":")
    if not sep or not module or not name:
        raise CliError(f"expected MODULE:FACTORY (e.g. ember.vision.models:resnet18), got "
                       f"{spec!r}")
    try:
        mod = importlib.import_module(module)
    except ImportError as e:
        raise CliError(f"cannot import {module!r}: {e}") from e
    fn = getattr(mod, name, None)
    if not callable(fn):
        raise CliError(f"{module} has no callable {name!r}")
    return fn


def _shape(text: str) -> tuple[int, ...]:
    try:
        shape = tuple(int(s) for s in text.split(","))
    except ValueError:
        shape = ()
    if not shape or any(s <= 0 for s in shape):
        raise CliError(f"--example-shape takes positive comma-separated sizes, got {text!r}")
    return shape


def _batch_range(text: str | None) -> tuple[int, int] | None:
    if text in (None, "static"):
        return None
    lo, sep, hi = text.partition(":")
    try:
        lo_i, hi_i = int(lo), int(hi)
    except ValueError:
        lo_i = hi_i = -1
    if not sep or lo_i < 1 or hi_i < lo_i:
        raise CliError(f"--batch takes MIN:MAX with 1 <= MIN <= MAX, or 'static'; got {text!r}")
    return lo_i, hi_i


def compile_main(args: argparse.Namespace) -> int:
    import torch

    from ember.core import aot

    model = _factory(args.factory)()
    if not isinstance(model, torch.nn.Module):
        raise CliError(f"{args.factory} returned a {type(model).__name__}, not an nn.Module")
    model = model.eval().to(getattr(torch, args.dtype))
    shapes = [_shape(s) for s in args.example_shape]
    example = tuple(torch.randn(s, dtype=getattr(torch, args.dtype)) for s in shapes)
    batch = _batch_range(args.batch)
    dynamic = None
    if batch is not None:
        dim = torch.export.Dim("batch", min=batch[0], max=batch[1])
        dynamic = tuple({0: dim} for _ in example)
    t0 = time.perf_counter()
    path = aot.aot_compile(model, example, dynamic_shapes=dynamic, path=args.output,
                           options={"package_weights": not args.no_weights})
    print(f"wrote {path} in {time.perf_counter() - t0:.1f} s")
    return 0


def run_main(args: argparse.Namespace) -> int:
    import torch

    from ember.core import aot

    model = aot.aot_load(args.package)
    inputs = [torch.load(p, map_location="cpu", weights_only=True) for p in args.input]
    out = model(*inputs)
    if args.output:
        torch.save(out, args.output)
        print(f"wrote {args.output}")
    for i, t in enumerate(out if isinstance(out, (list, tuple)) else [out]):
        if isinstance(t, torch.Tensor):
            print(f"output {i}: {tuple(t.shape)} {t.dtype}")
    return 0


def add_parser(sub) -> None:
    p = sub.add_parser("aot", help="compile a model ahead of time into a package, or run one")
    verbs = p.add_subparsers(dest="verb", required=True)
    c = verbs.add_parser("compile", help="export and compile MODULE:FACTORY into a .pt2")
    c.add_argument("factory", metavar="MODULE:FACTORY",
                   help="a callable returning the nn.Module, e.g. ember.vision.models:resnet18")
    c.add_argument("--example-shape", action="append", required=True, metavar="N,C,...",
                   help="shape of an example input (repeat for several inputs)")
    c.add_argument("--dtype", choices=DTYPES, default="float32")
    c.add_argument("--batch", metavar="MIN:MAX", default="1:1024",
                   help="range of the dynamic batch dimension (dim 0), or 'static'")
    c.add_argument("--no-weights", action="store_true",
                   help="leave the weights out (supply them to aot_load(weights=...))")
    c.add_argument("-o", "--output", default="model.pt2", help="package path")
    c.set_defaults(func=_guarded(compile_main))
    r = verbs.add_parser("run", help="run a package on inputs saved with torch.save")
    r.add_argument("package")
    r.add_argument("--input", action="append", required=True, metavar="FILE",
                   help="an input tensor file (repeat for several inputs)")
    r.add_argument("-o", "--output", metavar="FILE", help="save the outputs here")
    r.set_defaults(func=_guarded(run_main))


def _guarded(fn):
    def run(args):
        from ember.core import aot

        try:
            return fn(args)
        except (CliError, aot.AOTInputError, aot.PackageError, aot.AOTExportError,
                aot.AOTCompileError) as e:
            print(f"ember aot: {e}", file=sys.stderr)
            return 2
    return run
