"""The training algorithms by name.

Each algorithm is a config class (pydantic, unknown keys are errors) and a runner class. A runner
is built as `Runner(env, cfg, run_dir, seed, run_config)` and offers `learn(total_env_steps,
callback, progress)`, `save()`, `state_dict()`/`load_state_dict()`, the counters `iteration`,
`env_steps`, `wall_s`, and `exportable_actor()`: the deterministic actor, observation normalizer
inside, as one torch module from the "policy" observation to the action (what ONNX export
writes). `simreal/api.py` knows algorithms only through this table.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass


@dataclass(frozen=True)
class Algo:
    name: str
    config_class: str  # "module:Class", imported on use
    runner_class: str

    def config(self):
        return _load(self.config_class)

    def runner(self):
        return _load(self.runner_class)


def _load(target: str):
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)


ALGOS: dict[str, Algo] = {
    "ppo": Algo("ppo", "simreal.train.ppo:PPOConfig", "simreal.train.runner:OnPolicyRunner"),
    "sac": Algo("sac", "simreal.train.sac:SACConfig", "simreal.train.sac:SACRunner"),
    "td3": Algo("td3", "simreal.train.td3:TD3Config", "simreal.train.td3:TD3Runner"),
}


def get_algo(name: str) -> Algo:
    if name not in ALGOS:
        raise ValueError(f"unknown algo {name!r}; known: {', '.join(ALGOS)}")
    return ALGOS[name]
