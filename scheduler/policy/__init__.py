"""The scheduling policy, written plainly: read these modules in this order.

1. ``fair_share``: the one fair-share comparison (``less_used``, exact
   integers) that the order, the rules and the explanation all use; the order
   itself (which allocation is served next, level by level) is kept by the
   accelerator ``scheduler.index.fair_share_order``.
2. ``rules``: who may take whose GPUs, and why not.
3. ``victims``: what stopping a workload costs, and the cheapest set of
   victims that really places a candidate.
4. ``placement``: where work goes on free GPUs (least-free hosts first, the
   tightest topology domain).
5. ``reservations``: hosts held for blocked whole-host work so it cannot starve.
6. ``cycle``: one scheduling cycle of the budget policy, as numbered steps.
7. ``baseline``: the lab's old priority scheduler, for side-by-side simulation.

What makes the policy fast (indexes, carried sums, memos) lives beside it in
``scheduler.index``, reached through narrow interfaces; with the accelerators
switched off (``Engine(accelerate=False)``) the same policy runs on plain
computations, and the tests compare the two.
"""

import native

# The compiled form of these modules, when this process runs it (``native``).
__path__ = native.extend_path(__path__, __name__)
