"""``torchvision.transforms.v2``'s import path: the very objects of ``ember.vision.transforms``
(``...v2.functional`` is ``ember.vision.transforms.functional`` itself)."""

import sys

from ember.vision.transforms import *  # noqa: F403
from ember.vision.transforms import __all__ as __all__
from ember.vision.transforms import functional

sys.modules[__name__ + ".functional"] = functional
del sys
