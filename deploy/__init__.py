"""The robot-side runtime: numpy, onnxruntime and pyyaml only; never torch or mujoco."""
