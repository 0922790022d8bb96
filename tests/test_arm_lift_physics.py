"""arm-lift's physics admits the task: a scripted grasp with the true cube pose (inverse
kinematics for the tool, no learning) lifts every randomized cube (size, mass, friction, joint
damping, gains, latency as training draws them) to its commanded height and holds it there
until the episode ends, so the task counts a success; with the hand left open the same arm
motion leaves the cube on the table (the lift comes from the grasp, not from pushing)."""

import math

import pytest
import torch

from simreal.api import make_env
from simreal.core.spatial import quat_mul
from simreal.sim.tasks.arm_base import NUM_ARM_JOINTS, solve_ik
from simreal.sim.tasks.arm_reach import DOWN

N = 16


def scripted_lift(close: bool):
    env = make_env("arm-lift", num_envs=N, seed=0)
    env.reset()
    drawn = env.cube_mass.clone(), env.friction.clone(), env.half_size.clone()
    r = env.read()
    cube = r["object_position"].clone()
    quat = r["object_orientation"]
    # the hand pointing down, turned to the cube's nearest face (its yaw folded to +-45 deg)
    yaw = 2 * torch.atan2(quat[:, 3], quat[:, 0])
    yaw = torch.remainder(yaw + math.pi / 4, math.pi / 2) - math.pi / 4
    zero = torch.zeros(N)
    turn = torch.stack([torch.cos(yaw / 2), zero, zero, torch.sin(yaw / 2)], -1)
    down = quat_mul(turn, torch.tensor(DOWN).expand(N, 4))
    q = env.target.clone()
    lift = cube.clone()
    lift[:, 2] = env.lift_height[:, 0]
    opening = env.upper[NUM_ARM_JOINTS]
    closed = env.lower[NUM_ARM_JOINTS] if close else opening
    # (tool position, finger opening, control steps): above, down, close, lift and hold
    phases = [(cube + torch.tensor([0.0, 0.0, 0.1]), opening, 40), (cube, opening, 40),
              (cube, closed, 25), (lift, closed, env.max_episode_length - 105)]
    done = torch.zeros(N, dtype=torch.bool)
    for position, grip, steps in phases:
        q[:, :NUM_ARM_JOINTS] = solve_ik(env.kinematics, q, position, down, env.lower,
                                         env.upper)
        target = q.clone()
        target[:, NUM_ARM_JOINTS] = grip
        action = ((target - env.default_pos) / env.action_scale).clamp(-1, 1)
        for _ in range(steps):
            height = env.read()["object_position"][:, 2].clone()  # before a reset replaces it
            _, _, done, _ = env.step(action)
    return env, drawn, height, lift[:, 2], done


@pytest.mark.parametrize("close", [True, False])
def test_scripted_grasp_lifts_every_randomized_cube_to_its_height(close):
    env, (mass, friction, half_size), height, target, done = scripted_lift(close)
    assert done.all()  # the episode ran to its time limit: success was judged
    # the draws span the randomized ranges (not one easy cube)
    assert mass.max() > 0.25 and friction.min() < 0.65 and half_size.max() > 0.028
    if close:
        error = (height - target).abs()
        assert error.max() < env.cfg.success_tolerance, (height, target)
        assert env.success.all()
    else:
        assert (height - half_size).abs().max() < 0.01  # still resting on the table
        assert not env.success.any()


def test_closed_fingers_pressing_on_the_cube_top_are_no_grasp():
    """Both closed fingertips pushing down on the cube touch it with force, as a grasp does;
    the task must not pay that as one (a policy learned to collect it)."""
    env = make_env("arm-lift", num_envs=N, seed=1)
    env.reset()
    r = env.read()
    cube = r["object_position"].clone()
    down = torch.tensor(DOWN).expand(N, 4)
    q = env.target.clone()
    top = cube.clone()
    # the tool 9 mm above the fingertips: commanded 5 mm below the top face, they press on it
    top[:, 2] = 2 * env.half_size + 0.009 - 0.005
    closed = env.lower[NUM_ARM_JOINTS]
    for position, steps in ((cube + torch.tensor([0.0, 0.0, 0.1]), 50), (top, 40)):
        q[:, :NUM_ARM_JOINTS] = solve_ik(env.kinematics, q, position, down, env.lower,
                                         env.upper)
        target = q.clone()
        target[:, NUM_ARM_JOINTS] = closed
        for _ in range(steps):
            env.step(((target - env.default_pos) / env.action_scale).clamp(-1, 1))
    r = env.read()
    left = r["finger_object_left"][:, 1:].norm(dim=-1)
    right = r["finger_object_right"][:, 1:].norm(dim=-1)
    pressing = (left > 0.5) & (right > 0.5)
    assert pressing.float().mean() > 0.5  # the fingertips do press on it
    assert r["finger2_pos"].max() < 0.005  # closed
    assert not env.step_metrics()["grasped"].bool().any()
