"""Each safety rule driven by a scripted input; timing counted in control periods."""

import numpy as np
import pytest

from simreal.deploy.safety import Mode, SafetyConfig, SafetyLayer


def layer(**cfg):
    return SafetyLayer(low=np.zeros(2), high=np.ones(2), damping=np.zeros(2), rate_hz=50.0,
                       cfg=SafetyConfig(**cfg))


def run_in(s: SafetyLayer, cmd=(0.5, 0.5)):
    while s.mode is Mode.SOFT_START:
        s.step(np.array(cmd), fresh=True, tilt_rad=0.0)


def test_soft_start_ramps_linearly_from_the_measured_pose():
    s = layer(soft_start_s=0.1)  # 5 periods at 50 Hz
    outs = [s.step(np.array([1.0, 1.0]), True, 0.0, measured=np.array([0.0, 0.5]))
            for _ in range(6)]
    assert [round(o[0], 6) for o in outs] == [0.2, 0.4, 0.6, 0.8, 1.0, 1.0]
    assert outs[0][1] == pytest.approx(0.6)
    assert s.mode is Mode.RUN and s.changes[-1].reason == "soft start complete"


def test_commands_are_clamped_to_limits():
    s = layer(soft_start_s=0.0)
    run_in(s)
    assert s.step(np.array([-3.0, 7.0]), True, 0.0).tolist() == [0.0, 1.0]


def test_rate_limit_bounds_the_change_per_period():
    s = layer(soft_start_s=0.0, max_rate=5.0)  # 0.1 per period at 50 Hz
    run_in(s, (0.0, 0.0))
    out = s.step(np.array([1.0, 0.0]), True, 0.0)
    assert out[0] == pytest.approx(0.1)


def test_no_command_leaves_the_range_when_the_joint_is_past_it():
    """A joint a little past its range (a finger pressed open) and moving: neither the soft
    start's ramp with the rate limit nor torque bounds that lie wholly outside the range may
    send a target outside it (a position controller refuses one)."""
    s = layer(soft_start_s=0.1, max_rate=0.5)  # 0.01 per period at 50 Hz
    past = np.array([1.05, 0.5])
    outs = [s.step(np.array([1.0, 0.5]), True, 0.0, measured=past) for _ in range(8)]
    assert max(o[0] for o in outs) == pytest.approx(1.0)
    above = (np.array([1.2, -np.inf]), np.array([1.5, np.inf]))
    out = s.step(np.array([0.9, 0.5]), True, 0.0, measured=past, bounds=above)
    assert out[0] <= 1.0 and out[0] == pytest.approx(1.0)
    assert s.clamp_events["bounds"] >= 1


def test_nonfinite_command_holds_the_last_safe_one_and_counts():
    s = layer(soft_start_s=0.0)
    run_in(s)
    good = s.step(np.array([0.3, 0.4]), True, 0.0)
    held = s.step(np.array([np.nan, 0.1]), True, 0.0)
    assert np.array_equal(held, good) and s.nonfinite_events == 1
    assert s.step(np.array([np.inf, 0.1]), True, 0.0).tolist() == good.tolist()
    assert s.nonfinite_events == 2 and s.mode is Mode.RUN


def test_rotor_commands_hold_their_collective_through_nonfinite_ones():
    """A quadrotor's held command keeps the last one's mean thrust on every rotor, not its
    differential part (an open-loop torque with no state to correct it)."""
    s = SafetyLayer(low=np.zeros(4), high=np.ones(4), damping=np.zeros(4), rate_hz=100.0,
                    cfg=SafetyConfig(soft_start_s=0.0), hold="collective")
    run_in(s, (0.5, 0.5, 0.5, 0.5))
    s.step(np.array([0.6, 0.4, 0.7, 0.3]), True, 0.0)
    held = [s.step(np.full(4, np.nan), False, 0.0) for _ in range(3)]
    assert all(h.tolist() == [0.5, 0.5, 0.5, 0.5] for h in held) and s.nonfinite_events == 3
    assert s.step(np.array([0.2, 0.2, 0.2, 0.2]), True, 0.0).tolist() == [0.2] * 4


def test_watchdog_damps_after_k_stale_periods_and_recovers_through_soft_start():
    s = layer(soft_start_s=0.04, watchdog_periods=3)
    run_in(s)
    modes = []
    for _ in range(4):
        s.step(np.array([0.5, 0.5]), fresh=False, tilt_rad=0.0)
        modes.append(s.mode)
    assert modes == [Mode.RUN, Mode.RUN, Mode.DAMP, Mode.DAMP]  # engaged at the 3rd period
    assert "3 control periods" in s.changes[-1].reason
    assert s.step(np.array([0.5, 0.5]), True, 0.0).tolist() != [0.0, 0.0]
    assert s.mode is Mode.SOFT_START
    run_in(s)
    assert s.mode is Mode.RUN


def test_tilt_damps_and_latches_until_reset():
    s = layer(soft_start_s=0.0, max_tilt_rad=0.8)
    run_in(s)
    assert s.step(np.array([0.5, 0.5]), True, tilt_rad=1.2).tolist() == [0.0, 0.0]
    assert s.mode is Mode.DAMP and "tilt" in s.changes[-1].reason
    s.step(np.array([0.5, 0.5]), True, tilt_rad=0.0)
    assert s.mode is Mode.DAMP  # fresh data does not clear a fall


def test_estop_latches_until_explicit_reset():
    s = layer(soft_start_s=0.0)
    run_in(s)
    s.estop("button")
    for _ in range(10):
        assert s.step(np.array([0.5, 0.5]), True, 0.0).tolist() == [0.0, 0.0]
    assert s.mode is Mode.ESTOP
    s.reset_estop()
    assert s.mode is Mode.SOFT_START
    assert [c.new for c in s.changes][-2:] == [Mode.ESTOP, Mode.SOFT_START]
