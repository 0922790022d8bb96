"""A legged robot's leg model for leg odometry (robots/legs.py), read from its compiled MJCF.

The policy contract carries the result (`deploy.contract.LegModel`), so the deploy runtime
computes the same odometry without the MJCF or MuJoCo.
"""

from __future__ import annotations

import mujoco
import numpy as np

from simreal.deploy.contract import LegChain, LegModel
from simreal.robots import Robot

# N m: the stance rule, each leg weighted softmax(sum of its joints' |torque| / this). Measured
# on go2-flat (the walking policy of tests/assets at 0.5 m/s, the task's sensor noise, 8 x 6 s,
# forward bias / rms per step against the true speed): 1 N m -0.003 / 0.278, 2 N m -0.021 /
# 0.249, 4 N m -0.111 / 0.252; weighting by the touch sensors -0.035 / 0.228; by foot height
# (stance_sigma) 2 mm -0.157 / 0.528, 5 mm -0.211 / 0.480, 1 cm -0.304 / 0.493: a few mm of
# height noise from the encoders' 0.01 rad lets swing feet count (noise-free, 2 mm gave -0.07)
STANCE_TORQUE = 2.0
STANCE_SIGMA = 0.002  # m, the height rule
# both (`torque_height`): softmax(sum |torque| / 2 N m + height below the highest foot / 5 mm).
# On damped joints the swing legs carry torque too and the load rule reads low: measured with
# the walking policy of tests/assets (sim2sim, 2 x 8 s, the task's sensor noise; mean read /
# true forward speed, m/s) at vx 0.5: robots/go2 0.500 / 0.492 (load / both) for 0.505;
# tests/assets/go2_other.xml 0.190 / 0.224 for 0.233; the hard variant 0.183 / 0.234 for
# 0.275; at vx -0.5 on go2: -0.483 / -0.491 for -0.537 (3 mm: 0.483, 0.224, 0.244; 1 cm:
# 0.500, 0.216, 0.218)
STANCE_SIGMA_BOTH = 0.005


class LegModelError(ValueError):
    pass


def leg_model(model: mujoco.MjModel, robot: Robot, stance: str = "torque") -> LegModel:
    """Each foot's chain of hinge joints from the base body down to its foot geom (a sphere),
    with the joints' columns in policy order. Bodies must be parallel to their parents at
    zero joint angles (no `quat`), as on the Go2; a body without a joint adds its offset.
    `stance`: the stance rule, "torque" (STANCE_TORQUE), "height" (STANCE_SIGMA) or both,
    "torque_height" (STANCE_TORQUE, STANCE_SIGMA_BOTH)."""
    spec = robot.spec
    columns = {j.name: i for i, j in enumerate(spec.joints)}
    base = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, spec.base_body)
    chains = []
    for foot in spec.feet:
        where = f"{robot.mjcf_path}: foot {foot.name!r}"
        if foot.geom is None:
            raise LegModelError(f"{robot.yaml_path}: foot {foot.name!r} needs its 'geom' for "
                                "leg odometry")
        gid = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_GEOM, foot.geom)
        if int(model.geom_type[gid]) != int(mujoco.mjtGeom.mjGEOM_SPHERE):
            raise LegModelError(f"{where}: geom {foot.geom!r} is not a sphere")
        path = []
        body = int(model.geom_bodyid[gid])
        while body != base:
            if body == 0:
                raise LegModelError(f"{where}: geom {foot.geom!r} is not below the base body "
                                    f"{spec.base_body!r}")
            path.append(body)
            body = int(model.body_parentid[body])
        joints, origins, axes = [], [], []
        offset = np.zeros(3)
        for body in reversed(path):
            if not np.allclose(model.body_quat[body], [1, 0, 0, 0], atol=1e-9):
                raise LegModelError(f"{where}: body {model.body(body).name!r} is rotated "
                                    "from its parent (leg odometry needs parallel frames)")
            offset = offset + model.body_pos[body]
            count = int(model.body_jntnum[body])
            if count == 0:
                continue
            jid = int(model.body_jntadr[body])
            name = model.joint(jid).name
            if count > 1 or int(model.jnt_type[jid]) != int(mujoco.mjtJoint.mjJNT_HINGE) \
                    or name not in columns:
                raise LegModelError(f"{where}: body {model.body(body).name!r} needs one hinge "
                                    "joint of robot.yaml's joints")
            if not np.allclose(model.jnt_pos[jid], 0.0, atol=1e-9):
                raise LegModelError(f"{where}: joint {name!r} is off its body's origin")
            joints.append(columns[name])
            origins.append(tuple(float(x) for x in offset))
            axes.append(tuple(float(x) for x in model.jnt_axis[jid]))
            offset = np.zeros(3)
        if not joints:
            raise LegModelError(f"{where}: no joint between the base and the foot")
        foot_pos = offset + model.geom_pos[gid]
        chains.append(LegChain(joints=joints, origins=origins, axes=axes,
                               foot=tuple(float(x) for x in foot_pos),
                               radius=float(model.geom_size[gid, 0])))
    if stance == "torque":
        return LegModel(chains=chains, stance_torque=STANCE_TORQUE)
    if stance == "height":
        return LegModel(chains=chains, stance_sigma=STANCE_SIGMA)
    if stance == "torque_height":
        return LegModel(chains=chains, stance_torque=STANCE_TORQUE, stance_sigma=STANCE_SIGMA_BOTH)
    raise LegModelError(f"stance rule {stance!r}: 'torque', 'height' or 'torque_height'")
