"""In-place writes over overlapping memory run in eager: eager's error where eager refuses,
eager's values where it writes through an expanded view; other in-place writes still compile
(no graph runs in eager) and match eager."""

import warnings

import pytest
import torch

from ember.core.compiler import overlapping_writes, pipeline


def _expanded_input(x):
    x.add_(1)
    return x * 2


def _expanded_inside(x):
    y = x[:1].expand(3, 4)
    y.mul_(2)
    return y


def _shifted_copy(x):
    x[1:].copy_(x[:-1])
    return x


def _shifted_setitem(x):
    x[:-1] = x[1:]
    return x


def _shifted_iadd(x):
    y = x * 2
    y[1:] += y[:-1]
    return y


def _transposed_add(x):
    x.add_(x.t())
    return x


def _out_overlapping_input(x):
    torch.mul(x[:-1], 3, out=x[1:])
    return x


def _flat_window(x):
    x.view(-1)[2:6].sub_(x.view(-1)[0:4])
    return x


def _relu_on_expanded(x):
    torch.nn.functional.relu(x[:1].expand(3, 4), inplace=True)
    return x


def _number_into_expanded(x):
    x[:1].expand(3, 4)[:, 1] = 3.0
    return x * 1


REFUSED = {
    "expanded_input": (_expanded_input, lambda: torch.zeros(1, 4).expand(3, 4), "more than one"),
    "expanded_inside": (_expanded_inside, lambda: torch.ones(4, 4), "more than one"),
    "shifted_copy": (_shifted_copy, lambda: torch.arange(5.0), "some elements"),
    "shifted_setitem": (_shifted_setitem, lambda: torch.arange(5.0), "some elements"),
    "shifted_iadd": (_shifted_iadd, lambda: torch.arange(5.0), "some elements"),
    "transposed_add": (_transposed_add, lambda: torch.randn(4, 4), "some elements"),
    "out_overlapping_input": (_out_overlapping_input, lambda: torch.arange(5.0),
                              "some elements"),
    "flat_window": (_flat_window, lambda: torch.randn(4, 4), "some elements"),
    "relu_on_expanded": (_relu_on_expanded, lambda: torch.randn(4, 4), "more than one"),
    "number_into_expanded": (_number_into_expanded, lambda: torch.ones(4, 4), "more than one"),
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_writes_eager_refuses_raise_eagers_error(ecompile, name):
    fn, make, message = REFUSED[name]
    with pytest.raises(RuntimeError, match=f"unsupported operation: {message}"):
        fn(make())
    before = pipeline.stats["graphs_fallback"]
    with pytest.raises(RuntimeError, match=f"unsupported operation: {message}"):
        ecompile(fn)(make())
    assert pipeline.stats["graphs_fallback"] == before + 1


def _same_tensor(x):
    x.add_(x)
    return x


def _row_from_row(x):
    x[0] = x[1]
    return x


def _shift_of_a_clone(x):
    x[1:] = x[:-1].clone()
    return x


def _interleaved(x):
    x.view(-1)[::2].add_(x.view(-1)[1::2])
    return x


def _gated(x):
    x.mul_(x.sigmoid())
    return x


def _write_into_part(x, y):
    x[2:].add_(y)
    return x


def _grid():
    return torch.linspace(-2, 2, 16).reshape(4, 4)


ALLOWED = {
    "same_tensor": (_same_tensor, lambda: (_grid(),)),
    "row_from_row": (_row_from_row, lambda: (_grid(),)),
    "shift_of_a_clone": (_shift_of_a_clone, lambda: (torch.arange(6.0),)),
    "interleaved": (_interleaved, lambda: (_grid(),)),
    "gated": (_gated, lambda: (_grid(),)),
    "write_into_part": (_write_into_part, lambda: (torch.arange(6.0), torch.ones(4))),
}


@pytest.mark.parametrize("name", sorted(ALLOWED))
def test_writes_eager_allows_stay_compiled(ecompile, matches, name):
    fn, make = ALLOWED[name]
    before = pipeline.stats["graphs_fallback"]
    matches(ecompile(fn)(*make()), fn(*make()))
    assert pipeline.stats["graphs_fallback"] == before


def test_symbolic_sizes_are_decided_at_the_example(ecompile):
    f = ecompile(_shifted_copy, dynamic=True)
    for n in (6, 9):
        with pytest.raises(RuntimeError, match="unsupported operation: some elements"):
            f(torch.arange(float(n)))


def test_reason_names_the_write():
    reasons = []

    def backend(gm, example_inputs):
        reasons.append(overlapping_writes.find(gm))
        return gm.forward

    torch._dynamo.reset()
    with pytest.raises(RuntimeError):
        torch.compile(_shifted_copy, backend=backend)(torch.arange(5.0))
    torch._dynamo.reset()
    assert reasons == ["the in-place copy_ writes a tensor that partly overlaps one it reads; "
                       "eager raises"]


def test_writes_through_overlapping_windows_give_eagers_values(ecompile, matches):
    """Overlapping ``unfold`` windows: eager adds once per window; functionalization refused
    the write (an error from inside AOTAutograd). Windows that do not overlap stay compiled."""
    def overlapping(x):
        x.unfold(0, 3, 1).add_(1)
        return x * 1

    def disjoint(x):
        x.unfold(0, 2, 2).mul_(3)
        return x * 1

    before = pipeline.stats["graphs_fallback"]
    matches(ecompile(overlapping)(torch.arange(6.0)), overlapping(torch.arange(6.0)))
    assert pipeline.stats["graphs_fallback"] == before + 1
    matches(ecompile(disjoint)(torch.arange(6.0)), disjoint(torch.arange(6.0)))
    assert pipeline.stats["graphs_fallback"] == before + 1


THROUGH_EXPANDED = {
    "fill_": lambda y: y.fill_(2.0),
    "zero_": lambda y: y.zero_(),
    "masked_fill_": lambda y: y.masked_fill_(torch.ones(3, 4, dtype=torch.bool), 5.0),
    "index_fill_": lambda y: y.index_fill_(1, torch.tensor([0, 2]), -1.0),
    "index_put_": lambda y: y.index_put_((torch.tensor([0]),), torch.tensor(7.0)),
}


@pytest.mark.parametrize("name", sorted(THROUGH_EXPANDED))
def test_writes_through_an_expanded_view_give_eagers_values(ecompile, matches, name):
    """Eager writes the shared memory; functionalization summed the rows' writes (fill_ of 2
    left 4, zero_ left -2): the graph runs in eager."""
    write = THROUGH_EXPANDED[name]

    def fn(x):
        write(x[:1].expand(3, 4))
        return x * 1

    before = pipeline.stats["graphs_fallback"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # eager's deprecation of writes to expanded tensors
        matches(ecompile(fn)(torch.ones(4, 4)), fn(torch.ones(4, 4)))
    assert pipeline.stats["graphs_fallback"] == before + 1
