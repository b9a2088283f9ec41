"""ember.vision.ops beyond RoI pooling: IoU variants and losses, masks_to_boxes, model
blocks, stochastic depth, DropBlock, FPN, MultiScaleRoIAlign and deform_conv2d, each
against a plain float64 reference (loops or the defining formula)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from ember.vision import ops
from ember.vision.ops import feature_pyramid_network as fpn
from ember.vision.ops.poolers import LevelMapper


def boxes(n, seed, size=30.0):
    g = torch.Generator().manual_seed(seed)
    xy = torch.rand(n, 2, generator=g, dtype=torch.float64) * size
    return torch.cat([xy, xy + torch.rand(n, 2, generator=g, dtype=torch.float64) * 12 + 0.5], 1)


def pair_terms(a, b):
    """IoU, enclosing-box area and diagonal^2, centre distance^2, aspect term of one pair."""
    iw = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    ih = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    area = lambda t: (t[2] - t[0]) * (t[3] - t[1])
    inter = iw * ih
    union = area(a) + area(b) - inter
    cw, ch = max(a[2], b[2]) - min(a[0], b[0]), max(a[3], b[3]) - min(a[1], b[1])
    dist = (((a[0] + a[2]) / 2 - (b[0] + b[2]) / 2) ** 2
            + ((a[1] + a[3]) / 2 - (b[1] + b[3]) / 2) ** 2)
    v = 4 / math.pi ** 2 * (math.atan((a[2] - a[0]) / (a[3] - a[1]))
                            - math.atan((b[2] - b[0]) / (b[3] - b[1]))) ** 2
    return inter / union, union, cw * ch, cw ** 2 + ch ** 2, dist, v


def test_iou_variants_match_pairwise_formulas():
    a, b, eps = boxes(6, 1), boxes(4, 2), 1e-7
    giou, diou, ciou = (torch.zeros(6, 4, dtype=torch.float64) for _ in range(3))
    for i, p in enumerate(a.tolist()):
        for j, q in enumerate(b.tolist()):
            iou, union, hull, diag, dist, v = pair_terms(p, q)
            giou[i, j] = iou - (hull - union) / hull
            diou[i, j] = iou - dist / (diag + eps)
            ciou[i, j] = diou[i, j] - v / (1 - iou + v + eps) * v
    torch.testing.assert_close(ops.generalized_box_iou(a, b), giou)
    torch.testing.assert_close(ops.distance_box_iou(a, b), diou)
    torch.testing.assert_close(ops.complete_box_iou(a, b), ciou)
    assert ops.generalized_box_iou(a[None], b[None]).shape == (1, 6, 4)   # batch dims
    assert ops.complete_box_iou(a.half(), b.half()).dtype == torch.float32


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_box_losses_match_formulas(reduction):
    a, b, eps = boxes(7, 3), boxes(7, 4), 1e-7
    ref = {"generalized_box_iou_loss": [], "distance_box_iou_loss": [],
           "complete_box_iou_loss": []}
    for p, q in zip(a.tolist(), b.tolist()):
        iou, union, hull, diag, dist, v = pair_terms(p, q)
        inter = iou * union
        iou_e = inter / (union + eps)
        ref["generalized_box_iou_loss"].append(1 - iou_e + (hull - union) / (hull + eps))
        d = 1 - iou_e + dist / (diag + eps)
        ref["distance_box_iou_loss"].append(d)
        ref["complete_box_iou_loss"].append(d + v / (1 - iou_e + v + eps) * v)
    for name, values in ref.items():
        r = torch.tensor(values, dtype=torch.float64)
        r = {"none": r, "mean": r.mean(), "sum": r.sum()}[reduction]
        torch.testing.assert_close(getattr(ops, name)(a, b, reduction), r)
    assert ops.generalized_box_iou_loss(a[:0], b[:0], "mean").item() == 0.0
    with pytest.raises(ValueError, match="reduction"):
        ops.distance_box_iou_loss(a, b, "avg")


def test_box_losses_are_zero_for_equal_boxes_and_differentiable():
    a = boxes(5, 5).requires_grad_()
    for name in ("generalized_box_iou_loss", "distance_box_iou_loss", "complete_box_iou_loss"):
        assert getattr(ops, name)(a, a.detach()).abs().max() < 1e-6
        if name != "complete_box_iou_loss":   # its alpha is held constant on purpose
            assert torch.autograd.gradcheck(lambda t, n=name: getattr(ops, n)(t, boxes(5, 6)),
                                            (a,))


def test_masks_to_boxes_matches_a_loop():
    masks = torch.rand(6, 9, 13, generator=torch.Generator().manual_seed(0)) > 0.8
    masks[3] = False
    ref = torch.zeros(6, 4)
    for i, m in enumerate(masks):
        ys, xs = torch.where(m)
        if len(ys):
            ref[i] = torch.tensor([xs.min(), ys.min(), xs.max(), ys.max()]).float()
    assert torch.equal(ops.masks_to_boxes(masks), ref)
    assert ops.masks_to_boxes(torch.zeros(0, 5, 5)).shape == (0, 4)
    with pytest.raises(ValueError, match="N, H, W"):
        ops.masks_to_boxes(torch.ones(5, 5))


def test_frozen_batch_norm_is_eval_batch_norm():
    bn = torch.nn.BatchNorm2d(5, eps=1e-3).double().eval()
    with torch.no_grad():
        for t in (bn.weight, bn.bias, bn.running_mean):
            t.uniform_(-1, 1)
        bn.running_var.uniform_(0.5, 2)
    frozen = ops.FrozenBatchNorm2d(5, eps=1e-3).double()
    frozen.load_state_dict(bn.state_dict())   # num_batches_tracked dropped
    x = torch.randn(2, 5, 4, 3, dtype=torch.float64)
    torch.testing.assert_close(frozen(x), bn(x))
    assert not list(frozen.parameters())
    assert repr(frozen) == "FrozenBatchNorm2d(5, eps=0.001)"


def test_conv_norm_activation_layout():
    m = ops.Conv2dNormActivation(4, 8, 5, stride=2, dilation=2)
    conv, norm, act = m
    assert conv.padding == (4, 4) and conv.bias is None and isinstance(norm, torch.nn.BatchNorm2d)
    assert isinstance(act, torch.nn.ReLU) and act.inplace and m.out_channels == 8
    m = ops.Conv2dNormActivation(4, 8, (3, 5), norm_layer=None, activation_layer=None)
    assert len(m) == 1 and m[0].padding == (1, 2) and m[0].bias is not None
    m3 = ops.Conv3dNormActivation(2, 3, 3)
    assert isinstance(m3[0], torch.nn.Conv3d) and isinstance(m3[1], torch.nn.BatchNorm3d)
    assert m3(torch.randn(1, 2, 4, 5, 6)).shape == (1, 3, 4, 5, 6)


def test_squeeze_excitation_mlp_permute():
    se = ops.SqueezeExcitation(6, 3).double()
    x = torch.randn(2, 6, 5, 4, dtype=torch.float64)
    pooled = x.mean((2, 3))
    s = torch.sigmoid(F.linear(torch.relu(F.linear(pooled, se.fc1.weight[:, :, 0, 0],
                                                   se.fc1.bias)), se.fc2.weight[:, :, 0, 0],
                               se.fc2.bias))
    torch.testing.assert_close(se(x), x * s[:, :, None, None])
    mlp = ops.MLP(4, [8, 3], norm_layer=torch.nn.LayerNorm, dropout=0.2)
    assert [type(m).__name__ for m in mlp] == ["Linear", "LayerNorm", "ReLU", "Dropout",
                                                "Linear", "Dropout"]
    assert ops.Permute([0, 2, 3, 1])(x).shape == (2, 5, 4, 6)


def test_stochastic_depth():
    x = torch.ones(4000, 3)
    torch.manual_seed(0)
    y = ops.stochastic_depth(x, 0.25, "row")
    kept = (y[:, 0] != 0).double().mean().item()
    assert abs(kept - 0.75) < 0.03 and torch.allclose(y[y != 0], torch.tensor(1 / 0.75))
    assert (y == y[:, :1]).all()                       # a row drops as a whole
    b = ops.stochastic_depth(x, 0.5, "batch")
    assert b.unique().numel() == 1                      # the whole batch at once
    assert ops.stochastic_depth(x, 0.9, "row", training=False) is x
    m = ops.StochasticDepth(0.5, "row").eval()
    assert m(x) is x and repr(m) == "StochasticDepth(p=0.5, mode=row)"
    with pytest.raises(ValueError, match="between 0 and 1"):
        ops.stochastic_depth(x, -0.1, "row")


def test_drop_block_drops_square_blocks():
    x = torch.ones(2, 3, 16, 16)
    torch.manual_seed(1)
    y = ops.drop_block2d(x, 0.2, 3)
    zero = y == 0
    dropped = zero.double().mean().item()
    assert 0.05 < dropped < 0.4
    scale = zero.numel() / (~zero).sum().item()
    torch.testing.assert_close(y[~zero], torch.full_like(y[~zero], scale))
    # the zeros are a union of whole 3x3 blocks inside the image: opening keeps them all
    eroded = -F.max_pool2d(-F.pad(zero.float(), (1, 1, 1, 1)), 3, 1)
    assert torch.equal(F.max_pool2d(eroded, 3, 1, padding=1).bool(), zero)
    assert ops.drop_block3d(torch.ones(1, 1, 5, 5, 5), 0.3, 3).shape == (1, 1, 5, 5, 5)
    assert ops.DropBlock2d(0.3, 3).eval()(x) is x
    with pytest.raises(ValueError, match="odd"):
        ops.drop_block2d(x, 0.2, 4)


def test_feature_pyramid_network_matches_a_direct_computation():
    feats = {"c3": torch.randn(1, 8, 16, 12), "c4": torch.randn(1, 16, 8, 6)}
    net = ops.FeaturePyramidNetwork([8, 16], 4, extra_blocks=fpn.LastLevelMaxPool())
    out = net(feats)
    assert list(out) == ["c3", "c4", "pool"]
    inner4 = net.inner_blocks[1](feats["c4"])
    p4 = net.layer_blocks[1](inner4)
    p3 = net.layer_blocks[0](net.inner_blocks[0](feats["c3"])
                             + F.interpolate(inner4, size=(16, 12), mode="nearest"))
    torch.testing.assert_close(out["c3"], p3)
    torch.testing.assert_close(out["c4"], p4)
    torch.testing.assert_close(out["pool"], p4[..., ::2, ::2])
    keys = set(net.state_dict())
    assert "inner_blocks.0.0.weight" in keys and "layer_blocks.1.0.bias" in keys
    old = {k.replace(".0.", ".", 1) if k.count(".") == 3 else k: v
           for k, v in net.state_dict().items()}        # version-1 keys still load
    net.load_state_dict(old)
    p6p7 = ops.FeaturePyramidNetwork([8, 16], 4, extra_blocks=fpn.LastLevelP6P7(16, 4))
    assert list(p6p7(feats)) == ["c3", "c4", "p6", "p7"]
    with pytest.raises(TypeError, match="ExtraFPNBlock"):
        ops.FeaturePyramidNetwork([8], 4, extra_blocks=torch.nn.Identity())


def test_multi_scale_roi_align_maps_levels():
    feats = {"0": torch.randn(1, 2, 64, 64), "1": torch.randn(1, 2, 32, 32)}
    small = torch.tensor([[4.0, 4, 40, 40]])      # sqrt(area) 36 -> level 2 (clamped) -> "0"
    big = torch.tensor([[0.0, 0, 250, 250]])      # sqrt(area) 250 -> level 4 -> clamped "1"
    pool = ops.MultiScaleRoIAlign(["0", "1"], 3, 2)
    out = pool(feats, [torch.cat([small, big])], [(256, 256)])
    assert pool.scales == [0.25, 0.125]
    torch.testing.assert_close(out[0], ops.roi_align(feats["0"], [small], 3, 0.25, 2)[0])
    torch.testing.assert_close(out[1], ops.roi_align(feats["1"], [big], 3, 0.125, 2)[0])
    levels = LevelMapper(2, 5)([torch.tensor([[0.0, 0, 224, 224], [0, 0, 20, 20]])])
    assert levels.tolist() == [2, 0]


def deform_reference(x, offset, weight, bias, stride, pad, dil, mask):
    """Per-output-pixel loops of the deformable convolution in float64."""
    n, c, h, w = x.shape
    oc, cpg, kh, kw = weight.shape
    _, _, oh, ow = offset.shape
    og = offset.shape[1] // (2 * kh * kw)
    out = torch.zeros(n, oc, oh, ow, dtype=torch.float64)

    def sample(plane, y, xx):
        if y <= -1 or y >= h or xx <= -1 or xx >= w:
            return 0.0
        y0, x0 = math.floor(y), math.floor(xx)
        val = 0.0
        for yy, wy in ((y0, 1 - (y - y0)), (y0 + 1, y - y0)):
            for xc, wx in ((x0, 1 - (xx - x0)), (x0 + 1, xx - x0)):
                if 0 <= yy < h and 0 <= xc < w:
                    val += wy * wx * float(plane[yy, xc])
        return val

    for b in range(n):
        cols = torch.zeros(c, kh * kw, oh, ow, dtype=torch.float64)
        for ci in range(c):
            g = ci // (c // og)
            for k in range(kh * kw):
                i, j = divmod(k, kw)
                for oy in range(oh):
                    for ox in range(ow):
                        dy = float(offset[b, (g * kh * kw + k) * 2, oy, ox])
                        dx = float(offset[b, (g * kh * kw + k) * 2 + 1, oy, ox])
                        m = 1.0 if mask is None else float(mask[b, g * kh * kw + k, oy, ox])
                        cols[ci, k, oy, ox] = m * sample(
                            x[b, ci], oy * stride - pad + i * dil + dy,
                            ox * stride - pad + j * dil + dx)
        groups = c // cpg
        for o in range(oc):
            grp = o // (oc // groups)
            chans = cols[grp * cpg:(grp + 1) * cpg].reshape(cpg * kh * kw, oh, ow)
            out[b, o] = (weight[o].reshape(-1, 1, 1) * chans).sum(0) + bias[o]
    return out


@pytest.mark.parametrize("use_mask", [False, True])
def test_deform_conv2d_matches_reference(use_mask):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(1, 4, 6, 5, generator=g, dtype=torch.float64)
    offset = torch.randn(1, 2 * 2 * 4, 3, 3, generator=g, dtype=torch.float64) * 2
    mask = torch.rand(1, 2 * 4, 3, 3, generator=g, dtype=torch.float64) if use_mask else None
    weight = torch.randn(6, 2, 2, 2, generator=g, dtype=torch.float64)
    bias = torch.randn(6, generator=g, dtype=torch.float64)
    out = ops.deform_conv2d(x, offset, weight, bias, stride=2, padding=1, dilation=2, mask=mask)
    torch.testing.assert_close(out, deform_reference(x, offset, weight, bias, 2, 1, 2, mask))
    args = [t.requires_grad_() for t in (x, offset, weight, bias)]
    if use_mask:
        args.append(mask.requires_grad_())
    assert torch.autograd.gradcheck(
        lambda a, o, w, b, *m: ops.deform_conv2d(a, o, w, b, stride=2, padding=1, dilation=2,
                                                 mask=m[0] if m else None), tuple(args))


def test_deform_conv2d_with_zero_offsets_is_conv2d():
    x = torch.randn(2, 4, 9, 8, dtype=torch.float64)
    m = ops.DeformConv2d(4, 6, 3, stride=2, padding=1, groups=2).double()
    offset = torch.zeros(2, 18, 5, 4, dtype=torch.float64)
    torch.testing.assert_close(m(x, offset), F.conv2d(x, m.weight, m.bias, 2, 1, groups=2))
    with pytest.raises(RuntimeError, match="multiple"):
        m(x, offset[:, :5])
    compiled = torch.compile(m, backend="ember", fullgraph=True)
    torch.testing.assert_close(compiled(x, offset + 0.3), m(x, offset + 0.3))
