"""System identification: robot logs -> fitted simulator parameters and randomization ranges.

    experiments.py  what a calibration run commands (go2 joints in the air and on the ground,
                    quadrotor thrust steps in hover), at the robot's control rate
    record.py       runs an experiment through the deploy transport (or against the HIL robot
                    in-process, in simulated time) and writes an MCAP log (hil/'s format)
    logs.py         reads an MCAP / rosbag2 log back (rosbags) into time series, through
                    deploy's message classes and interface codecs
    params.py       the parameters a fit can estimate, per robot kind, and where each lives in
                    an MjModel
    replay.py       replays logged commands in MuJoCo (mujoco.batch: one simulation per
                    parameter variant), sensors at the logged state times
    fit.py          scipy least squares over the replays; uncertainty from the Jacobian; IMU
                    biases from still periods
    schema.py       the calibration YAML (pydantic, extra="forbid")
    apply.py        a calibration applied: a calibrated robot folder (robot.yaml + MJCF) and the
                    task-config randomization it implies (the one place that maps them)
    report.py       report.json and PNG plots of logged against replayed trajectories

docs/CALIBRATION.md describes the method, the experiments and what was validated.
"""
