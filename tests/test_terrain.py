"""Terrain generation, MuJoCo hfield, height lookup and the terrain curriculum."""

import mujoco
import numpy as np
import pytest
import torch
from pydantic import ValidationError

from simreal.sim.terrain import (
    HeightMap,
    TerrainConfig,
    TerrainCurriculum,
    TerrainType,
    add_terrain_to_spec,
    compile_with_terrain,
    generate_terrain,
    to_hfield,
    write_terrain,
)

T = TerrainType
# one column of each type, four levels, 4 m tiles
CFG = TerrainConfig(rows=4, cols=7, tile_size=(4.0, 4.0), horizontal_scale=0.1,
                    vertical_scale=0.005, border=1.0, platform=1.0,
                    proportions={t: 1.0 for t in T},
                    curriculum={"max_init_level": 1})


@pytest.fixture(scope="module")
def terrain():
    return generate_terrain(CFG, seed=0)


def _col(terrain, kind: TerrainType) -> int:
    return terrain.column_types.index(kind)


def _centre_line(terrain, row: int, kind: TerrainType) -> np.ndarray:
    """Heights along x through the tile's centre, from its low-x edge to its centre."""
    tile = terrain.tile_heights(row, _col(terrain, kind)).astype(np.float64)
    tx, ty = CFG.tile_samples
    return tile[:tx // 2 + 1, ty // 2]


def test_deterministic_for_a_seed(terrain):
    again = generate_terrain(CFG, seed=0)
    other = generate_terrain(CFG, seed=1)
    assert np.array_equal(terrain.heights, again.heights)
    assert not np.array_equal(terrain.heights, other.heights)
    # the random types differ between seeds, the deterministic ones do not
    for kind, random in [(T.ROUGH, True), (T.OBSTACLES, True), (T.STAIRS_UP, False)]:
        c = _col(terrain, kind)
        same = np.array_equal(terrain.tile_heights(3, c), other.tile_heights(3, c))
        assert same != random, kind


def test_layout_and_columns(terrain):
    assert terrain.column_types == list(T)
    tx, ty = CFG.tile_samples
    b = CFG.border_samples
    assert terrain.heights.shape == (4 * tx + 2 * b, 7 * ty + 2 * b)
    assert TerrainConfig(cols=10).column_types().count(T.ROUGH) == 2
    assert len(TerrainConfig(cols=3).column_types()) == 3
    # the layout does not depend on the order of the keys (YAML may sort them)
    shuffled = dict(reversed(list(TerrainConfig().proportions.items())))
    assert TerrainConfig(proportions=shuffled).column_types() == TerrainConfig().column_types()


def test_flat_tiles_and_border_are_flat(terrain):
    for r in range(CFG.rows):
        assert np.all(terrain.tile_heights(r, _col(terrain, T.FLAT)) == 0)
    b = CFG.border_samples
    assert np.all(terrain.heights[:b] == 0) and np.all(terrain.heights[:, -b:] == 0)


@pytest.mark.parametrize("kind,sign", [(T.SLOPE_UP, -1), (T.SLOPE_DOWN, 1)])
def test_slopes_have_the_level_gradient(terrain, kind, sign):
    h, vs = CFG.horizontal_scale, CFG.vertical_scale
    ramp = round((CFG.tile_size[0] - CFG.platform) / 2 / h)  # samples from edge to platform
    for r in range(CFG.rows):
        slope = CFG.slope[0] + (CFG.slope[1] - CFG.slope[0]) * CFG.difficulty(r)
        line = _centre_line(terrain, r, kind)
        rise = np.diff(line[:ramp + 1])
        # quantized heights: each step within one vertical unit, the whole ramp to within one
        assert np.all(np.abs(rise - sign * slope * h) <= vs + 1e-6)
        assert abs(line[ramp] - line[0] - sign * slope * ramp * h) <= vs + 1e-6
        assert np.all(line[ramp:] == line[ramp])  # the platform is flat
        assert line[0] == 0  # tile edges meet the neighbours at zero


@pytest.mark.parametrize("kind,sign", [(T.STAIRS_UP, -1), (T.STAIRS_DOWN, 1)])
def test_stairs_have_the_level_step_height(terrain, kind, sign):
    vs = CFG.vertical_scale
    for r in range(CFG.rows):
        step = CFG.step_height[0] + (CFG.step_height[1] - CFG.step_height[0]) * CFG.difficulty(r)
        line = _centre_line(terrain, r, kind)
        jumps = np.diff(line)
        risers = jumps[jumps != 0]
        n_steps = int((CFG.tile_size[0] - CFG.platform) / 2 / CFG.step_width)
        assert len(risers) == n_steps
        assert np.all(np.abs(risers - sign * step) <= vs + 1e-6)
        # treads: runs between risers as wide as step_width, to a sample
        edges = np.flatnonzero(jumps) + 1
        assert np.all(np.abs(np.diff(edges) * CFG.horizontal_scale - CFG.step_width)
                      <= CFG.horizontal_scale + 1e-9)


def test_obstacles_and_rough_stay_in_bounds(terrain):
    vs = CFG.vertical_scale
    tx, ty = CFG.tile_samples
    half = round(CFG.platform / 2 / CFG.horizontal_scale)
    for r in range(CFG.rows):
        d = CFG.difficulty(r)
        hmax = CFG.obstacle_height[0] + (CFG.obstacle_height[1] - CFG.obstacle_height[0]) * d
        tile = terrain.tile_heights(r, _col(terrain, T.OBSTACLES))
        nonzero = np.abs(tile[tile != 0])
        assert len(nonzero) > 0
        assert nonzero.max() <= hmax + vs / 2 and nonzero.min() >= hmax / 2 - vs / 2
        platform = tile[tx // 2 - half + 1:tx // 2 + half, ty // 2 - half + 1:ty // 2 + half]
        assert np.all(platform == 0)
        amp = CFG.rough_amplitude[0] + (CFG.rough_amplitude[1] - CFG.rough_amplitude[0]) * d
        rough = terrain.tile_heights(r, _col(terrain, T.ROUGH))
        assert np.abs(rough).max() <= amp + vs / 2 and rough.std() > amp / 4


def test_spawn_points_are_tile_centres_on_the_platform(terrain):
    r, c = 2, _col(terrain, T.STAIRS_DOWN)
    x, y, z = terrain.spawn[r, c]
    assert (x, y) == pytest.approx(((r + 0.5) * 4.0, (c + 0.5) * 4.0))
    assert z == pytest.approx(HeightMap(terrain)(torch.tensor([[x, y]])).item())
    assert z > 0.3  # the top of a pyramid of stairs


def test_height_lookup_matches_the_grid(terrain):
    hm = HeightMap(terrain)
    rng = np.random.default_rng(0)
    i = rng.integers(0, terrain.heights.shape[0], size=(50, 3))
    j = rng.integers(0, terrain.heights.shape[1], size=(50, 3))
    xy = np.stack([terrain.origin[0] + i * 0.1, terrain.origin[1] + j * 0.1], axis=-1)
    got = hm(torch.tensor(xy, dtype=torch.float32))
    assert got.shape == (50, 3)
    assert torch.allclose(got, torch.from_numpy(terrain.heights[i, j]), atol=1e-5)
    # between samples: bilinear, so the cell centre is the mean of its corners
    i0, j0 = 40, 123
    centre = torch.tensor([[terrain.origin[0] + (i0 + 0.5) * 0.1,
                            terrain.origin[1] + (j0 + 0.5) * 0.1]])
    corners = terrain.heights[i0:i0 + 2, j0:j0 + 2].mean()
    assert hm(centre).item() == pytest.approx(corners, abs=1e-5)
    # off the grid: the edge's height
    assert hm(torch.tensor([[-100.0, -100.0]])).item() == terrain.heights[0, 0]


def _ray_heights(model, data, xy: np.ndarray) -> np.ndarray:
    out = []
    geomid = np.zeros(1, dtype=np.int32)
    for x, y in xy:
        dist = mujoco.mj_ray(model, data, np.array([x, y, 10.0]), np.array([0, 0, -1.0]),
                             None, 1, -1, geomid)
        out.append(10.0 - dist)
    return np.array(out)


def _grid_points(terrain, n: int, seed: int):
    rng = np.random.default_rng(seed)
    nx, ny = terrain.heights.shape
    i, j = rng.integers(1, nx - 1, n), rng.integers(1, ny - 1, n)
    xy = np.stack([terrain.origin[0] + i * 0.1, terrain.origin[1] + j * 0.1], axis=-1)
    return xy, terrain.heights[i, j]


def test_hfield_in_mujoco_matches_the_heights(terrain):
    hf = to_hfield(terrain)
    assert hf.data.min() == 0 and hf.data.max() == pytest.approx(1.0)
    spec = mujoco.MjSpec()
    add_terrain_to_spec(spec, terrain)
    model = spec.compile()
    data = mujoco.MjData(model)
    mujoco.mj_forward(model, data)
    xy, expected = _grid_points(terrain, 200, seed=1)
    assert np.allclose(_ray_heights(model, data, xy), expected, atol=1e-4)

    other = generate_terrain(CFG, seed=5)
    write_terrain(model, other)
    mujoco.mj_forward(model, data)
    xy, expected = _grid_points(other, 200, seed=2)
    assert np.allclose(_ray_heights(model, data, xy), expected, atol=1e-4)
    with pytest.raises(ValueError, match="samples"):
        write_terrain(model, generate_terrain(CFG.model_copy(update={"rows": 3}), 0))


@pytest.mark.parametrize("kind", [T.FLAT, T.STAIRS_DOWN, T.SLOPE_UP])
def test_ball_rests_on_the_terrain(terrain, kind):
    spec = mujoco.MjSpec()
    spec.option.timestep = 0.002
    add_terrain_to_spec(spec, terrain)
    ball = spec.worldbody.add_body(name="ball")
    ball.add_freejoint()
    radius = 0.1
    ball.add_geom(type=mujoco.mjtGeom.mjGEOM_SPHERE, size=[radius, 0, 0], density=1000)
    model = spec.compile()
    data = mujoco.MjData(model)
    x, y, z = terrain.spawn[3, _col(terrain, kind)]
    data.qpos[:3] = (x, y, z + 0.5)
    for _ in range(1500):  # 3 s: falls 0.5 m and settles
        mujoco.mj_step(model, data)
    assert data.qpos[2] - radius == pytest.approx(z, abs=0.005)
    assert np.linalg.norm(data.qvel[:3]) < 0.01
    assert np.linalg.norm(data.qpos[:2] - (x, y)) < 0.01  # on a flat platform: no rolling


def test_compile_robot_mjcf_with_terrain(terrain, tmp_path):
    mjcf = tmp_path / "robot.xml"
    mjcf.write_text('<mujoco><worldbody><geom name="floor" type="plane" size="5 5 1"/>'
                    '<body name="base"><freejoint/><geom type="box" size=".1 .1 .1"/></body>'
                    '</worldbody></mujoco>')
    model = compile_with_terrain(mjcf, terrain, remove_geoms=["floor"])
    assert mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_GEOM, "floor") == -1
    assert model.ngeom == 2 and model.nhfield == 1
    with pytest.raises(ValueError, match=r"robot\.xml: no geom 'ground'"):
        compile_with_terrain(mjcf, terrain, remove_geoms=["ground"])


def test_curriculum_promotes_and_demotes(terrain):
    n = 6
    cur = TerrainCurriculum(terrain, n, torch.Generator().manual_seed(0))
    assert cur.columns.tolist() == [0, 1, 2, 3, 4, 5]
    assert cur.levels.max() <= 1  # max_init_level
    cur.levels[:] = torch.tensor([1, 1, 1, 0, 3, 2])
    ids = torch.arange(n)
    promote = cur.promote_distance + 0.1  # more than half a 4 m tile
    distance = torch.tensor([promote, 1.0, 1.9, 0.5, promote, 1.5])
    command = torch.tensor([12.0, 4.0, 3.0, 4.0, 4.0, 6.0])  # m asked over the episode
    cur.update(ids, distance, command)
    # up (far enough wins over short of half the command); 1.0 < 2.0: down; 1.9 >= 1.5:
    # stays; down at 0 stays 0; beyond the top: a random level; 1.5 < 3.0: down
    levels = cur.levels.tolist()
    assert levels[:4] == [2, 0, 1, 0] and levels[5] == 1
    assert 0 <= levels[4] < CFG.rows
    assert torch.equal(cur.origins, torch.from_numpy(terrain.spawn)[cur.levels, cur.columns])
    # only the ids given move
    before = cur.levels.clone()
    cur.update(torch.tensor([1]), torch.tensor([promote]), torch.tensor([1.0]))
    assert cur.levels.tolist() == [before[0], before[1] + 1, *before[2:].tolist()]


def test_curriculum_sends_top_level_robots_to_random_levels(terrain):
    n = 400
    cur = TerrainCurriculum(terrain, n, torch.Generator().manual_seed(1))
    cur.levels[:] = CFG.rows - 1
    cur.update(torch.arange(n), torch.full((n,), 10.0), torch.zeros(n))
    counts = torch.bincount(cur.levels, minlength=CFG.rows)
    assert len(counts) == CFG.rows and counts.min() > 50  # every level, none beyond the top
    again = TerrainCurriculum(terrain, n, torch.Generator().manual_seed(1))
    again.levels[:] = CFG.rows - 1
    again.update(torch.arange(n), torch.full((n,), 10.0), torch.zeros(n))
    assert torch.equal(cur.levels, again.levels)  # seeded


def test_curriculum_off_draws_random_levels(terrain):
    cfg = CFG.model_copy(update={"curriculum": CFG.curriculum.model_copy(
        update={"enabled": False})})
    flat = generate_terrain(cfg, 0)
    cur = TerrainCurriculum(flat, 400, torch.Generator().manual_seed(0))
    cur.update(torch.arange(400), torch.zeros(400), torch.full((400,), 10.0))
    assert torch.bincount(cur.levels, minlength=CFG.rows).min() > 50


def test_config_errors_name_the_field():
    with pytest.raises(ValidationError, match="tile_size x"):
        TerrainConfig(tile_size=(8.05, 8.0))
    with pytest.raises(ValidationError, match="extra"):
        TerrainConfig(hills=1)
    with pytest.raises(ValidationError, match="step_height"):
        TerrainConfig(step_height=(0.2, 0.1))
    with pytest.raises(ValidationError, match="max_init_level"):
        TerrainConfig(rows=3, curriculum={"max_init_level": 3})
    with pytest.raises(ValidationError, match="proportions"):
        TerrainConfig(proportions={"flat": 0.0})
