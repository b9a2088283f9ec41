"""The `ember` command: `ember env`, `ember bench NAME`, `ember demo`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def _bench(args: argparse.Namespace) -> int:
    from ember.tools.bench import BENCHMARKS, run
    from ember.tools.bench.harness import machine_line, update_markdown

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
    print(f"Machine: {machine}")
    for name in names:
        result = run(name, quick=args.quick)
        print()
        print(result.to_text())
        if args.update_md:
            update_markdown(Path(args.update_md), result, machine)
            print(f"(updated section '{name}' of {args.update_md})")
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
    bench.set_defaults(func=_bench)
    demo = sub.add_parser("demo", help="run the end-to-end demo")
    demo.add_argument("--quick", action="store_true", help="tiny sizes")
    demo.set_defaults(func=_demo)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
