"""`ember bench NAME`: a registry of benchmarks, each a function returning a BenchResult.

Packages' benchmarks live in this folder, one module per name, and are imported only
when run, so `ember bench io` never imports the compiler.
"""

from ember.tools.bench.harness import BenchResult, compare_timings, machine_line
from ember.tools.bench.registry import BENCHMARKS, register, run

__all__ = ["BENCHMARKS", "BenchResult", "compare_timings", "machine_line", "register", "run"]
