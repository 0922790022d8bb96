"""One import namespace: the distribution claims `simreal` alone, so a user's own `sim.py`,
`train.py` or `deploy.py` beside their script cannot shadow ours (nor ours theirs)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import simreal

ROOT = Path(simreal.__file__).resolve().parent.parent


def _run_script(folder: Path, text: str, timeout: float) -> list[str]:
    """Run `text` as folder/script.py from `folder` (not the checkout); its stdout lines."""
    (folder / "script.py").write_text(text)
    proc = subprocess.run([sys.executable, "script.py"], cwd=folder, capture_output=True,
                          text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.strip().splitlines()


def test_every_registered_algorithm_and_task_loads_outside_the_checkout(tmp_path):
    # pytest puts the checkout on sys.path, where `train.td3` would import too; a user's
    # process has only the installed `simreal` (and here a `train.py` of their own)
    (tmp_path / "train.py").write_text("WHO = 'the user'\n")
    lines = _run_script(tmp_path, (
        "from simreal.train.algos import ALGOS\n"
        "from simreal.sim.registry import task_names, get_task\n"
        "for a in ALGOS.values():\n"
        "    print(a.name, a.config().__module__, a.runner().__module__)\n"
        "for name in task_names():\n"
        "    print(name, get_task(name).__module__)\n"), timeout=120)
    rows = [line.split() for line in lines]
    assert {r[0] for r in rows} >= {"ppo", "sac", "td3", "quadrotor-hover", "go2-flat"}
    assert all(m.startswith("simreal.") for r in rows for m in r[1:]), rows


def test_a_script_beside_its_own_train_sim_and_deploy_modules_uses_simreal(tmp_path):
    for name in ("train", "sim", "deploy", "robots", "hil", "calibration"):
        (tmp_path / f"{name}.py").write_text(f"WHO = 'the user\\'s own {name}'\n")
    lines = _run_script(tmp_path, (
        "import train, sim, deploy\n"
        "import simreal\n"
        "from simreal import make_env, train as simreal_train\n"
        "env = make_env('quadrotor-hover', num_envs=2, seed=0)\n"
        "obs = env.get_observations()\n"
        "print(train.WHO, sim.WHO, deploy.WHO, sep='|')\n"
        "import simreal.train.ppo\n"  # the training package: `train` stays callable
        "summary = simreal_train('quadrotor-hover', algo='ppo', envs=8, steps=512, seed=0,\n"
        "                        out='run', eval_episodes=4, progress=False)\n"
        "print(tuple(obs['policy'].shape), summary['env_steps'] >= 512,\n"
        "      simreal_train.ppo is simreal.train.ppo)\n"), timeout=300)
    assert lines[-2] == "the user's own train|the user's own sim|the user's own deploy"
    assert lines[-1].startswith("(2, ") and lines[-1].endswith("True True")
    assert (tmp_path / "run" / "policy.onnx").is_file()


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    # built from a copy: pip builds in the source tree, and the suite leaves the tree alone
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    for folder in ("simreal", "core", "robots", "deploy", "sim", "train", "hil", "calibration"):
        shutil.copytree(ROOT / folder, src / folder,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet",
                           "-w", str(out), str(src)], capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (path,) = out.glob("simreal-*.whl")
    return path


def test_the_wheel_claims_only_simreal_and_carries_every_folder(wheel):
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        top = next(n for n in names if n.endswith(".dist-info/top_level.txt"))
        assert zf.read(top).decode().split() == ["simreal"]
        meta = zf.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    roots = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert roots == {"simreal"}
    # every module of every folder (a subpackage missing from pyproject's list would not be)
    # and the robot descriptions
    expected = {"simreal/robots/go2/robot.yaml", "simreal/robots/go2/go2.xml"}
    for folder in ("simreal", "core", "robots", "deploy", "sim", "train", "hil", "calibration"):
        prefix = "simreal" if folder == "simreal" else f"simreal/{folder}"
        expected |= {f"{prefix}/{p.relative_to(ROOT / folder).as_posix()}"
                     for p in (ROOT / folder).rglob("*.py")}
    assert "simreal/sim/vec_env.py" in expected
    assert not expected - set(names), sorted(expected - set(names))
    # the deploy-only install (`pip install .`) pulls neither torch nor mujoco
    plain = [line for line in meta.splitlines()
             if line.startswith("Requires-Dist:") and "extra ==" not in line]
    assert plain and not any(("torch" in r or "mujoco" in r) for r in plain), plain
