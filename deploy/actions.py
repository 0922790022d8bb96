"""Maps policy outputs to actuator commands, as the contract's ActionSpec says.

Array-API code: the simulator applies the same mapping to torch tensors.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from array_api_compat import array_namespace

from simreal.deploy.contract import ActionSpec

Array = Any


class ActionMapper:
    def __init__(self, spec: ActionSpec):
        self.spec = spec
        self._np_scale = np.asarray(spec.scale, dtype=np.float32)
        self._np_offset = np.asarray(spec.offset, dtype=np.float32)

    def clip(self, action: Array) -> Array:
        if isinstance(action, np.ndarray):  # the same math as the wrapper's clip, far cheaper
            return np.minimum(np.maximum(action, -self.spec.clip), self.spec.clip)
        xp = array_namespace(action)
        return xp.clip(action, -self.spec.clip, self.spec.clip)

    def __call__(self, action: Array) -> Array:
        return self.from_clipped(self.clip(action))

    def from_clipped(self, action: Array) -> Array:
        """The command of an action already clipped (a runner that keeps the clipped action
        skips clipping it twice)."""
        if isinstance(action, np.ndarray):
            scale = self._np_scale.astype(action.dtype, copy=False)
            offset = self._np_offset.astype(action.dtype, copy=False)
            return offset + scale * action
        xp = array_namespace(action)
        scale = xp.asarray(self.spec.scale, dtype=action.dtype, device=action.device)
        offset = xp.asarray(self.spec.offset, dtype=action.dtype, device=action.device)
        return offset + scale * action
