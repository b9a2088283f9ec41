"""Wav2Letter: a fully convolutional acoustic model (Collobert et al., 2016)."""

from __future__ import annotations

from torch import Tensor, nn

__all__ = ["Wav2Letter"]

# (in, out, kernel, stride, padding) of the acoustic stack after its first layer
_BODY = [(250, 250, 7, 1, 3)] * 7 + [(250, 2000, 32, 1, 16), (2000, 2000, 1, 1, 0)]


def _conv_relu(c_in: int, c_out: int, kernel: int, stride: int, padding: int) -> list[nn.Module]:
    return [nn.Conv1d(c_in, c_out, kernel, stride=stride, padding=padding), nn.ReLU(inplace=True)]


class Wav2Letter(nn.Module):
    """Input ``(batch, num_features, time)`` -> log-probabilities ``(batch, num_classes, frames)``.

    ``input_type`` is ``"waveform"`` (adds a strided front-end conv), ``"power_spectrum"`` or
    ``"mfcc"``; layer layout and parameter names follow torchaudio's.
    """

    def __init__(self, num_classes: int = 40, input_type: str = "waveform",
                 num_features: int = 1) -> None:
        super().__init__()
        if input_type not in ("waveform", "power_spectrum", "mfcc"):
            raise ValueError(f"input_type must be 'waveform', 'power_spectrum' or 'mfcc', "
                             f"got {input_type!r}")
        first_in = 250 if input_type == "waveform" else num_features
        layers = _conv_relu(first_in, 250, 48, 2, 23)
        for spec in _BODY:
            layers += _conv_relu(*spec)
        layers += _conv_relu(2000, num_classes, 1, 1, 0)
        acoustic = nn.Sequential(*layers)
        if input_type == "waveform":
            front = nn.Sequential(*_conv_relu(num_features, 250, 250, 160, 45))
            self.acoustic_model = nn.Sequential(front, acoustic)
        else:
            self.acoustic_model = acoustic

    def forward(self, x: Tensor) -> Tensor:
        return nn.functional.log_softmax(self.acoustic_model(x), dim=1)
