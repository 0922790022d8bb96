"""What every stage shares and nothing else owns: array-API spatial math and the config base.

The bottom of the import graph: it imports no other simreal package, and neither torch nor
mujoco (the deploy runtime on a robot computer uses it).
"""
