"""The window arithmetic of the live projections, without a broker.

The figures must equal the audit's over the same journal, and a record
re-delivered after a crash (with any prefix of its writes already stored)
must count exactly once.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from events import Slot, WorkloadPreempted, WorkloadRejected, WorkloadStarted
from events.factory import Inputs
from simulator.driver import Simulation
from simulator.scenario import load_scenario, with_overrides
from streams.records import JournalRecord
from streams.usage_windows import (
    DEFAULT_WINDOWS,
    HOST,
    NODE,
    Section,
    Stores,
    WindowError,
    WindowSpec,
    advance,
    apply_record,
    figures,
    hopping,
    missing,
    node_path,
    parse_window,
    prune_windows,
    tumbling,
)
from tests.live_usage_helpers import (
    as_records,
    audit_host_seconds,
    audit_node_seconds,
    hop,
    load_audit,
    nonzero,
)

REPO = Path(__file__).resolve().parent.parent
HOURLY = tumbling(3600, "hourly")
WINDOWS = (HOURLY, hopping(4 * 3600, 3600, "four"))


@pytest.mark.parametrize(("spec", "since", "until", "want"), [
    (tumbling(3600), 0, 3600, [(0, 3600)]),
    (tumbling(3600), 3500, 3700, [(0, 100), (3600, 100)]),
    (tumbling(3600), 100, 100, []),
    (tumbling(3600), 7200, 7201, [(7200, 1)]),
    (hopping(7200, 3600), 3500, 3700, [(-3600, 100), (0, 200), (3600, 100)]),
    (hopping(7200, 3600), 0, 10800, [(-3600, 3600), (0, 7200), (3600, 7200), (7200, 3600)]),
    (hopping(3 * 3600, 3600), -10, 10, [(-10800, 10), (-7200, 20), (-3600, 20), (0, 10)]),
])
def test_split_cuts_an_interval_into_its_windows(spec: WindowSpec, since: int, until: int,
                                                 want: list[tuple[int, int]]) -> None:
    got = [(s, a) for s, a, _ in spec.split(since, until, 1, 0)]
    assert got == sorted(want)


def test_starts_lists_the_windows_containing_an_instant() -> None:
    assert list(hopping(4 * 3600, 3600).starts(3600)) == [-7200, -3600, 0, 3600]
    assert list(tumbling(3600).starts(3599)) == [0]
    assert list(tumbling(3600).starts(-1)) == [-3600]


@pytest.mark.parametrize(("text", "size", "step"), [
    ("hourly=3600", 3600, 3600), ("day=86400/3600", 86400, 3600)])
def test_parse_window(text: str, size: int, step: int) -> None:
    w = parse_window(text)
    assert (w.size_s, w.step_s) == (size, step)


@pytest.mark.parametrize("text", ["3600", "x=3600/7", "x=a", "=3600", "a|b=3600", "x=0"])
def test_parse_window_refuses_bad_specs(text: str) -> None:
    with pytest.raises(WindowError):
        parse_window(text)


def test_node_path_lists_every_ancestor() -> None:
    assert node_path("lab/a/b") == ["lab", "lab/a", "lab/a/b"]


def _fold(records: list[JournalRecord], windows: tuple[WindowSpec, ...] = WINDOWS) -> Stores:
    stores = Stores()
    for r in records:
        apply_record(stores, r, windows)
    return stores


def _small_journal() -> list:
    """Hand-written: a run across an hour boundary, a preemption, a rejected finish, a copy."""
    mk = Inputs(cluster="c", prefix="i")
    T = 36_000
    ev = [mk.tick(T), mk.node("lab"), mk.node("lab/a"), mk.host("h0"), mk.host("h1")]
    sub = mk.submit("w", "lab/a", gpus=4, min_runtime_s=60, at=T)
    t1 = mk.tick(T + 100)
    start = WorkloadStarted(id=f"{t1.id}/1", at=T + 100, cluster="c", cause=t1.id, workload="w",
                            placement=(Slot(host="h0", gpus=4),), allocated=True,
                            protected_until=T + 160)
    bad = mk.finish("nobody", at=T + 200)
    rej = WorkloadRejected(id=f"{bad.id}/1", at=T + 200, cluster="c", cause=bad.id,
                           workload="nobody", reason="x")
    t2 = mk.tick(T + 3700)
    stop = WorkloadPreempted(id=f"{t2.id}/1", at=T + 3700, cluster="c", cause=t2.id, workload="w",
                             reason="fair_share", requeued=True)
    return [*ev, sub, t1, start, start, bad, rej, t2, stop, mk.tick(T + 4000)]


def test_a_run_is_charged_per_node_and_host_per_hour() -> None:
    stores = _fold(as_records(_small_journal()))
    T = 36_000
    want = {T: (4 * 3500, 0), T + 3600: (4 * 100, 0)}
    got = figures(stores, "c", HOURLY, NODE)
    assert got["lab/a"] == want and got["lab"] == want
    assert figures(stores, "c", HOURLY, HOST) == {"h0": want}


def test_an_open_run_counts_up_to_the_clock() -> None:
    events = _small_journal()[:9]  # up to the (copied) start
    stores = _fold(as_records([*events, Inputs("c", prefix="z").tick(36000 + 1000)]))
    assert figures(stores, "c", HOURLY, HOST) == {"h0": {36_000: (4 * 900, 0)}}


def test_a_rejected_cancel_does_not_stop_the_run() -> None:
    """An input answered by a rejection had no effect (the audit's accepted_events)."""
    from events import InputRejected

    events = _small_journal()[:9]
    mk = Inputs(cluster="c", prefix="k")
    cancel = mk.cancel("w", actor="mallory", at=36_500)
    rej = InputRejected(id=f"{cancel.id}/1", at=36_500, cluster="c", cause=cancel.id,
                        reason="not_authorised")
    tail = [mk.tick(36_600)]
    refused = _fold(as_records([*events, cancel, rej, *tail]))
    accepted = _fold(as_records([*events, cancel, *tail]))
    assert figures(refused, "c", HOURLY, HOST) == {"h0": {36_000: (4 * 500, 0)}}
    assert figures(accepted, "c", HOURLY, HOST) == {"h0": {36_000: (4 * 400, 0)}}


def test_a_fenced_record_does_not_count() -> None:
    recs = as_records(_small_journal())
    starts = [i for i, r in enumerate(recs) if b'"workload.started"' in r.value]
    assert starts == [8, 9]
    # The start (and its copy) written under another owner's token: ignored by the fence.
    forged = [JournalRecord(partition=0, offset=recs[i].offset, kind=recs[i].kind, owner="other",
                            value=recs[i].value) for i in starts]
    stores = _fold([*recs[:8], *forged, *recs[10:]])
    assert figures(stores, "c", HOURLY, HOST) == {}
    assert figures(_fold(recs), "c", HOURLY, HOST) != {}


class Recording(dict):
    """A dict that logs every write, so a test can rebuild it from any prefix of them."""

    def __init__(self, name: str, log: list) -> None:
        super().__init__()
        self.name = name
        self.log = log

    def __setitem__(self, k, v) -> None:  # type: ignore[no-untyped-def]
        self.log.append((self.name, k, v))
        super().__setitem__(k, v)

    def __delitem__(self, k) -> None:  # type: ignore[no-untyped-def]
        self.log.append((self.name, k, None))
        super().__delitem__(k)


def _recording() -> tuple[Stores, list]:
    log: list = []
    names = ("fence", "clock", "state", "rates", "windows", "position")
    return Stores(**{n: Recording(n, log) for n in names}), log


def _rebuilt(log: list) -> Stores:
    s = Stores()
    for name, k, v in log:
        m = getattr(s, name)
        if v is None:
            m.pop(k, None)
        else:
            m[k] = v
    return s


def _all(stores: Stores, cluster: str = "demo") -> dict:
    out = {(w.name, d): figures(stores, cluster, w, d) for w in WINDOWS for d in (NODE, HOST)}
    assert any(out.values()), "no usage at all: the comparison would prove nothing"
    return out


def _scenario_journal(hours: float = 18) -> list:
    sc = load_scenario(REPO / "scenarios" / "demo.toml")
    sc = with_overrides(sc, horizon_days=hours / 24)
    return Simulation(sc, "allot", REPO / "scenarios").run().log


@pytest.fixture(scope="module")
def demo_log() -> list:
    return _scenario_journal()


def test_figures_equal_the_audit_on_a_simulated_journal(demo_log: list, tmp_path: Path) -> None:
    stores = _fold(as_records(demo_log), (*DEFAULT_WINDOWS, HOURLY))
    con = load_audit(demo_log, tmp_path)
    cluster = demo_log[0].cluster
    nodes = audit_node_seconds(con)
    hosts = audit_host_seconds(con)
    assert nodes and hosts
    assert nonzero(figures(stores, cluster, HOURLY, NODE)) == nodes
    assert nonzero(figures(stores, cluster, HOURLY, HOST)) == hosts
    for spec in DEFAULT_WINDOWS:
        assert nonzero(figures(stores, cluster, spec, NODE)) == hop(nodes, spec), spec.name
        assert nonzero(figures(stores, cluster, spec, HOST)) == hop(hosts, spec), spec.name


@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_a_redelivered_record_counts_once_whatever_prefix_of_its_writes_survived(
        demo_log: list, data: st.DataObject) -> None:
    """Crash after any write of record k; recover that prefix; re-deliver from j <= k."""
    records = as_records(demo_log[:1500])
    want = _all(_fold(records))
    k = data.draw(st.integers(0, len(records) - 1), label="crashed record")
    stores, log = _recording()
    for r in records[:k]:
        apply_record(stores, r, WINDOWS)
    before = len(log)
    apply_record(stores, records[k], WINDOWS)
    cut = data.draw(st.integers(before, len(log)), label="writes that survived")
    recovered, _ = _recording()
    for name, key, v in log[:cut]:
        m = getattr(recovered, name)
        dict.__setitem__(m, key, v) if v is not None else dict.pop(m, key, None)
    j = data.draw(st.integers(max(0, k - 20), k), label="re-delivered from")
    for r in records[j:]:
        apply_record(recovered, r, WINDOWS)
    assert _all(recovered) == want


def test_every_cut_of_a_busy_record_recovers_exactly(demo_log: list) -> None:
    """The record with the most writes, cut after each of them in turn."""
    records = as_records(demo_log[:1500])
    want = _all(_fold(records))
    stores, log = _recording()
    spans = []
    for r in records:
        a = len(log)
        apply_record(stores, r, WINDOWS)
        spans.append((len(log) - a, a))
    k = max(range(len(records)), key=lambda i: spans[i][0])
    n, first = spans[k]
    assert n > 5
    for cut in range(first, first + n + 1):
        recovered = _rebuilt(log[:cut])
        for r in records[k:]:
            apply_record(recovered, r, WINDOWS)
        assert _all(recovered) == want, f"cut after {cut - first} of {n} writes"


def test_without_the_offsets_a_cut_record_would_count_twice(demo_log: list) -> None:
    """The offsets are what make the above pass: a half-written record, offsets forgotten."""
    records = as_records(demo_log[:1500])
    want = _all(_fold(records))
    stores, log = _recording()
    spans = []
    for r in records:
        a = len(log)
        apply_record(stores, r, WINDOWS)
        spans.append((len(log) - a, a))
    k = max(range(len(records)), key=lambda i: spans[i][0])
    n, first = spans[k]
    recovered = _rebuilt(log[:first + n // 2])
    for m in (recovered.rates, recovered.windows):
        for key, v in list(m.items()):
            m[key] = [*v[:-1], -1]
    for r in records[k:]:
        apply_record(recovered, r, WINDOWS)
    assert _all(recovered) != want


class OrderedLog(dict):
    """One mapping that logs every write in order: a single changelog partition."""

    def __init__(self) -> None:
        super().__init__()
        self.log: list = []

    def __setitem__(self, k, v) -> None:  # type: ignore[no-untyped-def]
        self.log.append((k, v))
        super().__setitem__(k, v)

    def __delitem__(self, k) -> None:  # type: ignore[no-untyped-def]
        self.log.append((k, None))
        super().__delitem__(k)


def _fold_logged(records: list) -> tuple[OrderedLog, Stores, list[int]]:
    """Fold ``records`` into one ordered log; also where each record's writes end in it."""
    base = OrderedLog()
    shared = Stores.shared(base)
    ends = []
    for r in records:
        apply_record(shared, r, WINDOWS)
        ends.append(len(base.log))
    return base, shared, ends


def _replayed(log: list) -> Stores:
    """What Faust recovers from a changelog holding ``log``: the last value per key."""
    base: dict = {}
    for k, v in log:
        if v is None:
            base.pop(k, None)
        else:
            base[k] = v
    return Stores.shared(base)


def test_sections_of_one_mapping_fold_to_the_same_figures(demo_log: list) -> None:
    records = as_records(demo_log[:1500])
    base, shared, _ = _fold_logged(records)
    assert _all(shared) == _all(_fold(records))
    tags = {k.split("|", 1)[0] for k in base}
    assert tags == {"f", "c", "s", "r", "w", "p"}, "every store writes into the one mapping"


@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_a_cut_of_the_one_changelog_recovers_exactly(demo_log: list,
                                                     data: st.DataObject) -> None:
    """The live layout: crash anywhere in the single ordered log, re-deliver, exact figures."""
    records = as_records(demo_log[:1500])
    want = _all(_fold(records))
    base, _, ends = _fold_logged(records)
    cut = data.draw(st.integers(0, len(base.log)), label="writes that reached the changelog")
    # Faust commits an offset only after flushing, so the first record whose
    # writes may be cut, and possibly a few before it, are delivered again.
    k = next((i for i, e in enumerate(ends) if e > cut), len(records))
    j = data.draw(st.integers(max(0, k - 20), k), label="re-delivered from")
    recovered = _replayed(base.log[:cut])
    for r in records[j:]:
        apply_record(recovered, r, WINDOWS)
    assert _all(recovered) == want


def test_a_rate_stored_without_its_windows_loses_usage(demo_log: list) -> None:
    """Why one changelog: five tables could keep a record's rate and lose its windows.

    This is the kill -9 failure seen with five tables (a host's daily windows
    short): each topic's batch leaves when its own linger expires, so the
    stores could recover writes that are not a prefix of the record's.
    """
    records = as_records(demo_log[:1500])
    want = _all(_fold(records))
    stores, log = _recording()
    spans = []
    for r in records:
        a = len(log)
        apply_record(stores, r, WINDOWS)
        spans.append((a, len(log)))
    k = next(i for i, (a, b) in enumerate(spans)
             if any(n == "windows" for n, _, _ in log[a:b])
             and any(n == "rates" for n, _, _ in log[a:b]))
    a, b = spans[k]
    kept = log[:a] + [w for w in log[a:b] if w[0] != "windows"]   # not a prefix
    recovered = _rebuilt(kept)
    for r in records[k:]:
        apply_record(recovered, r, WINDOWS)
    assert _all(recovered) != want


def test_the_position_is_each_records_last_write(demo_log: list) -> None:
    records = as_records(demo_log[:300])
    base = OrderedLog()
    shared = Stores.shared(base)
    for r in records:
        before = len(base.log)
        apply_record(shared, r, WINDOWS)
        assert base.log[-1] == (f"p|{r.partition}", r.offset), "the position is written last"
        assert len(base.log) > before
    assert missing(shared, 0, len(records)) == range(0)


def test_nothing_is_missing_on_redelivery_or_for_the_next_record() -> None:
    stores = Stores()
    assert missing(stores, 0, 0) == range(0)
    assert missing(stores, 0, 3) == range(0, 3), "an empty store has applied nothing"
    advance(stores, 0, 9)
    assert missing(stores, 0, 10) == range(0)
    assert missing(stores, 0, 4) == range(0), "a re-delivery: the offsets decide"
    assert missing(stores, 0, 13) == range(10, 13)
    assert missing(stores, 1, 2) == range(0, 2), "positions are per partition"
    advance(stores, 0, 5)
    assert stores.position["0"] == 9, "the position never moves back"


@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_records_committed_without_their_writes_are_read_back(demo_log: list,
                                                              data: st.DataObject) -> None:
    """Faust commits past writes a crash then loses: the consumer resumes after them.

    The projection applies what ``missing`` names, from the journal, then the
    delivered record: exactly the figures of an uninterrupted fold.
    """
    records = as_records(demo_log[:1500])
    want = _all(_fold(records))
    base, _, _ = _fold_logged(records)
    cut = data.draw(st.integers(0, len(base.log)), label="writes that reached the changelog")
    recovered = _replayed(base.log[:cut])
    pos = recovered.position.get("0")
    # (With every write stored there is nothing past the position: re-deliver the last.)
    first = 0 if pos is None else min(int(pos) + 1, len(records) - 1)
    resume = data.draw(st.integers(first, len(records) - 1),
                       label="the committed offset the consumer resumes from")
    gap = missing(recovered, 0, records[resume].offset)
    by_offset = {r.offset: r for r in records}
    for o in gap:
        apply_record(recovered, by_offset[o], WINDOWS)
    for r in records[resume:]:
        apply_record(recovered, r, WINDOWS)
    assert _all(recovered) == want


def test_without_reading_the_gap_back_usage_is_lost(demo_log: list) -> None:
    """The control: resuming past lost writes without ``missing`` loses usage."""
    records = as_records(demo_log[:1500])
    want = _all(_fold(records))
    base, _, ends = _fold_logged(records)
    k = next(i for i in range(len(records) // 2, len(records))
             if b'"workload.started"' in records[i].value
             and any(key.startswith("r|") for key, _ in base.log[ends[i - 1]:ends[i]]))
    recovered = _replayed(base.log[:ends[k - 1]])
    assert missing(recovered, 0, records[k + 1].offset) == range(records[k].offset,
                                                                 records[k + 1].offset)
    for r in records[k + 1:]:
        apply_record(recovered, r, WINDOWS)
    assert _all(recovered) != want


def test_a_section_reads_and_writes_only_its_own_keys() -> None:
    base: dict = {"w|a": 1, "r|a": 2, "wx": 3}
    w = Section(base, "w")
    assert w.get("a") == 1 and w["a"] == 1 and "a" in w
    assert w.get("b") is None and "b" not in w and w.get("b", 7) == 7
    assert sorted(w) == ["a"] and len(w) == 1
    w["b"] = 4
    assert base["w|b"] == 4
    del w["a"]
    assert "w|a" not in base and base["r|a"] == 2
    with pytest.raises(KeyError):
        w["a"]
    with pytest.raises(WindowError):
        Section(base, "a|b")


def test_pruning_drops_old_windows_only() -> None:
    stores = _fold(as_records(_small_journal()))
    gone = prune_windows(stores, "c", (HOURLY,), before=36_000 + 3600)
    assert gone > 0
    assert all(int(k.rsplit("|", 1)[1]) >= 36_000 for k in stores.windows if "|hourly|" in k)


def test_entitlements_follow_the_accepted_shares(demo_log: list, tmp_path: Path) -> None:
    """The dashboard's entitled fraction per team equals the audit's entitlement."""
    from streams.usage_windows import entitlement, load_state

    stores = _fold(as_records(demo_log))
    st = load_state(stores.state["demo"])
    con = load_audit(demo_log, tmp_path)
    rows = con.execute("SELECT node, arg_max(fraction, valid_from) FROM entitlement_changes "
                       "WHERE run = 'r' GROUP BY node").fetchall()
    assert len(rows) > 10
    for node, fraction in rows:
        assert entitlement(st.shares, node) == pytest.approx(fraction), node
    assert sum(st.hosts.values()) == 128
