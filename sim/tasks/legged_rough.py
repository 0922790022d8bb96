"""Legged velocity tracking (legged.py) on heightfield terrain with a terrain curriculum
(go2-rough).

The ground is sim/terrain.py's grid of tiles (rows: difficulty levels; columns: flat, slopes
up and down, rough, stairs up and down, obstacles) as one MuJoCo hfield replacing the MJCF's
floor plane. Every env owns a level and a column (`TerrainCurriculum`) and starts on its tile's
centre platform; when an episode ends, an env that walked past half a tile moves one level up,
one that covered less than half of the distance its commands asked over the whole episode one
level down (Rudin et al. 2021).
The base height reward and the critic's foot scan are measured from the terrain under them.
"""

from __future__ import annotations

from typing import Any

import mujoco
import torch
from pydantic import Field

from simreal.robots import Robot
from simreal.sim.tasks.legged import TRAIN_DEFAULTS as FLAT_DEFAULTS
from simreal.sim.tasks.legged import LeggedConfig, LeggedVelocity
from simreal.sim.terrain import (
    HeightMap,
    Terrain,
    TerrainConfig,
    TerrainCurriculum,
    compile_with_terrain,
    generate_terrain,
)

# the flat task's settings, longer: the same networks, so a flat policy's weights fit
TRAIN_DEFAULTS = {
    "algo": "ppo",
    "ppo": {**FLAT_DEFAULTS["ppo"], "steps": 30_000_000},
}


class LeggedRoughConfig(LeggedConfig):
    terrain: TerrainConfig = TerrainConfig()
    terrain_seed: int = 0  # the terrain is part of the task: one seed, every run
    spawn_spread: float = Field(0.5, ge=0)  # m, uniform around the tile's centre


class LeggedRough(LeggedVelocity):
    name = "legged-rough"
    config_class = LeggedRoughConfig
    cfg: LeggedRoughConfig
    train_defaults = TRAIN_DEFAULTS
    ground_geom = "terrain"

    def __init__(self, robot: Robot, cfg: LeggedRoughConfig, num_envs: int, seed: int,
                 nthread: int | None = None, backend: str = "mujoco",
                 device: str | torch.device = "cpu"):
        self.terrain: Terrain = generate_terrain(cfg.terrain, cfg.terrain_seed)
        self.height_map = HeightMap(self.terrain, device=device)
        self._robot_for_model = robot
        super().__init__(robot, cfg, num_envs, seed, nthread, backend=backend, device=device)
        self.curriculum = TerrainCurriculum(self.terrain, num_envs, self.generator, self.device)

    def _build_model(self) -> mujoco.MjModel:
        return compile_with_terrain(self._robot_for_model.mjcf_path, self.terrain,
                                    remove_geoms=["floor"])

    def terrain_height(self, xy: torch.Tensor) -> torch.Tensor:
        return self.height_map(xy)

    def spawn_origins(self, ids: torch.Tensor) -> torch.Tensor:
        origin = self.curriculum.origins[ids].clone()
        spread = self.cfg.spawn_spread
        origin[:, :2] += (torch.rand(len(ids), 2, generator=self.generator) * 2 - 1) * spread
        origin[:, 2] = self.height_map(origin[:, :2]).clamp(min=origin[:, 2])
        return origin

    def end_episodes(self, ids: torch.Tensor, stats: dict[str, Any]) -> None:
        """Promote or demote by the distance walked. The distance asked of an env is what its
        commands asked so far plus what its current command would have asked over the rest of
        the episode (Rudin et al. 2021 compare with the command times the whole episode): a
        robot that falls early is demoted unless it got far."""
        xy = self.backend.qpos[ids, :2].float()
        walked = torch.linalg.vector_norm(xy - self.origin[ids, :2], dim=-1)
        left_s = (self.max_episode_length - self.episode_length_buf[ids]).clamp(min=0) * self.dt
        asked = (self.commanded_distance[ids]
                 + torch.linalg.vector_norm(self.commands[ids, :2], dim=-1) * left_s)
        self.curriculum.update(ids, walked, asked)
        stats["/curriculum/mean_level"] = self.curriculum.levels.float().mean()
        stats["/curriculum/walked_m"] = walked.mean()
