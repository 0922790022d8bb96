import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch loads; see simreal/__init__
# MuJoCo Warp's compiled kernels (tests/test_mjwarp.py): one cache in the checkout, so every
# test of a CI run after the first loads them instead of compiling (.gitignored)
os.environ.setdefault("WARP_CACHE_PATH", os.path.join(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))), ".cache", "warp"))

import shutil  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

from simreal.sim.tasks.quadrotor_hover import TRAIN_DEFAULTS  # noqa: E402

# environment steps per PPO iteration of the 64-env runs below
STEPS_PER_ITERATION = 64 * TRAIN_DEFAULTS["ppo"]["config"].get("steps_per_env", 24)
ROBOTS = Path(__file__).resolve().parent.parent / "robots"


@pytest.fixture
def crazyflie_copy(tmp_path: Path) -> Path:
    """A writable copy of the crazyflie description, to break on purpose."""
    dst = tmp_path / "crazyflie"
    shutil.copytree(ROBOTS / "crazyflie", dst)
    return dst


@pytest.fixture(scope="session")
def trained_run(tmp_path_factory) -> Path:
    """A short PPO run of quadrotor-hover (not a good policy: a real one, for plumbing tests)."""
    from simreal.api import train

    out = tmp_path_factory.mktemp("run") / "hover"
    train("quadrotor-hover", algo="ppo", envs=64, steps=2 * STEPS_PER_ITERATION, seed=3, out=out,
          eval_episodes=8, progress=False)
    return out


# The README's command runs the suite on two pytest-xdist workers (pyproject addopts). Tests
# that open DDS participants (fixed domain ids here, a pid-derived one in HIL runs) share one
# worker, so no two of them ever meet on a domain; they are mostly the HIL runs, which are
# paced to real time and light on CPU, so the other worker's CPU-bound tests (learning,
# physics) run beside them, as the "another busy process" a robot computer may have. MuJoCo
# Warp's tests share the other group: one process compiles the kernel cache the rest load.
# The groups go first in the queue, then the two learning tests (~2-3 minutes each): the
# longest units should not start last.
XDIST_GROUPS = {
    "dds": {"test_dds.py", "test_dds_types.py", "test_hil.py", "test_node_dds.py",
            "test_transport.py", "test_node_contract.py"},
    "warp": {"test_mjwarp.py", "test_hover_physics.py", "test_go2_physics.py"},
}
LONGEST_FIRST = ("test_go2_learning.py", "test_arm_learning.py")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    rank = {}
    for item in items:
        group = next((g for g, files in XDIST_GROUPS.items() if item.path.name in files), None)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
            rank[item.nodeid] = list(XDIST_GROUPS).index(group)
        elif item.path.name in LONGEST_FIRST:
            rank[item.nodeid] = len(XDIST_GROUPS) + LONGEST_FIRST.index(item.path.name)
        else:
            rank[item.nodeid] = len(XDIST_GROUPS) + len(LONGEST_FIRST)
    items.sort(key=lambda item: rank[item.nodeid])  # stable: file order kept within a rank
