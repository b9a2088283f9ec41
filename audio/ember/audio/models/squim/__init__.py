"""TorchAudio-Squim (Kumar et al., 2023): speech quality without a matching reference."""

from ember.audio.models.squim.objective import (
    SquimObjective,
    squim_objective_base,
    squim_objective_model,
)
from ember.audio.models.squim.subjective import (
    SquimSubjective,
    squim_subjective_base,
    squim_subjective_model,
)

__all__ = ["SquimObjective", "SquimSubjective", "squim_objective_base", "squim_objective_model",
           "squim_subjective_base", "squim_subjective_model"]
