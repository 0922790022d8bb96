"""deploy/ must run on a robot computer: importing it pulls in neither torch nor mujoco."""

import pkgutil
import subprocess
import sys
from pathlib import Path

from simreal import deploy


def test_deploy_imports_neither_torch_nor_mujoco():
    modules = [f"simreal.deploy.{m.name}" for m in pkgutil.iter_modules(deploy.__path__)]
    assert "simreal.deploy.policy" in modules and "simreal.deploy.observation" in modules
    code = (f"import sys; import {', '.join(modules)}; "
            "bad = [m for m in ('torch', 'mujoco', 'warp') if m in sys.modules]; "
            "print(bad); sys.exit(1 if bad else 0)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=Path(deploy.__file__).parent.parent, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_hil_robot_and_node_processes_import_no_torch():
    """Each HIL run starts both processes; torch would add seconds to each start (and a
    simulated robot needs only MuJoCo), so neither imports it."""
    code = ("import sys; import simreal.hil.robot_proc, simreal.hil.node_proc; "
            "print('torch' in sys.modules); sys.exit(1 if 'torch' in sys.modules else 0)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=Path(deploy.__file__).parent.parent, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
