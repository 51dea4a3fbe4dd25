"""Keeping the scheduler's long-lived state out of the garbage collector's full scans.

CPython's full (generation 2) collection walks every tracked object. A worker
at 10,000 GPUs and 20,000 pending holds a large state, and a full collection
then stopped the loop for a median 89-100 ms (36 full collections in eight
runs, load 9-13; measured with the batch trace, ``bench_live_scale --trace``,
2026-12-07), 25-27 ms with these freezes: the pause lands on whichever
submissions are waiting. ``gc.freeze()`` moves every tracked object to a
permanent generation that collections skip. The worker freezes (setting
``gc_freeze``):

- after a partition is taken (restored and folded), behind one full
  collection, so no garbage is frozen with the state; that pause falls in the
  restart, before any input is handled;
- right after each full collection the collector runs by itself: nothing
  unreachable is left then, so what is frozen is live, and the next full
  collection walks only what was created since.

What it costs: a reference cycle among frozen objects that becomes garbage
later is not collected while it stays frozen (objects freed by reference
counting, which is almost all of the engine's, are freed as usual). Every
freeze also freezes the transient objects alive at that moment (futures,
records in flight), so such cycles would pile up in a worker that runs for
weeks. Hence the thaw: at the first freeze after ``thaw_every_s`` (10 minutes
by default), the heap is unfrozen, collected whole (catching every such
cycle) and frozen again: one full pause every ten minutes, instead of memory
that grows with uptime.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from typing import Any

THAW_EVERY_S = 600.0


class GcFreezer:
    """Freezes the heap after a take and after each full collection (``after_batch``)."""

    def __init__(self, thaw_every_s: float = THAW_EVERY_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._full_done = False
        self.freezes = 0
        self.thaws = 0
        self._thaw_every_s = thaw_every_s
        self._clock = clock
        self._last_thaw = clock()
        gc.callbacks.append(self._on_gc)

    def _on_gc(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "stop" and info.get("generation") == 2:
            self._full_done = True

    def after_take(self) -> None:
        """A partition was rebuilt: collect once, then freeze what is left (its state)."""
        gc.collect()
        self._freeze()

    def after_batch(self) -> None:
        """Freeze if a full collection ran since the last call (the loop calls this per batch)."""
        if self._full_done:
            self._freeze()

    def _freeze(self) -> None:
        now = self._clock()
        if now - self._last_thaw >= self._thaw_every_s:
            # Collect what died among frozen objects since the last thaw (module docstring).
            self._last_thaw = now
            gc.unfreeze()
            gc.collect()
            self.thaws += 1
        self._full_done = False
        gc.freeze()
        self.freezes += 1

    def close(self) -> None:
        if self._on_gc in gc.callbacks:
            gc.callbacks.remove(self._on_gc)
