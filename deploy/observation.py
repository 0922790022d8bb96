"""Builds the policy's observation vector from named signals, exactly as the contract says.

Written against the array API: the simulator runs this same builder on batched torch tensors,
the deploy runtime on numpy arrays. Per term: value -> (optional perturbation, the simulator's
sensor noise) -> times scale -> clip to +-clip -> a history of the last `history` values,
oldest first. The terms are concatenated in contract order.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from array_api_compat import array_namespace

from deploy.contract import ObsTerm
from deploy.terms import TERMS, Signals

Array = Any
Perturb = Callable[[str, Array], Array]


class ObservationBuilder:
    def __init__(self, terms: Sequence[ObsTerm], num_actions: int):
        unknown = [t.name for t in terms if t.name not in TERMS]
        if unknown:
            raise ValueError(f"unknown observation terms {unknown}; known: {sorted(TERMS)}")
        self.terms = list(terms)
        self.num_actions = num_actions
        self._history: dict[str, Array] = {}

    @property
    def dim(self) -> int:
        return sum(t.dim * t.history for t in self.terms)

    def reads(self) -> set[str]:
        return {sig for t in self.terms for sig in TERMS[t.name].reads}

    def reset(self, mask: Array | None = None) -> None:
        """Forget the history of the environments in `mask` (all when None)."""
        if mask is None:
            self._history.clear()
            return
        for name, buf in self._history.items():
            xp = array_namespace(buf)
            # a reset row is refilled from its next value (see build)
            self._history[name] = xp.where(mask[..., None, None], xp.nan, buf)

    def build(self, signals: Signals, perturb: Perturb | None = None) -> Array:
        parts = []
        for term in self.terms:
            value = TERMS[term.name].fn(signals)
            if perturb is not None:
                value = perturb(term.name, value)
            xp = array_namespace(value)
            value = xp.clip(value * term.scale, -term.clip, term.clip)
            if term.history > 1:
                value = self._push(term.name, value, term.history)
            parts.append(value)
        return xp.concat(parts, axis=-1)

    def _push(self, name: str, value: Array, length: int) -> Array:
        xp = array_namespace(value)
        fresh = xp.broadcast_to(value[..., None, :], (*value.shape[:-1], length, value.shape[-1]))
        buf = self._history.get(name)
        if buf is None or buf.shape != fresh.shape:
            buf = fresh
        else:
            buf = xp.concat([buf[..., 1:, :], value[..., None, :]], axis=-2)
            stale = xp.isnan(buf[..., :1, :1])  # rows reset since the last call
            buf = xp.where(stale, fresh, buf)
        self._history[name] = buf
        return xp.reshape(buf, (*value.shape[:-1], length * value.shape[-1]))
