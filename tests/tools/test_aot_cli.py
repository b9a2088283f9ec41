"""`ember aot compile` / `ember aot run`: a package from the command line, run on a saved
input, equals the model; bad arguments exit 2 with our message."""

import os
import shutil
import subprocess
import sys

import pytest
import torch

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")

FACTORY = '''
import torch
from torch import nn


def make():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 8), nn.SiLU(), nn.Linear(8, 2))
'''


def _ember(args, tmp_path):
    code = "import sys; from ember.tools.cli import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          timeout=900, env={**os.environ, "PYTHONPATH": str(tmp_path)})


def test_compile_then_run_equals_the_model(tmp_path):
    (tmp_path / "tinymodel.py").write_text(FACTORY)
    pkg, inp, out = tmp_path / "m.pt2", tmp_path / "x.pt", tmp_path / "y.pt"
    done = _ember(["aot", "compile", "tinymodel:make", "--example-shape", "3,6",
                   "--batch", "1:16", "-o", str(pkg)], tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert pkg.exists() and "wrote" in done.stdout
    x = torch.randn(5, 6)
    torch.save(x, inp)
    ran = _ember(["aot", "run", str(pkg), "--input", str(inp), "-o", str(out)], tmp_path)
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert "output 0: (5, 2)" in ran.stdout
    sys.path.insert(0, str(tmp_path))
    try:
        import tinymodel
    finally:
        sys.path.pop(0)
    with torch.no_grad():
        torch.testing.assert_close(torch.load(out), tinymodel.make().eval()(x))
    torch.save(torch.randn(17, 6), inp)
    ran = _ember(["aot", "run", str(pkg), "--input", str(inp)], tmp_path)
    assert ran.returncode == 2 and "outside the package's range [1, 16]" in ran.stderr


@pytest.mark.parametrize("args,message", [
    (["compile", "no_colon", "--example-shape", "2,3"], "expected MODULE:FACTORY"),
    (["compile", "no_such_module_x:make", "--example-shape", "2,3"], "cannot import"),
    (["compile", "torch.nn:Linear_", "--example-shape", "2,3"], "has no callable"),
    (["compile", "torch.nn:Identity", "--example-shape", "2,x"], "positive comma-separated"),
    (["compile", "torch.nn:Identity", "--example-shape", "2", "--batch", "5:2"], "MIN:MAX"),
])
def test_bad_arguments_exit_2_with_a_message(args, message, tmp_path):
    done = _ember(["aot", *args], tmp_path)
    assert done.returncode == 2 and message in done.stderr, done.stderr[-2000:]


def test_damaged_package_is_reported(tmp_path):
    (tmp_path / "bad.pt2").write_bytes(b"not a zip")
    torch.save(torch.randn(2, 2), tmp_path / "x.pt")
    done = _ember(["aot", "run", str(tmp_path / "bad.pt2"), "--input", str(tmp_path / "x.pt")],
                  tmp_path)
    assert done.returncode == 2 and "damaged or not an Ember package" in done.stderr
