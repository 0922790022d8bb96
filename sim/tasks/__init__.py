"""Tasks: a robot, its commands, observation terms, rewards, terminations and randomization."""
