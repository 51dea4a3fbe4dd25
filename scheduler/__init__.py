"""The pure scheduling core: state, validation, ranking, placement, preemption, the cycle.

No I/O, no wall clock, no unseeded randomness: time arrives as event data and
every decision is a deterministic function of the folded log.
"""

from scheduler.cycle import Outcome, decide
from scheduler.engine import Engine
from scheduler.state import State

__all__ = ["Engine", "Outcome", "State", "decide"]
