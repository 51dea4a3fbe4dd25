"""The simulator: scenarios played through the pure core in virtual time.

A scenario (TOML, ``simulator/scenario.py``) names a cluster, a budget tree, a
policy and workload sources (an explicit list, the seeded generator of the
lab's work classes, the Philly trace). The driver (``simulator/driver.py``) is
the trusted clock: it feeds inputs and ticks to the same ``Engine`` the live
worker runs and plays the executor and the people (finishes, faults, impatient
users, squatters, resubmissions). It depends on the core alone; the audit of
its logs is glued on by ``allot simulate`` (``allot/simulate.py``).
"""
