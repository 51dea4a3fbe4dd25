"""The accelerators: what makes the policy fast, kept beside it.

Each is a typed object with a declared key (what it was built from) and a
declared lapse rule (when it no longer holds), reached by the policy through
a narrow interface. None of them can change an answer: with the accelerators
switched off (``Engine(accelerate=False)``) every one is rebuilt from the state
where it is used, and the tests compare the two forms decision for decision.
"""

import native

# The compiled form of these modules, when this process runs it (``native``).
__path__ = native.extend_path(__path__, __name__)
