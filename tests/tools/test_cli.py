import subprocess
import sys
from pathlib import Path

import pytest

from ember.tools import cli
from ember.tools.bench import BENCHMARKS, BenchResult, register
from ember.tools.bench.harness import compare_timings, update_markdown
from ember.tools.env import report


def test_env_reports_what_a_bug_report_needs():
    labels = dict(report())
    for key in ("Python", "torch", "triton", "pillow", "soundfile", "libsndfile", "ffmpeg",
                "pyarrow", "C++ compiler", "CPU flags", "GPUs"):
        assert key in labels
    assert labels["torch"].startswith("2.")
    assert "not found" not in labels["ffmpeg"]


def test_console_script_env():
    out = subprocess.run([sys.executable, "-m", "ember.tools.cli", "env"], capture_output=True,
                         text=True, timeout=120, check=True).stdout
    assert "torch" in out and "libsndfile" in out


def test_bench_list_and_unknown(capsys):
    assert cli.main(["bench", "list"]) == 0
    assert "io" in capsys.readouterr().out
    assert cli.main(["bench", "nope"]) == 2
    assert "unknown benchmark 'nope'" in capsys.readouterr().err


def test_bench_io_quick_updates_markdown(tmp_path, capsys):
    md = tmp_path / "BENCHMARKS.md"
    md.write_text("# Benchmarks\n\n## other\n\nkeep me\n")
    assert cli.main(["bench", "io", "--quick", "--update-md", str(md)]) == 0
    text = md.read_text()
    assert "## io" in text and "JPEG decode" in text and "keep me" in text
    assert "Machine:" in text
    # a second run replaces the section instead of appending another
    assert cli.main(["bench", "io", "--quick", "--update-md", str(md)]) == 0
    assert md.read_text().count("## io") == 1


def test_update_markdown_replaces_only_its_section(tmp_path):
    md = tmp_path / "B.md"
    result = BenchResult("x", "title", ["a", "b"], [[1, 2.5]])
    update_markdown(md, result, "machine A")
    update_markdown(md, BenchResult("y", "other", ["c"], [["z"]]), "machine A")
    update_markdown(md, BenchResult("x", "title2", ["a"], [[3]]), "machine B")
    text = md.read_text()
    assert text.count("## x") == 1 and "title2" in text and "## y" in text
    assert "machine B" in text and text.index("## x") < text.index("## y")


def test_compare_timings_orders_candidates():
    slow = lambda: sum(range(20000))
    fast = lambda: None
    t = compare_timings({"slow": slow, "fast": fast}, rounds=3, min_seconds=0.005)
    assert set(t) == {"slow", "fast"} and t["slow"] > t["fast"] > 0


def test_register_rejects_conflicts():
    with pytest.raises(ValueError, match="already registered"):
        register("io", "somewhere:else", "x")
    assert BENCHMARKS["io"][0] == "ember.tools.bench.io:run"


def test_demo_quick_runs_both_pipelines_end_to_end(capsys):
    assert cli.main(["demo", "--quick"]) == 0
    out = capsys.readouterr().out
    # the loader produced transformed batches of the configured shape, for images and audio
    assert "batch (8, 3, 48, 48) torch.float32" in out
    assert "batch (4, 1, 8000) torch.float32" in out
    assert "images/s" in out and "clips/s" in out
    # both models were compiled (or an honest failure was printed) and checked against eager
    assert out.count("compiler: ") == 2
    assert out.count("(match)") == 2, out
    assert "demo finished" in out


def test_readme_commands_exist():
    root = Path(__file__).resolve().parents[2]
    readme = (root / "README.md").read_text()
    makefile = (root / "Makefile").read_text()
    assert "make demo" in readme.split("\n\n")[1] + readme[:400]
    assert "make test" in readme[:400]
    assert "\ndemo:" in makefile and "\ntest:" in makefile
    assert "make test" in (root / ".ci" / "run").read_text()


def test_backends_option_reaches_only_benchmarks_that_take_it(capsys):
    from ember.tools.bench.registry import options_of

    assert "backends" in options_of("compile")
    assert "backends" not in options_of("io")
    assert cli.main(["bench", "io", "--quick", "--no-progress", "--backends", "eager"]) == 1
    assert "takes no option backends" in capsys.readouterr().err


def test_compare_timings_rotates_the_order_every_round():
    order = []
    cands = {name: (lambda name=name: order.append(name)) for name in "abc"}
    compare_timings(cands, rounds=3, min_seconds=0, warmup=0)
    timed = order[3:]  # after each candidate's one calibration call
    assert timed == list("abc") + list("bca") + list("cab")


def test_compare_timings_settles_before_every_timed_block(monkeypatch):
    from ember.tools.bench import harness

    sleeps = []
    monkeypatch.setattr(harness.time, "sleep", lambda s: sleeps.append(s))
    compare_timings({"a": lambda: None, "b": lambda: None}, rounds=3, min_seconds=0,
                    warmup=0, settle=0.25)
    assert sleeps == [0.25] * 6
