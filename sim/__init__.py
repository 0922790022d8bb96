"""Batched simulation: backends that step many copies of a robot, and the tasks built on them."""
