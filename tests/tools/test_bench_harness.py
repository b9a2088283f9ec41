import csv
import json
import sys

import pytest

from ember.tools import cli
from ember.tools.bench import BENCHMARKS
from ember.tools.bench.harness import (
    BenchResult,
    update_markdown,
    versions_line,
    write_chart,
    write_csv,
    write_json,
)
from ember.tools.bench.registry import run_many


def _compile_like() -> BenchResult:
    return BenchResult(
        "fake", "a compile-style table",
        ["case", "inductor ok", "inductor speedup", "ember ok", "ember speedup", "eager ms"],
        [["pointwise", "yes", 1.5, "yes", 2.0, 3.0], ["softmax", "NO", "-", "yes", 0.8, 4.0]],
        ["a note"])


def test_ratio_columns_are_named_ratios_with_numbers_in_every_row():
    r = _compile_like()
    # 'inductor speedup' has a '-' row: not plottable as a column of numbers
    assert r.ratio_columns() == ["ember speedup"]
    attention = BenchResult("a", "t", ["L=S", "pass", "candidate", "ms", "speed vs torch SDPA",
                                       "memory vs math", "target"],
                            [[64, "fwd", "ember", 1.0, 1.2, 0.5, ">= 1"]])
    assert attention.ratio_columns() == ["speed vs torch SDPA"]
    arrow = BenchResult("b", "t", ["case", "ember", "pandas/ember (x faster)", "targets"],
                        [["filter", 2.0, 3.9, ">= 3x"]])
    assert arrow.ratio_columns() == ["pandas/ember (x faster)"]


def test_case_labels_join_leading_text_columns():
    assert _compile_like().case_labels() == ["pointwise", "softmax"]
    r = BenchResult("a", "t", ["L=S", "pass", "candidate", "ms"], [[64, "fwd", "ember", 1.0]])
    assert r.case_labels() == ["64 fwd ember"]


def test_terminal_table_aligns_columns():
    text = _compile_like().to_table()
    lines = text.splitlines()
    assert lines[0] == "a compile-style table"
    header, rule, first = lines[1], lines[2], lines[3]
    assert header.index("inductor ok") == first.index("yes")
    assert set(rule.replace(" ", "")) == {"-"}
    assert "a note" in lines[-1]


def test_csv_and_json_round_trip(tmp_path):
    r1 = _compile_like()
    r2 = BenchResult("other", "t", ["case", "ratio"], [["x", 1.25]])
    write_csv(tmp_path / "r.csv", [r1, r2])
    rows = list(csv.DictReader(open(tmp_path / "r.csv")))
    assert len(rows) == 3
    assert rows[0]["benchmark"] == "fake" and float(rows[0]["ember speedup"]) == 2.0
    assert rows[2]["benchmark"] == "other" and rows[2]["ratio"] == "1.25"
    assert rows[2]["ember speedup"] == ""  # union of columns, empty where absent
    write_json(tmp_path / "r.json", [r1, r2], "machine X")
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["machine"] == "machine X" and "torch" in doc["versions"]
    assert [r["name"] for r in doc["results"]] == ["fake", "other"]
    assert BenchResult(**doc["results"][0]) == r1


def test_chart_draws_a_png_of_ratio_columns(tmp_path):
    pytest.importorskip("matplotlib")
    path = tmp_path / "c.png"
    charted = write_chart(path, [_compile_like(), BenchResult("text", "t", ["a"], [["x"]])])
    assert charted == ["fake"]
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_chart_refuses_results_without_ratios(tmp_path):
    with pytest.raises(ValueError):
        write_chart(tmp_path / "c.png", [BenchResult("text", "t", ["a"], [["x"]])])


def test_update_markdown_records_versions(tmp_path):
    md = tmp_path / "B.md"
    update_markdown(md, _compile_like(), "machine A")
    text = md.read_text()
    assert "Machine: machine A" in text and f"Versions: {versions_line()}" in text
    assert "ember-core" in versions_line()


@pytest.fixture
def fake_benchmarks(tmp_path, monkeypatch):
    (tmp_path / "ember_fake_bench.py").write_text(
        "from ember.tools.bench.harness import BenchResult, compare_timings\n"
        "def run(quick=False):\n"
        "    t = compare_timings({'a': lambda: sum(range(100)), 'b': lambda: None}, rounds=2,\n"
        "                        min_seconds=0.0)\n"
        "    return BenchResult('fake_ok', 'fake', ['case', 'speedup'],\n"
        "                       [['quick' if quick else 'full', t['a'] / t['b']]])\n"
        "def boom(quick=False):\n"
        "    raise RuntimeError('broken benchmark')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(BENCHMARKS, "fake_ok", ("ember_fake_bench:run", "ok"))
    monkeypatch.setitem(BENCHMARKS, "fake_boom", ("ember_fake_bench:boom", "fails"))
    yield
    sys.modules.pop("ember_fake_bench", None)


def test_run_many_keeps_going_after_a_failure(fake_benchmarks):
    out = dict(run_many(["fake_boom", "fake_ok"], quick=True, progress=False))
    assert isinstance(out["fake_boom"], RuntimeError)
    assert out["fake_ok"].rows[0][0] == "quick"


def test_cli_writes_csv_json_and_reports_failures(fake_benchmarks, tmp_path, capsys):
    csv_path, json_path = tmp_path / "o.csv", tmp_path / "o.json"
    assert cli.main(["bench", "fake_ok", "--quick", "--no-progress", "--csv", str(csv_path),
                     "--json", str(json_path)]) == 0
    assert "speedup" in capsys.readouterr().out
    assert list(csv.DictReader(open(csv_path)))[0]["case"] == "quick"
    assert json.loads(json_path.read_text())["results"][0]["name"] == "fake_ok"
    assert cli.main(["bench", "fake_boom", "--no-progress"]) == 1
    assert "broken benchmark" in capsys.readouterr().err
