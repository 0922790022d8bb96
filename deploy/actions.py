"""Maps policy outputs to actuator commands, as the contract's ActionSpec says.

Array-API code: the simulator applies the same mapping to torch tensors.
"""

from __future__ import annotations

from typing import Any

from array_api_compat import array_namespace

from deploy.contract import ActionSpec

Array = Any


class ActionMapper:
    def __init__(self, spec: ActionSpec):
        self.spec = spec

    def clip(self, action: Array) -> Array:
        xp = array_namespace(action)
        return xp.clip(action, -self.spec.clip, self.spec.clip)

    def __call__(self, action: Array) -> Array:
        xp = array_namespace(action)
        scale = xp.asarray(self.spec.scale, dtype=action.dtype, device=action.device)
        offset = xp.asarray(self.spec.offset, dtype=action.dtype, device=action.device)
        return offset + scale * self.clip(action)
