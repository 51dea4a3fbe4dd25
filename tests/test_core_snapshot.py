"""Snapshots: restoring one and folding the rest of the journal is the same as folding it all."""

from __future__ import annotations

import msgspec
import pytest
from sim_helpers import GOLDEN, simulate
from test_audit_views import engine_log

from events import DECISION_TYPES, Event
from scheduler import Engine
from scheduler.replay import JournalFold, fold_log
from scheduler.snapshot import SNAPSHOT_VERSION, UPCASTERS, SnapshotError


def _view(engine: Engine) -> object:
    """Everything in a state, read from the objects in their own orders (not through the snapshot writer)."""
    st = engine.state
    wl, cs, u = st.workloads, st.cluster_state, st.usage
    return (
        st.cluster, st.now, st.position, st.version, st.last_id, st.policy,
        list(st._seen_order), sorted(st._seen), list(st.reservations.items()),
        list(st.last_preemption.items()),
        [(p, n.managers, n.shares, n.children) for p, n in st.budget.nodes.items()],
        st.budget.root,
        (u.window_s, u.bucket_s, u.period_s,
         [(k, v.snap_at, v.snap, v.rate, v.since, list(v.order), dict(v.buckets), v.total,
           v.lifetime) for k, v in u.leaves.items()]),
        [(h.name, h.gpus, h.free, h.rack, h.block, h.health, h.fault_reason, h.faulted_at,
          list(h.workloads.items())) for h in cs.hosts.values()],
        cs.order, dict(cs.sizes), list(cs.usable.items()), cs.usable_free, cs.by_free,
        list(cs.labels.items()),
        cs.max_gpus, sorted(cs.faulty), cs.capacity, cs.health_version,
        [(w.id, [getattr(w, f) for f in w.__slots__]) for w in wl.all.values()],
        list(wl.running),
        [(leaf, [w.id for _, w in q]) for leaf, q in wl.pending.items()],
        [(leaf, [w.id for _, w in q]) for leaf, q in wl.pending_free.items()],
        [(leaf, [(shape, [w.id for _, w in q]) for shape, q in shapes.items()])
         for leaf, shapes in wl.by_shape.items()],
        list(wl.free_shapes.items()), wl.running_version, wl.seq,
        [w.id for _, w in wl.queue], list(wl.protection_ends), list(wl.ended),
    )


def _input_positions(log: list[Event]) -> list[int]:
    return [i for i, e in enumerate(log) if type(e) not in DECISION_TYPES]


def _logs() -> list[list[Event]]:
    busy, _ = engine_log(seed=11, n=160)
    gang, _ = simulate(GOLDEN / "gang_reservation.toml")
    drain, _ = simulate(GOLDEN / "host_drain.toml")
    return [busy, gang, drain]


@pytest.mark.parametrize("which", [0, 1, 2], ids=["busy", "gang", "drain"])
def test_snapshot_then_tail_equals_the_whole_fold(which: int) -> None:
    """At every tenth group boundary: fold the head, snapshot, restore, fold the tail: same state, same bytes."""
    log = _logs()[which]
    whole = fold_log(log)
    cuts = _input_positions(log)[1::10]
    assert len(cuts) >= 3
    for cut in cuts:
        head = fold_log(log[:cut])
        restored = Engine.restore(head.snapshot())
        assert _view(restored) == _view(head), cut
        fold = JournalFold(restored)
        for e in log[cut:]:
            fold.add(e)
        fold.finish()
        assert _view(restored) == _view(whole), cut
        assert restored.snapshot() == whole.snapshot(), cut


def test_a_restored_engine_decides_what_the_original_decided() -> None:
    """Processing the inputs after the cut through a restored engine re-derives every recorded decision."""
    log = _logs()[0]
    cut = _input_positions(log)[len(_input_positions(log)) // 2]
    engine = Engine.restore(fold_log(log[:cut]).snapshot())
    derived: list[Event] = []
    for e in log[cut:]:
        if type(e) not in DECISION_TYPES:
            out = engine.process(e)
            assert out is not None
            derived.extend(out)
    assert derived == [e for e in log[cut:] if type(e) in DECISION_TYPES]


def test_a_snapshot_from_a_newer_writer_is_refused() -> None:
    body = msgspec.msgpack.decode(Engine().snapshot())
    body["v"] = SNAPSHOT_VERSION + 1
    with pytest.raises(SnapshotError, match="newer"):
        Engine.restore(msgspec.msgpack.encode(body))


@pytest.mark.parametrize("data", [b"", b"\x00\x01garbage", msgspec.msgpack.encode({"magic": "x"}),
                                  msgspec.msgpack.encode({"magic": "allot-snapshot", "v": 1})])
def test_bytes_that_are_not_a_snapshot_raise_snapshot_error(data: bytes) -> None:
    with pytest.raises(SnapshotError):
        Engine.restore(data)


def test_an_old_snapshot_is_lifted_by_its_upcaster(monkeypatch: pytest.MonkeyPatch) -> None:
    """A version-0 snapshot (here: the clock kept under another name) restores through its upcaster."""
    engine = fold_log(_logs()[1])
    body = msgspec.msgpack.decode(engine.snapshot())
    old = {**body, "v": SNAPSHOT_VERSION - 1, "clock": body["now"]}
    del old["now"]

    def lift(b: dict) -> dict:
        b = dict(b)
        b["now"] = b.pop("clock")
        return b

    monkeypatch.setitem(UPCASTERS, SNAPSHOT_VERSION - 1, lift)
    assert Engine.restore(msgspec.msgpack.encode(old)).snapshot() == engine.snapshot()


@pytest.mark.parametrize("enabled", [True, False], ids=["collector-on", "collector-off"])
@pytest.mark.parametrize("data", [None, b"\x00\x01garbage"], ids=["valid", "corrupt"])
def test_snapshot_and_restore_leave_the_garbage_collector_as_they_found_it(
        enabled: bool, data: bytes | None) -> None:
    """The collector is paused while a snapshot is built or read, and restored after, even on error."""
    import gc

    engine = fold_log(_logs()[1])
    was = gc.isenabled()
    (gc.enable if enabled else gc.disable)()
    try:
        blob = engine.snapshot()
        assert gc.isenabled() is enabled
        if data is None:
            assert Engine.restore(blob).snapshot() == blob
        else:
            with pytest.raises(SnapshotError):
                Engine.restore(data)
        assert gc.isenabled() is enabled
    finally:
        (gc.enable if was else gc.disable)()
