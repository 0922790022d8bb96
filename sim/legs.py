"""A legged robot's leg model for leg odometry (robots/legs.py), read from its compiled MJCF.

The policy contract carries the result (`deploy.contract.LegModel`), so the deploy runtime
computes the same odometry without the MJCF or MuJoCo.
"""

from __future__ import annotations

import mujoco
import numpy as np

from simreal.deploy.contract import LegChain, LegModel
from simreal.robots import Robot

# m: a foot this much above the lowest counts e^-1 as much. Measured on go2-flat (the walking
# policy of tests/assets at 0.5 m/s, noise-free signals, 8 x 8 s): forward bias -0.17 m/s at
# 5 mm (swing feet near the ground count), -0.07 at 2 mm, -0.05 at 1 mm (rms 0.24, 0.15, 0.17);
# weighting by the touch sensors instead: -0.04 (rms 0.14)
STANCE_SIGMA = 0.002


class LegModelError(ValueError):
    pass


def leg_model(model: mujoco.MjModel, robot: Robot) -> LegModel:
    """Each foot's chain of hinge joints from the base body down to its foot geom (a sphere),
    with the joints' columns in policy order. Bodies must be parallel to their parents at
    zero joint angles (no `quat`), as on the Go2; a body without a joint adds its offset."""
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
    return LegModel(chains=chains, stance_sigma=STANCE_SIGMA)
