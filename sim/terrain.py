"""Heightfield terrain and the distance-driven terrain curriculum.

The terrain is a grid of square-ish tiles surrounded by a flat border. Rows of tiles (along
world x) are difficulty levels: row 0 is the easiest, the last row the hardest. Columns
(along world y) are terrain types, allotted by the configured proportions, so one column keeps
one type at every level. Every tile has a flat platform at its centre, where robots spawn.

The curriculum follows the idea of "Learning to Walk in Minutes Using Massively Parallel Deep
Reinforcement Learning" (Rudin, Hoeller, Reist, Hutter, CoRL 2021): each robot owns a level
and a column; at the end of an episode a robot that walked far (past a set fraction of the
tile) moves to the next harder row, one that covered much less than its velocity command
asked for moves to an easier row, and a robot that walks off the hardest row is sent to a
random row, so the population keeps revisiting every level instead of piling up at the top.

Pieces a task uses:
- `generate_terrain(cfg, seed)` -> `Terrain` (numpy heights in metres, spawn origins),
  deterministic for a seed;
- `add_terrain_to_spec(spec, terrain)` / `compile_with_terrain(mjcf, terrain)` put it into a
  MuJoCo model as an hfield geom; `write_terrain(model, terrain)` rewrites the data of a
  compiled model;
- `HeightMap(terrain)`: batched torch height lookup at (..., 2) world xy points;
- `TerrainCurriculum`: per-env level and column, spawn origins, promotion and demotion.

World frame: height sample (i, j) lies at x = i*h - border, y = j*h - border (h the horizontal
scale), so tile (row r, column c) spans x in [r*Lx, (r+1)*Lx], y in [c*Ly, (c+1)*Ly].
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

import mujoco
import numpy as np
import torch
from pydantic import Field, model_validator

from simreal.core.config import StrictModel


class TerrainType(StrEnum):
    FLAT = "flat"
    SLOPE_UP = "slope_up"  # pyramid pit: walking out from the centre climbs
    SLOPE_DOWN = "slope_down"  # pyramid: walking out from the centre descends
    ROUGH = "rough"  # uniform random heights
    STAIRS_UP = "stairs_up"  # square rings of steps rising away from the centre
    STAIRS_DOWN = "stairs_down"  # square rings of steps falling away from the centre
    OBSTACLES = "obstacles"  # random rectangular blocks and pits


Range = tuple[float, float]


class CurriculumConfig(StrictModel):
    enabled: bool = True  # False: every reset draws a random level
    max_init_level: int = Field(4, ge=0)  # robots start at random levels 0..this
    promote_fraction: float = Field(0.5, gt=0)  # of the tile's shorter side, walked
    demote_fraction: float = Field(0.5, ge=0)  # of the commanded distance


class TerrainConfig(StrictModel):
    """The terrain grid; ranges (low, high) are the values at the easiest and hardest row."""

    rows: int = Field(10, ge=1)  # difficulty levels, along x
    cols: int = Field(10, ge=1)  # terrain columns, along y
    tile_size: tuple[float, float] = (8.0, 8.0)  # m, along x and y
    horizontal_scale: float = Field(0.1, gt=0)  # m between height samples
    vertical_scale: float = Field(0.005, gt=0)  # m; heights are whole multiples of it
    border: float = Field(10.0, ge=0)  # m of flat ground around the grid
    platform: float = Field(2.0, ge=0)  # m, side of the flat square at each tile's centre
    proportions: dict[TerrainType, float] = {
        TerrainType.FLAT: 0.1, TerrainType.SLOPE_UP: 0.1, TerrainType.SLOPE_DOWN: 0.1,
        TerrainType.ROUGH: 0.2, TerrainType.STAIRS_UP: 0.15, TerrainType.STAIRS_DOWN: 0.15,
        TerrainType.OBSTACLES: 0.2,
    }
    slope: Range = (0.0, 0.4)  # rise over run of the pyramid faces
    rough_amplitude: Range = (0.01, 0.06)  # m, heights uniform in [-a, a]
    rough_cell: float = Field(0.2, gt=0)  # m between independent noise samples
    step_height: Range = (0.05, 0.18)  # m
    step_width: float = Field(0.31, gt=0)  # m
    obstacle_height: Range = (0.05, 0.2)  # m, largest |height| of a block or pit
    obstacle_size: Range = (0.4, 1.5)  # m, side lengths drawn in this range
    obstacle_count: int = Field(20, ge=0)  # per tile
    curriculum: CurriculumConfig = CurriculumConfig()

    @model_validator(mode="after")
    def _check(self) -> TerrainConfig:
        h = self.horizontal_scale
        for axis, size in zip("xy", self.tile_size, strict=True):
            n = size / h
            if size <= 0 or abs(n - round(n)) > 1e-6 or round(n) < 2:
                raise ValueError(f"tile_size {axis}: {size} m is not a whole number (>= 2) of "
                                 f"horizontal_scale {h} m")
        if self.platform >= min(self.tile_size):
            raise ValueError(f"platform: {self.platform} m does not fit in tile_size "
                             f"{self.tile_size}")
        if any(p < 0 for p in self.proportions.values()) or sum(self.proportions.values()) <= 0:
            raise ValueError(f"proportions: need non-negative values with a positive sum, got "
                             f"{dict(self.proportions)}")
        for name in ("slope", "rough_amplitude", "step_height", "obstacle_height",
                     "obstacle_size"):
            low, high = getattr(self, name)
            if not 0 <= low <= high:
                raise ValueError(f"{name}: need 0 <= low <= high, got ({low}, {high})")
        if self.curriculum.max_init_level >= self.rows:
            raise ValueError(f"curriculum.max_init_level: {self.curriculum.max_init_level} is "
                             f"not a row of a {self.rows}-row terrain")
        return self

    @property
    def tile_samples(self) -> tuple[int, int]:
        return tuple(round(s / self.horizontal_scale) for s in self.tile_size)  # type: ignore

    @property
    def border_samples(self) -> int:
        return round(self.border / self.horizontal_scale)

    def difficulty(self, row: int) -> float:
        """0 at the first row, 1 at the last (1 for a single-row terrain)."""
        return row / (self.rows - 1) if self.rows > 1 else 1.0

    def column_types(self) -> list[TerrainType]:
        """The type of each column, in TerrainType's order (whatever the order of the
        `proportions` keys): each type gets its share of the columns, rounded by largest
        remainder (so the counts add up to `cols`)."""
        types = [t for t in TerrainType if t in self.proportions]
        share = np.array([self.proportions[t] for t in types], dtype=np.float64)
        share = share / share.sum() * self.cols
        counts = np.floor(share + 1e-9).astype(int)
        for k in np.argsort(-(share - counts), kind="stable")[:self.cols - counts.sum()]:
            counts[k] += 1
        return [t for t, n in zip(types, counts, strict=True) for _ in range(n)]


@dataclass(frozen=True)
class Terrain:
    cfg: TerrainConfig
    heights: np.ndarray  # (nx, ny) float32 metres, sample (i, j) at origin + (i, j) * h
    origin: tuple[float, float]  # world xy of sample (0, 0)
    column_types: list[TerrainType]
    spawn: np.ndarray  # (rows, cols, 3) world spawn point at each tile's centre platform

    @property
    def horizontal_scale(self) -> float:
        return self.cfg.horizontal_scale

    def tile_slice(self, row: int, col: int) -> tuple[slice, slice]:
        """Index ranges of tile (row, col) in `heights`."""
        tx, ty = self.cfg.tile_samples
        b = self.cfg.border_samples
        return slice(b + row * tx, b + (row + 1) * tx), slice(b + col * ty, b + (col + 1) * ty)

    def tile_heights(self, row: int, col: int) -> np.ndarray:
        sx, sy = self.tile_slice(row, col)
        return self.heights[sx, sy]


# --- generation ---------------------------------------------------------------------------

def generate_terrain(cfg: TerrainConfig, seed: int) -> Terrain:
    """The whole grid; each tile draws from its own generator seeded by (seed, row, col), so a
    tile does not change when another's type or size does."""
    tx, ty = cfg.tile_samples
    b = cfg.border_samples
    heights = np.zeros((cfg.rows * tx + 2 * b, cfg.cols * ty + 2 * b), dtype=np.float64)
    types = cfg.column_types()
    for r in range(cfg.rows):
        for c, kind in enumerate(types):
            rng = np.random.default_rng([seed, r, c])
            tile = _TILES[kind](cfg, cfg.difficulty(r), rng)
            heights[b + r * tx:b + (r + 1) * tx, b + c * ty:b + (c + 1) * ty] = tile
    heights = np.round(heights / cfg.vertical_scale) * cfg.vertical_scale
    origin = (-b * cfg.horizontal_scale, -b * cfg.horizontal_scale)
    terrain = Terrain(cfg, heights.astype(np.float32), origin, types,
                      np.zeros((cfg.rows, cfg.cols, 3), dtype=np.float32))
    _fill_spawn(terrain)
    return terrain


def _fill_spawn(terrain: Terrain) -> None:
    """Tile centres, at the highest point within half a platform of the centre (at least one
    sample), so a robot placed there stands on the ground rather than in it."""
    cfg = terrain.cfg
    lx, ly = cfg.tile_size
    half = max(1, round(cfg.platform / 2 / cfg.horizontal_scale))
    tx, ty = cfg.tile_samples
    for r in range(cfg.rows):
        for c in range(cfg.cols):
            tile = terrain.tile_heights(r, c)
            cx, cy = tx // 2, ty // 2
            z = tile[max(cx - half, 0):cx + half + 1, max(cy - half, 0):cy + half + 1].max()
            terrain.spawn[r, c] = ((r + 0.5) * lx, (c + 0.5) * ly, z)


def _lerp(bounds: Range, d: float) -> float:
    return bounds[0] + (bounds[1] - bounds[0]) * d


def _edge_distance(cfg: TerrainConfig) -> np.ndarray:
    """(tx, ty) distance of each sample to the tile's nearest edge (Chebyshev rings)."""
    tx, ty = cfg.tile_samples
    h = cfg.horizontal_scale
    x = np.arange(tx) * h
    y = np.arange(ty) * h
    dx = np.minimum(x, cfg.tile_size[0] - x)
    dy = np.minimum(y, cfg.tile_size[1] - y)
    return np.minimum(dx[:, None], dy[None, :])


def _platform_distance(cfg: TerrainConfig) -> float:
    """Edge distance where the centre platform starts."""
    return min(cfg.tile_size) / 2 - cfg.platform / 2


def _flat(cfg: TerrainConfig, d: float, rng: np.random.Generator) -> np.ndarray:
    return np.zeros(cfg.tile_samples)


def _pyramid_slope(sign: float):
    def tile(cfg: TerrainConfig, d: float, rng: np.random.Generator) -> np.ndarray:
        e = np.minimum(_edge_distance(cfg), _platform_distance(cfg))
        return sign * _lerp(cfg.slope, d) * e
    return tile


def _rough(cfg: TerrainConfig, d: float, rng: np.random.Generator) -> np.ndarray:
    """Uniform noise on a coarse lattice (every `rough_cell` m), bilinear in between."""
    a = _lerp(cfg.rough_amplitude, d)
    tx, ty = cfg.tile_samples
    h = cfg.horizontal_scale
    step = max(1, round(cfg.rough_cell / h))
    nx, ny = math.ceil((tx - 1) / step) + 1, math.ceil((ty - 1) / step) + 1
    coarse = rng.uniform(-a, a, size=(nx, ny))
    u = np.arange(tx) / step
    v = np.arange(ty) / step
    along_x = np.stack([np.interp(u, np.arange(nx), coarse[:, j]) for j in range(ny)], axis=1)
    return np.stack([np.interp(v, np.arange(ny), along_x[i]) for i in range(tx)], axis=0)


def _pyramid_stairs(sign: float):
    def tile(cfg: TerrainConfig, d: float, rng: np.random.Generator) -> np.ndarray:
        ring = np.floor(_edge_distance(cfg) / cfg.step_width + 1e-9)
        top = math.floor(_platform_distance(cfg) / cfg.step_width + 1e-9)
        return sign * _lerp(cfg.step_height, d) * np.minimum(ring, top)
    return tile


def _obstacles(cfg: TerrainConfig, d: float, rng: np.random.Generator) -> np.ndarray:
    """Blocks and pits of |height| in [hmax/2, hmax], the centre platform kept flat."""
    tx, ty = cfg.tile_samples
    h = cfg.horizontal_scale
    hmax = _lerp(cfg.obstacle_height, d)
    out = np.zeros((tx, ty))
    for _ in range(cfg.obstacle_count):
        sx, sy = (max(1, round(s / h)) for s in rng.uniform(*cfg.obstacle_size, size=2))
        i = int(rng.integers(0, max(1, tx - sx + 1)))
        j = int(rng.integers(0, max(1, ty - sy + 1)))
        out[i:i + sx, j:j + sy] = rng.choice([-1.0, 1.0]) * rng.uniform(hmax / 2, hmax)
    out[_edge_distance(cfg) >= _platform_distance(cfg)] = 0.0
    return out


_TILES = {
    TerrainType.FLAT: _flat,
    TerrainType.SLOPE_UP: _pyramid_slope(-1.0),
    TerrainType.SLOPE_DOWN: _pyramid_slope(1.0),
    TerrainType.ROUGH: _rough,
    TerrainType.STAIRS_UP: _pyramid_stairs(-1.0),
    TerrainType.STAIRS_DOWN: _pyramid_stairs(1.0),
    TerrainType.OBSTACLES: _obstacles,
}


# --- MuJoCo ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class HField:
    """The terrain as MuJoCo's hfield takes it: elevation = pos_z + data * size[2]."""

    nrow: int  # samples along y
    ncol: int  # samples along x
    size: tuple[float, float, float, float]  # x and y half extents, elevation scale, base depth
    data: np.ndarray  # (nrow * ncol,) float32 in [0, 1], row-major, row 0 at the lowest y
    pos: tuple[float, float, float]  # geom position: grid centre, lowest height


def to_hfield(terrain: Terrain, base: float = 1.0) -> HField:
    """MuJoCo normalizes hfield data to [0, 1] when it compiles, so we hand it normalized data
    and carry the range in the elevation scale and the offset in the geom's z."""
    heights = terrain.heights.astype(np.float64)
    nx, ny = heights.shape
    h = terrain.horizontal_scale
    low, high = float(heights.min()), float(heights.max())
    scale = high - low
    data = (heights - low) / scale if scale > 0 else np.zeros_like(heights)
    half_x, half_y = (nx - 1) * h / 2, (ny - 1) * h / 2
    pos = (terrain.origin[0] + half_x, terrain.origin[1] + half_y, low)
    size = (half_x, half_y, scale if scale > 0 else terrain.cfg.vertical_scale, base)
    return HField(ny, nx, size, data.T.astype(np.float32).ravel(), pos)


def add_terrain_to_spec(spec: mujoco.MjSpec, terrain: Terrain, name: str = "terrain",
                        friction: Sequence[float] = (1.0, 0.005, 0.0001),
                        rgba: Sequence[float] = (0.45, 0.5, 0.55, 1.0)) -> mujoco.MjsGeom:
    """Add the hfield asset `name` and a world geom `name` resting on it to `spec`."""
    hf = to_hfield(terrain)
    asset = spec.add_hfield(name=name, nrow=hf.nrow, ncol=hf.ncol, size=list(hf.size))
    asset.userdata = hf.data.tolist()
    return spec.worldbody.add_geom(name=name, type=mujoco.mjtGeom.mjGEOM_HFIELD, hfieldname=name,
                                   pos=list(hf.pos), friction=list(friction), rgba=list(rgba))


def compile_with_terrain(mjcf_path: str | Path, terrain: Terrain, name: str = "terrain",
                         remove_geoms: Sequence[str] = ()) -> mujoco.MjModel:
    """Compile a robot MJCF with the terrain added (and its own ground geoms, named in
    `remove_geoms`, taken out), naming the file in any error."""
    try:
        spec = mujoco.MjSpec.from_file(str(mjcf_path))
    except ValueError as exc:
        raise ValueError(f"{mjcf_path}: MuJoCo cannot read it: {exc}") from None
    for geom_name in remove_geoms:
        geom = spec.geom(geom_name)
        if geom is None:
            raise ValueError(f"{mjcf_path}: no geom {geom_name!r} to replace with the terrain")
        spec.delete(geom)
    add_terrain_to_spec(spec, terrain, name)
    try:
        return spec.compile()
    except ValueError as exc:
        raise ValueError(f"{mjcf_path}: MuJoCo cannot compile it with the terrain: {exc}"
                         ) from None


def write_terrain(model: mujoco.MjModel, terrain: Terrain, name: str = "terrain") -> None:
    """Write a terrain of the same sample counts into a compiled model's hfield `name` and its
    geom (also named `name`). A mujoco.batch.Batch copies its model when made: write before
    making it. A live renderer needs mujoco.mjr_uploadHField afterwards."""
    hid = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_HFIELD, name)
    gid = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_GEOM, name)
    if hid < 0 or gid < 0:
        raise ValueError(f"model has no hfield and geom named {name!r}")
    hf = to_hfield(terrain)
    shape = (int(model.hfield_nrow[hid]), int(model.hfield_ncol[hid]))
    if shape != (hf.nrow, hf.ncol):
        raise ValueError(f"hfield {name!r} is {shape[0]}x{shape[1]} samples, the terrain "
                         f"{hf.nrow}x{hf.ncol}")
    adr = int(model.hfield_adr[hid])
    model.hfield_data[adr:adr + hf.nrow * hf.ncol] = hf.data
    model.hfield_size[hid] = hf.size
    model.geom_pos[gid] = hf.pos


# --- torch lookups --------------------------------------------------------------------------

class HeightMap:
    """Terrain height at world xy points, bilinear between samples, batched in torch.

    Points outside the grid take the height of its nearest edge (the flat border). MuJoCo
    triangulates each cell instead, so the two agree exactly at samples and to within a cell's
    height change in between.
    """

    def __init__(self, terrain: Terrain, device: torch.device | str = "cpu"):
        self.heights = torch.as_tensor(terrain.heights, dtype=torch.float32, device=device)
        self.origin = torch.tensor(terrain.origin, dtype=torch.float32, device=device)
        self.scale = terrain.horizontal_scale

    def __call__(self, xy: torch.Tensor) -> torch.Tensor:
        """Heights (...,) at points (..., 2)."""
        nx, ny = self.heights.shape
        g = (xy.to(self.heights) - self.origin) / self.scale
        gx = g[..., 0].clamp(0, nx - 1)
        gy = g[..., 1].clamp(0, ny - 1)
        x0 = gx.floor().long().clamp(max=nx - 2)
        y0 = gy.floor().long().clamp(max=ny - 2)
        fx, fy = gx - x0, gy - y0
        hm = self.heights
        h00, h10 = hm[x0, y0], hm[x0 + 1, y0]
        h01, h11 = hm[x0, y0 + 1], hm[x0 + 1, y0 + 1]
        return ((h00 * (1 - fx) + h10 * fx) * (1 - fy) + (h01 * (1 - fx) + h11 * fx) * fy)


# --- curriculum -----------------------------------------------------------------------------

class TerrainCurriculum:
    """Per-env terrain level (row) and column, and the spawn origin they give.

    Columns are fixed per env, spread evenly (env k gets column k * cols // num_envs); levels
    start uniform in 0..max_init_level. `update(ids, distance, command_distance)` is called for
    the envs about to reset, before their new origins are read.
    """

    def __init__(self, terrain: Terrain, num_envs: int, generator: torch.Generator,
                 device: torch.device | str = "cpu"):
        cfg = terrain.cfg
        self.cfg = cfg.curriculum
        self.rows, self.cols = cfg.rows, cfg.cols
        self.generator = generator
        self.promote_distance = self.cfg.promote_fraction * min(cfg.tile_size)
        self.spawn = torch.as_tensor(terrain.spawn, dtype=torch.float32, device=device)
        self.columns = torch.arange(num_envs, device=device) * self.cols // num_envs
        top = self.cfg.max_init_level if self.cfg.enabled else self.rows - 1
        self.levels = self._random_levels(num_envs, top + 1)

    def _random_levels(self, n: int, high: int) -> torch.Tensor:
        return torch.randint(0, high, (n,), generator=self.generator).to(self.spawn.device)

    @property
    def origins(self) -> torch.Tensor:
        """(num_envs, 3) spawn point of each env's current tile."""
        return self.spawn[self.levels, self.columns]

    def update(self, ids: torch.Tensor, distance: torch.Tensor, command_distance: torch.Tensor
               ) -> None:
        """Move envs `ids` after their episode: `distance` is how far each walked from its
        origin (m, horizontal), `command_distance` how far its velocity command asked it to go
        over the episode (|v_xy| times episode length)."""
        if len(ids) == 0:
            return
        if not self.cfg.enabled:
            self.levels[ids] = self._random_levels(len(ids), self.rows)
            return
        up = distance > self.promote_distance
        down = (distance < self.cfg.demote_fraction * command_distance) & ~up
        level = self.levels[ids] + up.long() - down.long()
        beyond = level >= self.rows
        level = torch.where(beyond, self._random_levels(len(ids), self.rows), level)
        self.levels[ids] = level.clamp(min=0)

    def mean_level(self) -> float:
        return self.levels.float().mean().item()
