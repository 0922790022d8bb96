"""Hardware-in-the-loop: the deploy node against a simulated robot behind the robot's own topics.

`simreal hil` (hil/harness.py) starts the robot process (hil/robot.py and
hil/server.py, driven by hil/robot_proc.py with faults and recording) and the deploy node as
a separate process (hil/node_proc.py: deploy's node with a recording tap on its transport), runs
a scenario (hil/config.py: timed commands and setpoints, pushes) with fault injection
(hil/faults.py), merges every process's records (hil/record.py) into one MCAP file
(hil/mcap_log.py), and checks and reports the run (hil/analysis.py, hil/plots.py). docs/HIL.md
has the user's view.
"""
