"""Batched simulation: backends that step many copies of a robot, and the tasks built on them."""

import os

# see simreal/__init__.py: passive OpenMP waiting keeps torch from slowing MuJoCo's threads
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
