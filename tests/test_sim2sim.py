"""sim2sim (simreal/sim2sim.py): the tracking table against another MJCF of the robot, on a
reduced table. tests/assets/go2_other.xml is an independently written Go2 (other body names,
its own position actuators and torque sensors, published link inertials, the other public
MJCF's joint parameters, a 0.004 s timestep): sim2sim must match it by joint names, replace
its actuators and keep its torque limits; a model without a joint, a floor or a free joint is
refused, naming it (exit 2 through the CLI)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import mujoco
import numpy as np
import pytest

from simreal import api
from simreal.cli import main
from simreal.sim2sim import OtherModel, Sim2SimError, load_spec

from .test_tracking import _check_table, walk_or_stand

ASSETS = Path(__file__).resolve().parent / "assets"
OTHER = ASSETS / "go2_other.xml"


@pytest.fixture(scope="module")
def go2_policy(tmp_path_factory) -> Path:
    return walk_or_stand(tmp_path_factory.mktemp("go2"))


SHORT = {"commands": [[0.5, 0.0, 0.0], [0.0, 0.0, 0.5]], "episodes": 2, "episode_s": 3.0,
         "settle_s": 1.0}


def test_hard_variant_runs_and_returns_a_table(go2_policy):
    result = api.sim2sim(go2_policy, "go2", variant="hard", **SHORT)
    _check_table(result, SHORT["commands"], 2)
    assert result["timestep"] == 0.002
    calf = {k: v for k, v in result["torque_limits"].items() if "calf" in k}
    assert set(calf.values()) == {45.43}


def test_hard_variant_model():
    from simreal.robots.registry import get_robot

    robot = get_robot("go2")
    spec, _ = load_spec(robot, None, "hard")
    m = OtherModel(robot, spec, "hard").model
    assert m.opt.timestep == 0.002 and m.opt.impratio == 100
    assert m.opt.cone == mujoco.mjtCone.mjCONE_ELLIPTIC
    j = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_JOINT, "FL_calf_joint")
    assert m.dof_damping[m.jnt_dofadr[j]] == 2.0 and m.dof_frictionloss[m.jnt_dofadr[j]] == 0.2
    feet = [g for g in range(m.ngeom) if m.geom_condim[g] == 6]
    assert len(feet) == 4 and all(abs(m.geom_friction[g, 0] - 0.8) < 1e-9 for g in feet)


def test_other_mjcf_is_matched_by_joint_names(go2_policy):
    result = api.sim2sim(go2_policy, "go2", mjcf=OTHER, **SHORT)
    _check_table(result, SHORT["commands"], 2)
    assert result["timestep"] == 0.004 and result["base_body"] == "base"
    assert sorted(result["removed_actuators"]) == sorted(
        f"{leg}_{part}_servo" for leg in ("FR", "FL", "RR", "RL")
        for part in ("hip", "thigh", "calf"))
    assert result["torque_limits"]["RL_calf_joint"] == 45.43
    assert result["torque_limits"]["RL_hip_joint"] == 23.7


def test_other_mjcf_pd_replaces_its_actuators():
    from simreal.robots.registry import get_robot

    robot = get_robot("go2")
    spec, src = load_spec(robot, OTHER, None)
    other = OtherModel(robot, spec, src, imu_site="imu_link")
    m = other.model
    assert m.nu == 12  # its 12 servos gone, robot.yaml's 12 PD drivers in their place
    for j, a in zip(robot.spec.joints, other.act_ids, strict=True):
        assert m.actuator_gainprm[a, 0] == j.kp and m.actuator_biasprm[a, 2] == -j.kd
        assert m.actuator_biasprm[a, 0] == pytest.approx(j.kp * j.default)


def _edited(tmp_path: Path, pattern: str, replacement: str) -> Path:
    text = OTHER.read_text()
    new, count = re.subn(pattern, replacement, text, count=1)
    assert count == 1
    path = tmp_path / "edited.xml"
    path.write_text(new)
    return path


@pytest.mark.parametrize(("pattern", "replacement", "named"), [
    (r'name="RL_calf_joint"', 'name="RL_knee"', "RL_calf_joint"),
    (r'<geom name="ground"[^>]*/>', "", "no floor"),
    (r'<freejoint name="floating_base"/>', "", "no free joint"),
])
def test_incomplete_models_are_refused_naming_what_is_missing(tmp_path, go2_policy, capsys,
                                                              pattern, replacement, named):
    bad = _edited(tmp_path, pattern, replacement)
    with pytest.raises(Sim2SimError, match=named):
        api.sim2sim(go2_policy, "go2", mjcf=bad, **SHORT)
    code = main(["sim2sim", str(go2_policy), "--robot", "go2", "--mjcf", str(bad),
                 "--episodes", "1", "--episode-s", "0.1", "--json"])
    err = capsys.readouterr().err
    assert code == 2 and named in err, err


def test_cli_one_command_with_a_perturbation(go2_policy, capsys):
    code = main(["sim2sim", str(go2_policy), "--robot", "go2", "--variant", "hard",
                 "--episodes", "1", "--episode-s", "1", "--perturb", "friction=0.3",
                 "--perturb", "latency=0.04", "--json"])
    assert code == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert [r["command"] for r in result["tracking"]] == [[0.5, 0.0, 0.0]]
    assert result["perturbation"] == {"friction": 0.3, "latency": 0.04}
    code = main(["sim2sim", str(go2_policy), "--robot", "go2", "--variant", "hard",
                 "--perturb", "stiffness=2"])
    assert code == 2 and "stiffness" in capsys.readouterr().err


def test_hard_variant_parts_apply_only_what_they_name():
    """bench/ablate_hard.py's rows: one group of the hard edits leaves the rest of the model
    as it was; an unknown group is an error naming it."""
    from simreal.robots.registry import get_robot
    from simreal.sim2sim import HARD_PARTS, hard_variant

    robot = get_robot("go2")
    base = mujoco.MjSpec.from_file(str(robot.mjcf_path)).compile()
    spec = mujoco.MjSpec.from_file(str(robot.mjcf_path))
    hard_variant(spec, robot, {"cone"})
    m = spec.compile()
    assert m.opt.cone == mujoco.mjtCone.mjCONE_ELLIPTIC and m.opt.impratio == 100
    assert m.opt.timestep == base.opt.timestep
    np.testing.assert_array_equal(m.dof_damping, base.dof_damping)
    np.testing.assert_array_equal(m.geom_solimp, base.geom_solimp)
    spec = mujoco.MjSpec.from_file(str(robot.mjcf_path))
    hard_variant(spec, robot, set(HARD_PARTS) - {"foot_softness"})
    m = spec.compile()
    np.testing.assert_array_equal(m.geom_solimp, base.geom_solimp)
    assert m.opt.timestep == 0.002
    with pytest.raises(Sim2SimError, match="softfeet"):
        hard_variant(mujoco.MjSpec.from_file(str(robot.mjcf_path)), robot, {"softfeet"})
