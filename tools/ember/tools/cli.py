"""The `ember` command: `ember env`, `ember bench NAME`, `ember aot ...`, `ember demo`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def _bench(args: argparse.Namespace) -> int:
    from ember.tools.bench import BENCHMARKS
    from ember.tools.bench.harness import (
        machine_line,
        update_markdown,
        write_chart,
        write_csv,
        write_json,
    )
    from ember.tools.bench.registry import run_many

    if args.name == "list":
        for name, (_, desc) in sorted(BENCHMARKS.items()):
            print(f"{name:<12} {desc}")
        return 0
    names = sorted(BENCHMARKS) if args.name == "all" else [args.name]
    if any(n not in BENCHMARKS for n in names):
        print(f"unknown benchmark {args.name!r}; known: {', '.join(sorted(BENCHMARKS))}",
              file=sys.stderr)
        return 2
    machine = machine_line()
    print(f"Machine: {machine}" + (" (--quick sizes)" if args.quick else ""))
    results, failed = [], []
    options = {"backends": args.backends} if args.backends else {}
    if args.suite:
        options["suite"] = args.suite
    if args.store:
        options["store"] = args.store
    for opt in ("variants", "ops", "max_samples"):  # ember bench opinfo
        if getattr(args, opt) is not None:
            options[opt] = getattr(args, opt)
    for name, outcome in run_many(names, quick=args.quick, progress=not args.no_progress,
                                  **options):
        print()
        if isinstance(outcome, BaseException):
            failed.append(name)
            print(f"{name}: FAILED: {type(outcome).__name__}: {outcome}", file=sys.stderr)
            continue
        results.append(outcome)
        print(outcome.to_table(), flush=True)
        if args.update_md:
            update_markdown(Path(args.update_md), outcome, machine)
            print(f"(updated section '{name}' of {args.update_md})")
    if args.csv and results:
        write_csv(Path(args.csv), results)
        print(f"(wrote {args.csv})")
    if args.json and results:
        write_json(Path(args.json), results, machine)
        print(f"(wrote {args.json})")
    if args.chart and results:
        try:
            charted = write_chart(Path(args.chart), results)
            print(f"(wrote {args.chart}: {', '.join(charted)})")
        except (ValueError, ImportError) as exc:
            print(f"no chart: {exc}", file=sys.stderr)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


def _demo(args: argparse.Namespace) -> int:
    from ember.tools.demo import main as demo_main

    return demo_main(quick=args.quick)


def _env(_args: argparse.Namespace) -> int:
    from ember.tools.env import main as env_main

    return env_main()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ember", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("env", help="print what a bug report needs").set_defaults(func=_env)
    bench = sub.add_parser("bench", help="run a benchmark (`ember bench list` lists them)")
    bench.add_argument("name", help="benchmark name, `all`, or `list`")
    bench.add_argument("--quick", action="store_true", help="small sizes, for CI")
    bench.add_argument("--update-md", metavar="PATH", nargs="?", const="BENCHMARKS.md",
                       help="rewrite this benchmark's section of BENCHMARKS.md")
    bench.add_argument("--csv", metavar="PATH", help="also write every row as CSV")
    bench.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    bench.add_argument("--chart", metavar="PATH",
                       help="also draw a PNG of the speed-up/ratio columns per case")
    bench.add_argument("--no-progress", action="store_true", help="no progress bar")
    bench.add_argument("--backends", metavar="LIST",
                       help="comma list of compile backends, e.g. eager,inductor,ember "
                            "(for benchmarks that compare backends: compile)")
    bench.add_argument("--suite", metavar="NAME",
                       help="model suite of `ember bench zoo`: default (our packages' models) "
                            "hf (HuggingFace transformers models) or vision (ember.vision's "
                            "registered builders)")
    bench.add_argument("--store", metavar="DIR",
                       help="zoo --suite hf|vision: keep each model's rows in DIR and reuse them "
                            "on the next run, so a suite can run in parts")
    bench.add_argument("--variants", metavar="LIST",
                       help="opinfo: comma list of float32,float32_grad,float32_noncontig,"
                            "float32_channels_last,float32_transposed,float32_expanded,"
                            "bfloat16,int64 (default float32)")
    bench.add_argument("--ops", metavar="LIST",
                       help="opinfo: comma list of OpInfo names (default: all of op_db)")
    bench.add_argument("--max-samples", metavar="N", type=int,
                       help="opinfo: samples per op (default 8; 0 = all)")
    bench.set_defaults(func=_bench)
    from ember.tools import aot

    aot.add_parser(sub)
    demo = sub.add_parser("demo", help="run the end-to-end demo")
    demo.add_argument("--quick", action="store_true", help="tiny sizes")
    demo.set_defaults(func=_demo)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
