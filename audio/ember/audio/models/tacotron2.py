"""Tacotron 2 (Shen et al., 2018): text to mel spectrogram with location-sensitive attention.

Submodule names follow torchaudio.models.Tacotron2, so its checkpoints load strictly. As in
torchaudio (and the paper), the decoder prenet keeps its dropout on in eval mode too.
"""

from __future__ import annotations

import warnings

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["Tacotron2"]


def _linear(n_in: int, n_out: int, bias: bool = True, gain: str = "linear") -> nn.Linear:
    layer = nn.Linear(n_in, n_out, bias=bias)
    nn.init.xavier_uniform_(layer.weight, gain=nn.init.calculate_gain(gain))
    return layer


def _conv(n_in: int, n_out: int, kernel_size: int, bias: bool = True,
          gain: str = "linear") -> nn.Conv1d:
    """A 'same'-padded Conv1d with xavier-initialised weights."""
    if kernel_size % 2 != 1:
        raise ValueError(f"kernel sizes must be odd for 'same' padding, got {kernel_size}")
    layer = nn.Conv1d(n_in, n_out, kernel_size, padding=(kernel_size - 1) // 2, bias=bias)
    nn.init.xavier_uniform_(layer.weight, gain=nn.init.calculate_gain(gain))
    return layer


def _padding_mask(lengths: Tensor) -> Tensor:
    """True past each length: ``(B, max(lengths))``."""
    width = int(lengths.max().item())
    return torch.arange(width, device=lengths.device, dtype=lengths.dtype)[None] >= lengths[:, None]


class _LocationLayer(nn.Module):
    """Convolves the previous and cumulative attention weights into attention features."""

    def __init__(self, attention_n_filter: int, attention_kernel_size: int,
                 attention_hidden_dim: int) -> None:
        super().__init__()
        self.location_conv = _conv(2, attention_n_filter, attention_kernel_size, bias=False)
        self.location_dense = _linear(attention_n_filter, attention_hidden_dim, bias=False,
                                      gain="tanh")

    def forward(self, attention_weights_cat: Tensor) -> Tensor:
        return self.location_dense(self.location_conv(attention_weights_cat).transpose(1, 2))


class _Attention(nn.Module):
    """Location-sensitive additive attention over the encoder outputs."""

    def __init__(self, attention_rnn_dim: int, encoder_embedding_dim: int,
                 attention_hidden_dim: int, attention_location_n_filter: int,
                 attention_location_kernel_size: int) -> None:
        super().__init__()
        self.query_layer = _linear(attention_rnn_dim, attention_hidden_dim, False, "tanh")
        self.memory_layer = _linear(encoder_embedding_dim, attention_hidden_dim, False, "tanh")
        self.v = _linear(attention_hidden_dim, 1, bias=False)
        self.location_layer = _LocationLayer(attention_location_n_filter,
                                             attention_location_kernel_size,
                                             attention_hidden_dim)
        self.score_mask_value = -float("inf")

    def forward(self, attention_hidden_state: Tensor, memory: Tensor, processed_memory: Tensor,
                attention_weights_cat: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
        energies = self.v(torch.tanh(self.query_layer(attention_hidden_state.unsqueeze(1))
                                     + self.location_layer(attention_weights_cat)
                                     + processed_memory)).squeeze(2)
        weights = F.softmax(energies.masked_fill(mask, self.score_mask_value), dim=1)
        return torch.bmm(weights.unsqueeze(1), memory).squeeze(1), weights


class _Prenet(nn.Module):
    """Bias-free Linear + ReLU layers with dropout 0.5 that stays on at inference."""

    def __init__(self, in_dim: int, out_sizes: list[int]) -> None:
        super().__init__()
        self.layers = nn.ModuleList([_linear(i, o, bias=False)
                                     for i, o in zip([in_dim] + out_sizes[:-1], out_sizes)])

    def forward(self, x: Tensor) -> Tensor:
        for layer in self.layers:
            x = F.dropout(F.relu(layer(x)), p=0.5, training=True)
        return x


def _conv_bn(n_in: int, n_out: int, kernel_size: int, gain: str) -> nn.Sequential:
    return nn.Sequential(_conv(n_in, n_out, kernel_size, gain=gain), nn.BatchNorm1d(n_out))


class _Postnet(nn.Module):
    """Residual refinement of the mel spectrogram: conv + BatchNorm (+ tanh but the last)."""

    def __init__(self, n_mels: int, postnet_embedding_dim: int, postnet_kernel_size: int,
                 postnet_n_convolution: int) -> None:
        super().__init__()
        dims = [n_mels] + [postnet_embedding_dim] * (postnet_n_convolution - 1) + [n_mels]
        last = postnet_n_convolution - 1
        self.convolutions = nn.ModuleList([
            _conv_bn(dims[i], dims[i + 1], postnet_kernel_size, "linear" if i == last else "tanh")
            for i in range(postnet_n_convolution)])
        self.n_convs = len(self.convolutions)

    def forward(self, x: Tensor) -> Tensor:
        for i, conv in enumerate(self.convolutions):
            x = conv(x) if i == self.n_convs - 1 else torch.tanh(conv(x))
            x = F.dropout(x, 0.5, training=self.training)
        return x


class _Encoder(nn.Module):
    """Conv + BatchNorm + ReLU layers, then a bidirectional LSTM over the valid tokens."""

    def __init__(self, encoder_embedding_dim: int, encoder_n_convolution: int,
                 encoder_kernel_size: int) -> None:
        super().__init__()
        self.convolutions = nn.ModuleList([
            _conv_bn(encoder_embedding_dim, encoder_embedding_dim, encoder_kernel_size, "relu")
            for _ in range(encoder_n_convolution)])
        self.lstm = nn.LSTM(encoder_embedding_dim, encoder_embedding_dim // 2, 1,
                            batch_first=True, bidirectional=True)

    def forward(self, x: Tensor, input_lengths: Tensor) -> Tensor:
        for conv in self.convolutions:
            x = F.dropout(F.relu(conv(x)), 0.5, self.training)
        lengths = input_lengths.cpu()
        if (lengths[1:] > lengths[:-1]).any():
            raise ValueError(f"token lengths must be sorted longest first, got {lengths.tolist()}")
        packed = nn.utils.rnn.pack_padded_sequence(x.transpose(1, 2), lengths, batch_first=True)
        out, _ = self.lstm(packed)
        return nn.utils.rnn.pad_packed_sequence(out, batch_first=True)[0]


class _Decoder(nn.Module):
    """Autoregressive decoder: prenet, attention LSTM, attention, decoder LSTM, projections."""

    def __init__(self, n_mels: int, n_frames_per_step: int, encoder_embedding_dim: int,
                 decoder_rnn_dim: int, decoder_max_step: int, decoder_dropout: float,
                 decoder_early_stopping: bool, attention_rnn_dim: int,
                 attention_hidden_dim: int, attention_location_n_filter: int,
                 attention_location_kernel_size: int, attention_dropout: float,
                 prenet_dim: int, gate_threshold: float) -> None:
        super().__init__()
        self.n_mels, self.n_frames_per_step = n_mels, n_frames_per_step
        self.encoder_embedding_dim = encoder_embedding_dim
        self.attention_rnn_dim, self.decoder_rnn_dim = attention_rnn_dim, decoder_rnn_dim
        self.prenet_dim, self.decoder_max_step = prenet_dim, decoder_max_step
        self.gate_threshold = gate_threshold
        self.attention_dropout, self.decoder_dropout = attention_dropout, decoder_dropout
        self.decoder_early_stopping = decoder_early_stopping
        frame = n_mels * n_frames_per_step
        self.prenet = _Prenet(frame, [prenet_dim, prenet_dim])
        self.attention_rnn = nn.LSTMCell(prenet_dim + encoder_embedding_dim, attention_rnn_dim)
        self.attention_layer = _Attention(attention_rnn_dim, encoder_embedding_dim,
                                          attention_hidden_dim, attention_location_n_filter,
                                          attention_location_kernel_size)
        self.decoder_rnn = nn.LSTMCell(attention_rnn_dim + encoder_embedding_dim,
                                       decoder_rnn_dim, True)
        self.linear_projection = _linear(decoder_rnn_dim + encoder_embedding_dim, frame)
        self.gate_layer = _linear(decoder_rnn_dim + encoder_embedding_dim, 1, gain="sigmoid")

    def _initial_state(self, memory: Tensor) -> list[Tensor]:
        """Zero LSTM states, attention weights and context, plus the projected memory."""
        batch, time = memory.shape[:2]

        def zeros(n):
            return memory.new_zeros(batch, n)
        return [zeros(self.attention_rnn_dim), zeros(self.attention_rnn_dim),
                zeros(self.decoder_rnn_dim), zeros(self.decoder_rnn_dim), zeros(time),
                zeros(time), zeros(self.encoder_embedding_dim),
                self.attention_layer.memory_layer(memory)]

    def _step(self, frame: Tensor, state: list[Tensor], memory: Tensor,
              mask: Tensor) -> tuple[Tensor, Tensor, list[Tensor]]:
        """One decoder step from a prenet frame: (mel frame, gate logit, next state)."""
        att_h, att_c, dec_h, dec_c, weights, weights_cum, context, processed = state
        att_h, att_c = self.attention_rnn(torch.cat((frame, context), -1), (att_h, att_c))
        att_h = F.dropout(att_h, self.attention_dropout, self.training)
        context, weights = self.attention_layer(
            att_h, memory, processed, torch.stack((weights, weights_cum), dim=1), mask)
        weights_cum = weights_cum + weights
        dec_h, dec_c = self.decoder_rnn(torch.cat((att_h, context), -1), (dec_h, dec_c))
        dec_h = F.dropout(dec_h, self.decoder_dropout, self.training)
        features = torch.cat((dec_h, context), dim=1)
        state = [att_h, att_c, dec_h, dec_c, weights, weights_cum, context, processed]
        return self.linear_projection(features), self.gate_layer(features), state

    def _to_spectrogram(self, frames: Tensor) -> Tensor:
        """Step outputs ``(steps, B, n_mels * n_frames_per_step)`` -> ``(B, n_mels, time)``."""
        return frames.transpose(0, 1).reshape(frames.shape[1], -1, self.n_mels).transpose(1, 2)

    def forward(self, memory: Tensor, mel_specgram_truth: Tensor,
                memory_lengths: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        batch = memory.shape[0]
        truth = mel_specgram_truth.transpose(1, 2).reshape(
            batch, mel_specgram_truth.shape[2] // self.n_frames_per_step, -1).transpose(0, 1)
        go = memory.new_zeros(1, batch, self.n_mels * self.n_frames_per_step)
        frames = self.prenet(torch.cat((go, truth), dim=0))
        mask = _padding_mask(memory_lengths)
        state = self._initial_state(memory)
        mels, gates, alignments = [], [], []
        for t in range(frames.shape[0] - 1):
            mel, gate, state = self._step(frames[t], state, memory, mask)
            mels.append(mel)
            gates.append(gate.squeeze(1))
            alignments.append(state[4])
        return (self._to_spectrogram(torch.stack(mels)), torch.stack(gates).transpose(0, 1),
                torch.stack(alignments).transpose(0, 1))

    def infer(self, memory: Tensor, memory_lengths: Tensor
              ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """Decodes until every gate fires (or decoder_max_step): mels, lengths, gates, weights."""
        batch = memory.shape[0]
        frame = memory.new_zeros(batch, self.n_mels * self.n_frames_per_step)
        mask = _padding_mask(memory_lengths)
        state = self._initial_state(memory)
        lengths = torch.zeros(batch, dtype=torch.int32, device=memory.device)
        finished = torch.zeros(batch, dtype=torch.bool, device=memory.device)
        mels, gates, alignments = [], [], []
        for _ in range(self.decoder_max_step):
            mel, gate, state = self._step(self.prenet(frame), state, memory, mask)
            mels.append(mel)
            gates.append(gate.squeeze(1))
            alignments.append(state[4])
            lengths[~finished] += 1
            finished |= torch.sigmoid(gate.squeeze(1)) > self.gate_threshold
            if self.decoder_early_stopping and bool(finished.all()):
                break
            frame = mel
        if len(mels) == self.decoder_max_step:
            warnings.warn("Tacotron2 decoding reached decoder_max_step; the spectrogram may "
                          "not cover the whole text", stacklevel=2)
        return (self._to_spectrogram(torch.stack(mels)), lengths,
                torch.stack(gates).transpose(0, 1), torch.stack(alignments))


class Tacotron2(nn.Module):
    """Tokens ``(B, N)`` (lengths sorted longest first) -> mel spectrograms ``(B, n_mels, T)``."""

    def __init__(
        self,
        mask_padding: bool = False,
        n_mels: int = 80,
        n_symbol: int = 148,
        n_frames_per_step: int = 1,
        symbol_embedding_dim: int = 512,
        encoder_embedding_dim: int = 512,
        encoder_n_convolution: int = 3,
        encoder_kernel_size: int = 5,
        decoder_rnn_dim: int = 1024,
        decoder_max_step: int = 2000,
        decoder_dropout: float = 0.1,
        decoder_early_stopping: bool = True,
        attention_rnn_dim: int = 1024,
        attention_hidden_dim: int = 128,
        attention_location_n_filter: int = 32,
        attention_location_kernel_size: int = 31,
        attention_dropout: float = 0.1,
        prenet_dim: int = 256,
        postnet_n_convolution: int = 5,
        postnet_kernel_size: int = 5,
        postnet_embedding_dim: int = 512,
        gate_threshold: float = 0.5,
    ) -> None:
        super().__init__()
        if symbol_embedding_dim != encoder_embedding_dim:
            raise ValueError(f"symbol_embedding_dim ({symbol_embedding_dim}) must equal "
                             f"encoder_embedding_dim ({encoder_embedding_dim})")
        self.mask_padding, self.n_mels = mask_padding, n_mels
        self.n_frames_per_step = n_frames_per_step
        self.embedding = nn.Embedding(n_symbol, symbol_embedding_dim)
        nn.init.xavier_uniform_(self.embedding.weight)
        self.encoder = _Encoder(encoder_embedding_dim, encoder_n_convolution, encoder_kernel_size)
        self.decoder = _Decoder(
            n_mels, n_frames_per_step, encoder_embedding_dim, decoder_rnn_dim, decoder_max_step,
            decoder_dropout, decoder_early_stopping, attention_rnn_dim, attention_hidden_dim,
            attention_location_n_filter, attention_location_kernel_size, attention_dropout,
            prenet_dim, gate_threshold)
        self.postnet = _Postnet(n_mels, postnet_embedding_dim, postnet_kernel_size,
                                postnet_n_convolution)

    def _encode(self, tokens: Tensor, lengths: Tensor | None) -> Tensor:
        if tokens.ndim != 2 or lengths is None or lengths.shape != tokens.shape[:1]:
            raise ValueError(f"tokens must be (B, N) and lengths (B,), got "
                             f"{tuple(tokens.shape)} and "
                             f"{None if lengths is None else tuple(lengths.shape)}")
        return self.encoder(self.embedding(tokens).transpose(1, 2), lengths)

    def forward(self, tokens: Tensor, token_lengths: Tensor, mel_specgram: Tensor,
                mel_specgram_lengths: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """Teacher-forced: (mels, postnet mels, gate logits, alignments)."""
        if mel_specgram.ndim != 3 or mel_specgram.shape[1] != self.n_mels:
            raise ValueError(f"mel_specgram must be (B, n_mels={self.n_mels}, T), got "
                             f"{tuple(mel_specgram.shape)}")
        if mel_specgram.shape[2] % self.n_frames_per_step:
            raise ValueError(f"mel_specgram's length ({mel_specgram.shape[2]}) must be a "
                             f"multiple of n_frames_per_step ({self.n_frames_per_step})")
        memory = self._encode(tokens, token_lengths)
        mel, gates, alignments = self.decoder(memory, mel_specgram, memory_lengths=token_lengths)
        mel_post = mel + self.postnet(mel)
        if self.mask_padding:
            pad = _padding_mask(mel_specgram_lengths)
            mel = mel.masked_fill(pad[:, None], 0.0)
            mel_post = mel_post.masked_fill(pad[:, None], 0.0)
            gates = gates.masked_fill(pad[:, :: self.n_frames_per_step], 1e3)
        return mel, mel_post, gates, alignments

    def infer(self, tokens: Tensor, lengths: Tensor | None = None
              ) -> tuple[Tensor, Tensor, Tensor]:
        """Free-running synthesis: (postnet mels, mel lengths, alignments ``(B, T, N)``)."""
        if lengths is None and tokens.ndim == 2:
            lengths = torch.full(tokens.shape[:1], tokens.shape[1], dtype=tokens.dtype,
                                 device=tokens.device)
        memory = self._encode(tokens, lengths)
        mel, mel_lengths, _, alignments = self.decoder.infer(memory, lengths)
        return mel + self.postnet(mel), mel_lengths, alignments.transpose(0, 1)
