"""The pure scheduling core: state, validation, ranking, placement, preemption, the cycle.

No I/O, no wall clock, no unseeded randomness: time arrives as event data and
every decision is a deterministic function of the folded log.
"""

import native

# The compiled form of the core's modules, when this process runs it (``native``).
__path__ = native.extend_path(__path__, __name__)

from scheduler.engine import Engine
from scheduler.policy.cycle import Outcome, decide
from scheduler.state import State

__all__ = ["Engine", "Outcome", "State", "decide"]
