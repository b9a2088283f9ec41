"""View chains of an exported graph rewritten into ones the lowering keeps as views.

A packaged graph has a dynamic batch dimension, and the lowering views a strided window of
symbolic size only when it is contiguous: ``x.split(E, -1)[i].view(B, L, H, D)`` (attention's
heads out of one packed projection) would copy every head out. Splitting the heads first,
``x.view(B, L, 3H, D).split(H, -2)[i]``, gives the same tensors as views of ``x``. And a
``clone`` export put in to make a view contiguous goes when the view already is (attention's
output in ATen's layout, transposed back).
"""

from __future__ import annotations

import operator

import torch

aten = torch.ops.aten


def _val(node):
    return node.meta.get("val") if isinstance(node, torch.fx.Node) else None


def _heads(view: torch.fx.Node, part) -> int | None:
    """D when ``view`` reshapes ``part`` (..., n) into (..., n // D, D), else None."""
    if view.op != "call_function" or view.target is not aten.view.default:
        return None
    out = _val(view)
    if out is None or out.dim() != part.dim() + 1 or \
            [str(s) for s in out.shape[:-2]] != [str(s) for s in part.shape[:-1]]:
        return None
    h, d = out.shape[-2], out.shape[-1]
    if not isinstance(h, int) or not isinstance(d, int) or h * d != part.shape[-1]:
        return None
    return d


def split_heads_as_views(gm: torch.fx.GraphModule) -> None:
    """``split_with_sizes(x, sizes, -1)`` whose parts are only reshaped to heads of one size
    D -> ``split_with_sizes(view(x, (..., sum // D, D)), sizes // D, -2)``: the parts are
    the heads themselves, strided views of ``x`` (values unchanged)."""
    g = gm.graph
    for split in list(g.nodes):
        if split.op != "call_function" or split.target is not aten.split_with_sizes.default:
            continue
        x, sizes = split.args[0], split.args[1]
        dim = split.args[2] if len(split.args) > 2 else split.kwargs.get("dim", 0)
        xv = _val(x)
        if xv is None or dim not in (-1, xv.dim() - 1) or \
                not all(isinstance(s, int) for s in sizes):
            continue
        leading = list(xv.shape[:-1])
        if sum(not isinstance(s, int) for s in leading) > 1:
            continue  # a view's shape holds one -1 at most
        parts = {}
        for getitem in split.users:
            if getitem.target is not operator.getitem or not getitem.users:
                break
            views = list(getitem.users)
            ds = {_heads(v, _val(getitem)) for v in views}
            if len(ds) != 1 or None in ds:
                break
            parts[getitem] = (views, ds.pop())
        else:
            ds = {d for _, d in parts.values()}
            if len(ds) != 1 or not parts:
                continue
            d = ds.pop()
            if any(s % d for s in sizes):
                continue
            _rewrite(g, split, x, sizes, d, leading, parts)
    gm.recompile()


def _rewrite(g, split, x, sizes, d: int, leading: list, parts: dict) -> None:
    shape = [s if isinstance(s, int) else -1 for s in leading] + [sum(sizes) // d, d]
    counts = [s // d for s in sizes]
    heads_val = aten.view.default(_val(x), shape)  # splitting the last dim: always a view
    with g.inserting_before(split):
        heads = g.call_function(aten.view.default, (x, shape))
        heads.meta["val"] = heads_val
        new = g.call_function(aten.split_with_sizes.default, (heads, counts, -2))
        new.meta["val"] = aten.split_with_sizes.default(heads_val, counts, -2)
        for getitem, (views, _) in parts.items():
            k = getitem.args[1]
            part = g.call_function(operator.getitem, (new, k))
            part.meta["val"] = new.meta["val"][k]
            for v in views:
                v.replace_all_uses_with(part)
                g.erase_node(v)
            g.erase_node(getitem)
    g.erase_node(split)


_VIEWS = (aten.view.default, aten.permute.default, aten.transpose.int, aten.unsqueeze.default,
          aten.squeeze.dim)


def _fresh(node: torch.fx.Node) -> bool:
    """``node`` is a tensor no other value aliases: an op's non-aliasing output."""
    if node.op != "call_function":
        return False
    if node.target is operator.getitem:
        node = node.args[0]
    schema = getattr(node.target, "_schema", None)
    return schema is not None and not schema.is_mutable and \
        all(r.alias_info is None for r in schema.returns)


def _fake(a, vals: dict):
    """An argument with its nodes replaced by their (recomputed) fake values."""
    if isinstance(a, torch.fx.Node):
        return vals.get(a, _val(a))
    return [_fake(x, vals) for x in a] if isinstance(a, (list, tuple)) else a


def drop_contiguous_clones(gm: torch.fx.GraphModule) -> None:
    """A ``clone`` of views of a fresh tensor that nothing else reads, when those views are
    already contiguous, is that view itself (the graph's metadata is recomputed along the
    chain first: an earlier rewrite may have changed the fresh tensor's layout)."""
    g = gm.graph
    for clone in list(g.nodes):
        if clone.op != "call_function" or clone.target is not aten.clone.default or \
                clone.kwargs.get("memory_format") not in (None, torch.contiguous_format):
            continue
        chain, node = [], clone.args[0]
        while isinstance(node, torch.fx.Node) and node.op == "call_function" and \
                node.target in _VIEWS and len(node.users) == 1:
            chain.append(node)
            node = node.args[0]
        if not isinstance(node, torch.fx.Node) or len(node.users) != 1 or not _fresh(node):
            continue
        vals: dict = {}
        try:
            for v in reversed(chain):
                vals[v] = v.target(*(_fake(a, vals) for a in v.args),
                                   **{k: _fake(a, vals) for k, a in v.kwargs.items()})
        except RuntimeError:
            continue  # a view its fresh layout does not allow: the clone stays
        src = clone.args[0]
        got = vals.get(src, _val(src))
        if got is None or not got.is_contiguous():
            continue
        for v, val in vals.items():
            v.meta["val"] = val
        clone.replace_all_uses_with(src)
        g.erase_node(clone)
    gm.recompile()
