"""Training: algorithms (PPO), their storage and networks, the runner, checkpoints and export."""
