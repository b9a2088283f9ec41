"""Emformer (Shi et al., 2021): a segment-wise streaming transformer with memory and context.

Layers, parameter names and the streaming state (``[memory, left key, left value, frames
seen]`` per layer) follow torchaudio.models.Emformer, so its checkpoints and states carry over.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

__all__ = ["Emformer"]

_ACTIVATIONS = {"relu": nn.ReLU, "gelu": nn.GELU, "silu": nn.SiLU}


def _init_gains(strategy: str | None, num_layers: int) -> list[float | None]:
    """Per-layer xavier gains of the attention projections."""
    if strategy is None:
        return [None] * num_layers
    if strategy == "depthwise":
        return [1.0 / math.sqrt(i + 1) for i in range(num_layers)]
    if strategy == "constant":
        return [1.0 / math.sqrt(2)] * num_layers
    raise ValueError(f"weight_init_scale_strategy must be 'depthwise', 'constant' or None, "
                     f"got {strategy!r}")


class _EmformerAttention(nn.Module):
    """Attention of [right context, utterance, summary] queries over [memory, context] keys."""

    def __init__(self, input_dim: int, num_heads: int, dropout: float = 0.0,
                 weight_init_gain: float | None = None, tanh_on_mem: bool = False,
                 negative_inf: float = -1e8) -> None:
        super().__init__()
        if input_dim % num_heads:
            raise ValueError(f"input_dim ({input_dim}) must be divisible by num_heads "
                             f"({num_heads})")
        self.input_dim, self.num_heads, self.dropout = input_dim, num_heads, dropout
        self.tanh_on_mem, self.negative_inf = tanh_on_mem, negative_inf
        self.scaling = (input_dim // num_heads) ** -0.5
        self.emb_to_key_value = nn.Linear(input_dim, 2 * input_dim)
        self.emb_to_query = nn.Linear(input_dim, input_dim)
        self.out_proj = nn.Linear(input_dim, input_dim)
        if weight_init_gain:
            nn.init.xavier_uniform_(self.emb_to_key_value.weight, gain=weight_init_gain)
            nn.init.xavier_uniform_(self.emb_to_query.weight, gain=weight_init_gain)

    def _attend(self, utterance: Tensor, lengths: Tensor, right_context: Tensor, summary: Tensor,
                mems: Tensor, attention_mask: Tensor, left_key: Tensor | None = None,
                left_value: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        batch = utterance.shape[1]
        n_query = right_context.shape[0] + utterance.shape[0] + summary.shape[0]
        query = self.emb_to_query(torch.cat([right_context, utterance, summary]))
        key, value = self.emb_to_key_value(
            torch.cat([mems, right_context, utterance])).chunk(2, dim=2)
        if left_key is not None and left_value is not None:
            # right context is laid out for the longest item; left keys sit between it and
            # the utterance
            cut = mems.shape[0] + n_query - int(lengths.max()) - summary.shape[0]
            key = torch.cat([key[:cut], left_key, key[cut:]])
            value = torch.cat([value[:cut], left_value, value[cut:]])
        head_dim = self.input_dim // self.num_heads
        q, k, v = (t.contiguous().view(-1, batch * self.num_heads, head_dim).transpose(0, 1)
                   for t in (query, key, value))
        scores = torch.bmm(q * self.scaling, k.transpose(1, 2)).float()
        scores = scores.masked_fill(attention_mask.unsqueeze(0), self.negative_inf)
        if batch > 1:
            # an item's keys end (longest length - its length) before the last key: the key
            # count is a shape, so the mask reads no value of lengths (torch.export traces it)
            n_keys = key.shape[0]
            valid = lengths - lengths.max() + n_keys
            pad = torch.arange(n_keys, device=lengths.device, dtype=lengths.dtype)[None] \
                >= valid[:, None]
            scores = scores.view(batch, self.num_heads, n_query, -1).masked_fill(
                pad[:, None, None, :], self.negative_inf).view(batch * self.num_heads, n_query, -1)
        probs = torch.softmax(scores, dim=-1).type_as(q)
        probs = nn.functional.dropout(probs, p=float(self.dropout), training=self.training)
        out = torch.bmm(probs, v).transpose(0, 1).contiguous().view(n_query, batch,
                                                                     self.input_dim)
        out = self.out_proj(out)
        n_sum = summary.shape[0]
        output, out_mems = out[: n_query - n_sum], out[n_query - n_sum:]
        out_mems = torch.tanh(out_mems) if self.tanh_on_mem else out_mems.clamp(-10, 10)
        return output, out_mems, key, value

    def forward(self, utterance: Tensor, lengths: Tensor, right_context: Tensor, summary: Tensor,
                mems: Tensor, attention_mask: Tensor) -> tuple[Tensor, Tensor]:
        output, out_mems, _, _ = self._attend(utterance, lengths, right_context, summary, mems,
                                              attention_mask)
        return output, out_mems[:-1]

    def infer(self, utterance: Tensor, lengths: Tensor, right_context: Tensor, summary: Tensor,
              mems: Tensor, left_context_key: Tensor, left_context_val: Tensor
              ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """One streaming step; also returns this step's keys and values past the memory."""
        n_query = right_context.shape[0] + utterance.shape[0] + summary.shape[0]
        n_key = (right_context.shape[0] + utterance.shape[0] + mems.shape[0]
                 + left_context_key.shape[0])
        mask = torch.zeros(n_query, n_key, dtype=torch.bool, device=utterance.device)
        mask[-1, : mems.shape[0]] = True   # the summary query does not read the memory
        output, out_mems, key, value = self._attend(utterance, lengths, right_context, summary,
                                                    mems, mask, left_context_key,
                                                    left_context_val)
        start = mems.shape[0] + right_context.shape[0]
        return output, out_mems, key[start:], value[start:]


class _EmformerLayer(nn.Module):
    """Pre-norm attention with residual, then a residual feed-forward block and LayerNorm."""

    def __init__(self, input_dim: int, num_heads: int, ffn_dim: int, segment_length: int,
                 dropout: float = 0.0, activation: str = "relu", left_context_length: int = 0,
                 max_memory_size: int = 0, weight_init_gain: float | None = None,
                 tanh_on_mem: bool = False, negative_inf: float = -1e8) -> None:
        super().__init__()
        if activation not in _ACTIVATIONS:
            raise ValueError(f"activation must be one of {sorted(_ACTIVATIONS)}, "
                             f"got {activation!r}")
        self.attention = _EmformerAttention(input_dim, num_heads, dropout, weight_init_gain,
                                            tanh_on_mem, negative_inf)
        self.dropout = nn.Dropout(dropout)
        self.memory_op = nn.AvgPool1d(segment_length, segment_length, ceil_mode=True)
        self.pos_ff = nn.Sequential(
            nn.LayerNorm(input_dim), nn.Linear(input_dim, ffn_dim), _ACTIVATIONS[activation](),
            nn.Dropout(dropout), nn.Linear(ffn_dim, input_dim), nn.Dropout(dropout))
        self.layer_norm_input = nn.LayerNorm(input_dim)
        self.layer_norm_output = nn.LayerNorm(input_dim)
        self.left_context_length, self.segment_length = left_context_length, segment_length
        self.max_memory_size, self.input_dim = max_memory_size, input_dim
        self.use_mem = max_memory_size > 0

    def _summary(self, utterance: Tensor) -> Tensor:
        if not self.use_mem:
            return utterance.new_empty(0)
        return self.memory_op(utterance.permute(1, 2, 0)).permute(2, 0, 1)

    def _pre_norm(self, utterance: Tensor, right_context: Tensor) -> tuple[Tensor, Tensor]:
        normed = self.layer_norm_input(torch.cat([right_context, utterance]))
        return normed[right_context.shape[0]:], normed[: right_context.shape[0]]

    def _post(self, attended: Tensor, utterance: Tensor, right_context: Tensor
              ) -> tuple[Tensor, Tensor]:
        x = self.dropout(attended) + torch.cat([right_context, utterance])
        x = self.layer_norm_output(self.pos_ff(x) + x)
        return x[right_context.shape[0]:], x[: right_context.shape[0]]

    def forward(self, utterance: Tensor, lengths: Tensor, right_context: Tensor, mems: Tensor,
                attention_mask: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        utt_n, rc_n = self._pre_norm(utterance, right_context)
        attended, out_mems = self.attention(utt_n, lengths, rc_n, self._summary(utt_n), mems,
                                            attention_mask)
        out_utt, out_rc = self._post(attended, utterance, right_context)
        return out_utt, out_rc, out_mems

    def _init_state(self, batch: int, device: torch.device | None) -> list[Tensor]:
        def zeros(n):
            return torch.zeros(n, batch, self.input_dim, device=device)
        return [zeros(self.max_memory_size), zeros(self.left_context_length),
                zeros(self.left_context_length),
                torch.zeros(1, batch, dtype=torch.int32, device=device)]

    def infer(self, utterance: Tensor, lengths: Tensor, right_context: Tensor,
              state: list[Tensor] | None, mems: Tensor
              ) -> tuple[Tensor, Tensor, list[Tensor], Tensor]:
        """One segment: returns utterance, right context, the new layer state and memory."""
        utt_n, rc_n = self._pre_norm(utterance, right_context)
        if state is None:
            state = self._init_state(utterance.shape[1], utterance.device)
        seen = int(state[3][0][0].item())
        n_left = min(self.left_context_length, seen)
        n_mem = min(self.max_memory_size, math.ceil(seen / self.segment_length))
        attended, out_mems, key, value = self.attention.infer(
            utt_n, lengths, rc_n, self._summary(utt_n)[:1],
            state[0][self.max_memory_size - n_mem:],
            state[1][self.left_context_length - n_left:],
            state[2][self.left_context_length - n_left:])
        new_key, new_value = torch.cat([state[1], key]), torch.cat([state[2], value])
        state = [torch.cat([state[0], mems])[-self.max_memory_size:],
                 new_key[new_key.shape[0] - self.left_context_length:],
                 new_value[new_value.shape[0] - self.left_context_length:],
                 state[3] + utterance.shape[0]]
        out_utt, out_rc = self._post(attended, utterance, right_context)
        return out_utt, out_rc, state, out_mems


class Emformer(nn.Module):
    """Frames ``(B, T + right_context_length, D)`` and lengths ``(B,)`` -> (frames, lengths)."""

    def __init__(self, input_dim: int, num_heads: int, ffn_dim: int, num_layers: int,
                 segment_length: int, dropout: float = 0.0, activation: str = "relu",
                 left_context_length: int = 0, right_context_length: int = 0,
                 max_memory_size: int = 0, weight_init_scale_strategy: str | None = "depthwise",
                 tanh_on_mem: bool = False, negative_inf: float = -1e8) -> None:
        super().__init__()
        if segment_length < 1:
            raise ValueError(f"segment_length must be positive, got {segment_length}")
        gains = _init_gains(weight_init_scale_strategy, num_layers)
        self.use_mem = max_memory_size > 0
        self.memory_op = nn.AvgPool1d(segment_length, segment_length, ceil_mode=True)
        self.emformer_layers = nn.ModuleList([
            _EmformerLayer(input_dim, num_heads, ffn_dim, segment_length, dropout=dropout,
                           activation=activation, left_context_length=left_context_length,
                           max_memory_size=max_memory_size, weight_init_gain=gains[i],
                           tanh_on_mem=tanh_on_mem, negative_inf=negative_inf)
            for i in range(num_layers)])
        self.left_context_length = left_context_length
        self.right_context_length = right_context_length
        self.segment_length = segment_length
        self.max_memory_size = max_memory_size

    def _right_context(self, x: Tensor) -> Tensor:
        """The right-context frames of every segment, stacked along time."""
        total, seg, rc = x.shape[0], self.segment_length, self.right_context_length
        n_segs = math.ceil((total - rc) / seg)
        blocks = [x[(i + 1) * seg: (i + 1) * seg + rc] for i in range(n_segs - 1)]
        return torch.cat(blocks + [x[total - rc:]])

    @staticmethod
    def _mask_block(n_rows: int, widths: list[int], visible: list[bool],
                    device: torch.device) -> Tensor:
        """Rows of a mask: column groups of the given widths, True where not visible."""
        return torch.cat([torch.full((n_rows, w), not v, dtype=torch.bool, device=device)
                          for w, v in zip(widths, visible)], dim=1)

    def _attention_mask(self, utterance: Tensor) -> Tensor:
        """True where a query (right contexts, utterance, summaries) may not read a key."""
        length, seg = utterance.shape[0], self.segment_length
        rc, lc = self.right_context_length, self.left_context_length
        n_segs = math.ceil(length / seg)
        rows: list[list[Tensor]] = [[], [], []]
        for i in range(n_segs):
            start, end = max(i * seg - lc, 0), min((i + 1) * seg, length)
            widths = [i * rc, rc, rc * n_segs - (i + 1) * rc, start, end - start, length - end]
            visible = [False, True, False, False, True, False]
            summary_visible = None
            if self.use_mem:
                m_start = max(i - self.max_memory_size, 0)
                widths = [m_start, i - m_start, n_segs - 1 - i] + widths
                visible = [False, True, False] + visible
                summary_visible = [False] * 4 + [True, False, False, True, False]

            rows[0].append(self._mask_block(rc, widths, visible, utterance.device))
            rows[1].append(self._mask_block(min(seg, length - i * seg), widths, visible,
                                            utterance.device))
            if summary_visible is not None:
                rows[2].append(self._mask_block(1, widths, summary_visible, utterance.device))
        return torch.cat([torch.cat(r) for r in rows if r])

    def _check(self, input: Tensor, lengths: Tensor) -> None:
        if input.ndim != 3 or lengths.shape != input.shape[:1]:
            raise ValueError(f"input must be (B, T, D) and lengths (B,), got "
                             f"{tuple(input.shape)} and {tuple(lengths.shape)}")

    def forward(self, input: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor]:
        self._check(input, lengths)
        if input.shape[1] <= self.right_context_length:
            raise ValueError(f"input needs more than right_context_length "
                             f"({self.right_context_length}) frames, got {input.shape[1]}")
        x = input.permute(1, 0, 2)
        right_context = self._right_context(x)
        utterance = x[: x.shape[0] - self.right_context_length]
        mask = self._attention_mask(utterance)
        mems = (self.memory_op(utterance.permute(1, 2, 0)).permute(2, 0, 1)[:-1]
                if self.use_mem else x.new_empty(0))
        out = utterance
        for layer in self.emformer_layers:
            out, right_context, mems = layer(out, lengths, right_context, mems, mask)
        return out.permute(1, 0, 2), lengths

    def infer(self, input: Tensor, lengths: Tensor, states: list[list[Tensor]] | None = None
              ) -> tuple[Tensor, Tensor, list[list[Tensor]]]:
        """One segment ``(B, segment_length + right_context_length, D)`` with the prior states."""
        self._check(input, lengths)
        if input.shape[1] != self.segment_length + self.right_context_length:
            raise ValueError(f"infer takes segment_length + right_context_length = "
                             f"{self.segment_length + self.right_context_length} frames, "
                             f"got {input.shape[1]}")
        if states is not None and len(states) != len(self.emformer_layers):
            raise ValueError(f"states must hold one state per layer "
                             f"({len(self.emformer_layers)}), got {len(states)}")
        x = input.permute(1, 0, 2)
        split = x.shape[0] - self.right_context_length
        right_context, out = x[split:], x[:split]
        out_lengths = torch.clamp(lengths - self.right_context_length, min=0)
        mems = (self.memory_op(out.permute(1, 2, 0)).permute(2, 0, 1)
                if self.use_mem else x.new_empty(0))
        out_states = []
        for i, layer in enumerate(self.emformer_layers):
            out, right_context, state, mems = layer.infer(
                out, out_lengths, right_context, None if states is None else states[i], mems)
            out_states.append(state)
        return out.permute(1, 0, 2), out_lengths, out_states
