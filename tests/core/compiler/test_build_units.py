"""A large graph's library is built from several translation units in parallel, then linked."""

import pytest
import torch

from ember.core import parallel
from ember.core.compiler.codegen import cpp
from ember.core.compiler.runtime import build, cpp_kernels

# each unit carries the prelude, whose SIMD exp helpers every unit defines
A = 'extern "C" int e_a(float x) { return static_cast<int>(e_exp(x)); }\n'
B = 'extern "C" int e_b(float x) { return static_cast<int>(e_exp(x)) + 1; }\n'


def test_units_make_one_library_named_by_the_whole_source(fresh_cache, isa_level):
    libmvec = build.has_libmvec()
    source = cpp.translation_unit([A, B], libmvec)
    units = [cpp.translation_unit([A], libmvec), cpp.translation_unit([B], libmvec)]
    builds, compiled = build.builds, build.units_built
    lib = build.load(source, None, units)   # EMBER_CPU_ISA: each level's exp helpers
    assert (build.builds, build.units_built) == (builds + 1, compiled + 2)
    for name, want in (("e_a", 7), ("e_b", 8)):
        fn = getattr(lib, name)
        fn.argtypes, fn.restype = [build.ctypes.c_float], build.ctypes.c_int
        assert fn(2.0) == want   # int(e^2) = 7
    build._loaded.clear()
    build.load(source)   # the same key, from the disk cache
    assert build.builds == builds + 1


def test_a_unit_that_does_not_compile_names_the_error(fresh_cache):
    units = ['extern "C" int e_a() { return 1; }\n',
             'extern "C" int e_c() { return undeclared_name; }\n']
    with pytest.raises(build.BuildError, match="undeclared_name"):
        build.load("".join(units) + "// failing", None, units)


def test_small_graphs_stay_one_unit():
    assert cpp_kernels.units([["x" * 100], ["y" * 100]], False) is None


def test_graph_split_over_units_matches_eager(ecompile, fresh_cache, monkeypatch, isa_level):
    monkeypatch.setattr(cpp_kernels, "UNIT_MIN_CHARS", 1)
    monkeypatch.setattr(parallel, "cores", lambda: 3)

    def fn(x, w):   # matrix products split the kernels into separate runs
        y = (x * 0.5).exp() @ w
        z = (y - 0.25).sigmoid() @ w
        return (z * 0.1).tanh().exp(), y.relu().sum(1)

    x, w = torch.randn(16, 24), torch.randn(24, 24) * 0.1
    compiled = build.units_built
    out = ecompile(fn)(x, w)
    assert build.units_built == compiled + 3
    for got, want in zip(out, fn(x, w)):
        torch.testing.assert_close(got, want)
