"""Beam search over an RNNT's outputs (Graves, 2012), as torchaudio.models.RNNTBeamSearch.

A hypothesis is ``(tokens, predictor output, predictor state, log-probability score)``; scores
are float32 sums as torchaudio's, so both searches keep the same beams.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import List, Tuple  # noqa: UP035 - Hypothesis is torchaudio's typing alias

import torch
from torch import Tensor, nn

from ember.audio.models.rnnt import RNNT

__all__ = ["Hypothesis", "RNNTBeamSearch"]

Hypothesis = Tuple[List[int], torch.Tensor, List[List[torch.Tensor]], float]  # noqa: UP006


def _default_hypo_sort_key(hypo: Hypothesis) -> float:
    """Score per emitted token (plus one), so longer hypotheses are not penalised."""
    return hypo[3] / (len(hypo[0]) + 1)


def _batch_states(hypos: list[Hypothesis]) -> list[list[Tensor]]:
    """Concatenates the hypotheses' predictor states along the batch axis, layer by layer."""
    first = hypos[0][2]
    return [[torch.cat([h[2][i][j] for h in hypos]) for j in range(len(first[i]))]
            for i in range(len(first))]


def _select_state(states: list[list[Tensor]], index: int) -> list[list[Tensor]]:
    """Batch item ``index`` of every state tensor, keeping the batch axis."""
    idx = torch.tensor([index], device=states[0][0].device)
    return [[s.index_select(0, idx) for s in layer] for layer in states]


class RNNTBeamSearch(nn.Module):
    """Beam search decoding of one utterance with an :class:`RNNT` (whole or streaming)."""

    def __init__(self, model: RNNT, blank: int, temperature: float = 1.0,
                 hypo_sort_key: Callable[[Hypothesis], float] | None = None,
                 step_max_tokens: int = 100) -> None:
        super().__init__()
        if temperature <= 0:
            raise ValueError(f"temperature must be positive, got {temperature}")
        self.model, self.blank, self.temperature = model, blank, temperature
        self.hypo_sort_key = _default_hypo_sort_key if hypo_sort_key is None else hypo_sort_key
        self.step_max_tokens = step_max_tokens

    def _initial(self, device: torch.device) -> list[Hypothesis]:
        out, _, state = self.model.predict(torch.tensor([[self.blank]], device=device),
                                           torch.tensor([1], device=device), None)
        return [([self.blank], out[0].detach(), state, 0.0)]

    def _log_probs(self, frame: Tensor, hypos: list[Hypothesis]) -> Tensor:
        """Next-symbol log-probabilities ``(len(hypos), num_symbols)`` at one encoder frame."""
        device = frame.device
        pred = torch.stack([h[1] for h in hypos])
        joined, _, _ = self.model.join(frame, torch.tensor([1], device=device), pred,
                                       torch.tensor([1] * len(hypos), device=device))
        return torch.log_softmax(joined / self.temperature, dim=3)[:, 0, 0].cpu()

    def _add_blank_ends(self, ended: list[Hypothesis], active: list[Hypothesis],
                        log_probs: Tensor, by_key: dict[str, Hypothesis]) -> list[Hypothesis]:
        """Ends each active hypothesis with a blank, merging equal token sequences."""
        for i, hypo in enumerate(active):
            blank_score = hypo[3] + log_probs[i, -1]
            key = str(hypo[0])
            if key in by_key:
                ended.pop(next(j for j, h in enumerate(ended) if str(h[0]) == key))
                score = float(torch.tensor(by_key[key][3]).logaddexp(blank_score))
            else:
                score = float(blank_score)
            merged = (hypo[0], hypo[1], hypo[2], score)
            ended.append(merged)
            by_key[key] = merged
        _, order = torch.tensor([h[3] for h in ended]).sort()
        return [ended[i] for i in order]

    def _extend(self, active: list[Hypothesis], ended: list[Hypothesis], log_probs: Tensor,
                beam_width: int, device: torch.device) -> list[Hypothesis]:
        """Best non-blank extensions that still beat the beam_width-th ended hypothesis."""
        scores = torch.tensor([h[3] for h in active]).unsqueeze(1) + log_probs[:, :-1]
        best, flat = scores.reshape(-1).topk(beam_width)
        n_tokens = scores.shape[1]
        floor = -float("inf") if len(ended) < beam_width else ended[-beam_width][3]
        picks = [(active[int(flat[i]) // n_tokens], int(flat[i]) % n_tokens, float(best[i]))
                 for i in range(beam_width) if float(best[i]) > floor]
        if not picks:
            return []
        tokens = torch.tensor([[tok] for _, tok, _ in picks], device=device)
        out, _, states = self.model.predict(tokens, torch.tensor([1] * len(picks), device=device),
                                            _batch_states([h for h, _, _ in picks]))
        return [(h[0] + [tok], out[i].detach(), _select_state(states, i), score)
                for i, (h, tok, score) in enumerate(picks)]

    def _search(self, enc_out: Tensor, hypos: list[Hypothesis] | None,
                beam_width: int) -> list[Hypothesis]:
        device = enc_out.device
        ended = self._initial(device) if hypos is None else hypos
        for t in range(enc_out.shape[1]):
            active, ended, by_key, emitted = ended, [], {}, 0
            while active:
                log_probs = self._log_probs(enc_out[:, t: t + 1], active)
                ended = self._add_blank_ends(ended, active, log_probs, by_key)
                if emitted == self.step_max_tokens:
                    break
                active = self._extend(active, ended, log_probs, beam_width, device)
                if active:
                    emitted += 1
            _, order = torch.tensor([self.hypo_sort_key(h) for h in ended]).topk(beam_width)
            ended = [ended[i] for i in order]
        return ended

    @staticmethod
    def _prepare(input: Tensor, length: Tensor) -> tuple[Tensor, Tensor]:
        if input.ndim != 2 and not (input.ndim == 3 and input.shape[0] == 1):
            raise ValueError(f"input must be (T, D) or (1, T, D), got {tuple(input.shape)}")
        if length.shape not in ((), (1,)):
            raise ValueError(f"length must have shape () or (1,), got {tuple(length.shape)}")
        return (input[None] if input.ndim == 2 else input,
                length[None] if length.ndim == 0 else length)

    def forward(self, input: Tensor, length: Tensor, beam_width: int) -> list[Hypothesis]:
        """The best ``beam_width`` hypotheses for a whole utterance, best first."""
        input, length = self._prepare(input, length)
        enc_out, _ = self.model.transcribe(input, length)
        return self._search(enc_out, None, beam_width)

    def infer(self, input: Tensor, length: Tensor, beam_width: int,
              state: list[list[Tensor]] | None = None,
              hypothesis: list[Hypothesis] | None = None
              ) -> tuple[list[Hypothesis], list[list[Tensor]]]:
        """One streaming segment: continues ``hypothesis`` and the transcriber ``state``."""
        input, length = self._prepare(input, length)
        enc_out, _, state = self.model.transcribe_streaming(input, length, state)
        return self._search(enc_out, hypothesis, beam_width), state
