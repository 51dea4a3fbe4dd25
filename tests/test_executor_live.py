"""``allot executor local`` over the real broker: a worker in process, the executor as a process.

Short ``sh`` commands on fake GPU ids: exits reported with their codes,
``CUDA_VISIBLE_DEVICES`` exactly the GPUs given, a preemption under a grace
(the victim traps SIGTERM and checkpoints; its GPUs take no other work before
``workload.stopped``), a time limit, and kill -9 of the executor itself with
work ending and starting while it is down: nothing lost, nothing run or
reported twice; a session's checkpoint hook before its preemption's SIGTERM,
and its restore when it runs again.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from events import (
    ClockTicked,
    Event,
    InputRejected,
    WorkloadFinished,
    WorkloadPreempted,
    WorkloadStarted,
    WorkloadStopped,
)
from events.factory import Inputs
from tests.kafka import REPO, Live, unique_prefix, wait_until

pytestmark = pytest.mark.kafka

CLUSTERS = ("xl-exit", "xl-grace", "xl-limit", "xl-crash", "xl-gang", "xl-fault", "xl-hooks")
GPU_IDS = "GPU-a,GPU-b,GPU-c,GPU-d"
GRACE_S = 3


@pytest.fixture(scope="module")
def live(kafka: str) -> Iterator[Live]:
    lv = Live(kafka, unique_prefix()).start()
    lv.start_worker(CLUSTERS, time_scale=1.0, tick_interval_s=0.25)
    try:
        yield lv
    finally:
        lv.close()


def _setup(live: Live, cluster: str, hosts: tuple[str, ...] = ("h0",), **policy: int) -> Inputs:
    live.wait_event(cluster, lambda e: isinstance(e, ClockTicked), what=f"{cluster}'s first tick")
    mk = Inputs(cluster=cluster, prefix=f"{cluster}-")
    now = int(time.time())
    live.send_many([mk.node("lab", managers=("admin",), at=now), mk.node("lab/a", at=now),
                    mk.node("lab/b", at=now), mk.policy(at=now, **policy),
                    *[mk.host(h, gpus=4, at=now) for h in hosts]])
    return mk


class Executor:
    """``allot executor local`` as a child process, logging to a file."""

    def __init__(self, live: Live, cluster: str, tmp: Path, host: str = "h0") -> None:
        state = tmp / ("state" if host == "h0" else f"state-{host}")
        self.argv = [sys.executable, "-m", "allot", "executor", "local", "--host", host,
                     "--gpu-ids", GPU_IDS, "--state-dir", str(state),
                     "--bootstrap", live.bootstrap, "--topic-prefix", live.prefix,
                     "--cluster", cluster, "--log-format", "json", "--kill-wait", "2"]
        self.log_path = tmp / f"executor-{host}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Executor:
        mark = self.log_path.stat().st_size if self.log_path.exists() else 0
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(self.argv, cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL)
        def ready() -> bool:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise AssertionError(f"the executor exited: {self.log_path.read_text()[-2000:]}")
            return b"executor.ready" in self.log_path.read_bytes()[mark:]
        wait_until(ready, 30, what="the executor to be ready")
        return self

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


@pytest.fixture
def executor_for(live: Live, tmp_path: Path) -> Iterator[object]:
    made: list[Executor] = []

    def make(cluster: str, host: str = "h0") -> Executor:
        ex = Executor(live, cluster, tmp_path, host)
        made.append(ex)
        return ex.start()

    yield make
    for ex in made:
        ex.stop()
    # The runs outlive their executor by design: end what a failed test left behind.
    for pid_file in tmp_path.glob("state*/runs/*/pid.json"):
        pid = json.loads(pid_file.read_text())["pid"]
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)


def _no_rejected_reports(live: Live, cluster: str) -> None:
    """Every report the executor sent was accepted (none late, none for a stopped run)."""
    journal = live.events(cluster)
    reports = {e.id for e in journal if e.source == "allot.executor"}
    assert reports
    bad = [e for e in journal if isinstance(e, InputRejected) and e.cause in reports]
    assert not bad, bad
    assert not live.dead_letters()


def _sh(script: str) -> tuple[str, ...]:
    return ("sh", "-c", script)


def _of(live: Live, cluster: str, cls: type, workload: str) -> list[Event]:
    return [e for e in live.events(cluster) if type(e) is cls and e.workload == workload]


def _wait(live: Live, cluster: str, cls: type, workload: str, timeout: float = 15) -> Event:
    return live.wait_event(cluster, lambda e: type(e) is cls and e.workload == workload,
                           timeout=timeout, what=f"{cls.__name__} of {workload}")


def test_runs_get_exactly_their_gpus_and_report_their_exits(live: Live, tmp_path: Path,
                                                            executor_for) -> None:
    cluster = "xl-exit"
    mk = _setup(live, cluster)
    executor_for(cluster)
    now = int(time.time())
    out = tmp_path / "out"
    live.send_many([
        mk.submit("ok", "lab/a", 2, 0, at=now,
                  command=_sh(f'echo "$CUDA_VISIBLE_DEVICES" > {out}.ok; sleep 0.5')),
        mk.submit("bad", "lab/a", 1, 0, at=now,
                  command=_sh(f'echo "$CUDA_VISIBLE_DEVICES" > {out}.bad; sleep 0.5; exit 3')),
        mk.submit("sig", "lab/b", 1, 0, at=now, command=_sh("kill -USR1 $$")),
    ])
    ok = _wait(live, cluster, WorkloadFinished, "ok")
    bad = _wait(live, cluster, WorkloadFinished, "bad")
    sig = _wait(live, cluster, WorkloadFinished, "sig")
    assert (ok.outcome, ok.exit_code, ok.run_number) == ("succeeded", 0, 1)
    assert (bad.outcome, bad.exit_code) == ("failed", 3)
    assert (sig.outcome, sig.exit_code, sig.signal) == ("failed", None, "SIGUSR1")
    ids_ok = Path(f"{out}.ok").read_text().strip().split(",")
    ids_bad = Path(f"{out}.bad").read_text().strip().split(",")
    assert len(ids_ok) == 2 and len(ids_bad) == 1
    assert set(ids_ok) | set(ids_bad) <= set(GPU_IDS.split(","))
    assert not set(ids_ok) & set(ids_bad)  # they ran at the same time, on different GPUs
    for w in ("ok", "bad", "sig"):
        assert len(_of(live, cluster, WorkloadFinished, w)) == 1
    _no_rejected_reports(live, cluster)


def test_a_preemption_waits_for_the_victim_to_checkpoint_and_stop(live: Live, tmp_path: Path,
                                                                  executor_for) -> None:
    cluster = "xl-grace"
    mk = _setup(live, cluster, preemption_grace_s=GRACE_S)
    executor_for(cluster)
    ckpt, started_p = tmp_path / "ckpt", tmp_path / "p-started"
    victim = (f"trap 'sleep 1; date +%s.%N > {ckpt}; exit 0' TERM; "
              "echo up; while :; do sleep 0.1; done")
    live.send(mk.submit("v", "lab/b", 4, 0, at=int(time.time()), resumable=True,
                        command=_sh(victim)))
    _wait(live, cluster, WorkloadStarted, "v")
    time.sleep(0.5)  # (sh sets its trap)
    live.send(mk.submit("p", "lab/a", 4, 60, at=int(time.time()),
                        command=_sh(f"date +%s.%N > {started_p}; sleep 30")))
    _wait(live, cluster, WorkloadStarted, "p", timeout=GRACE_S + 10)
    journal = live.events(cluster)
    kinds = [(type(e), getattr(e, "workload", None)) for e in journal]
    i_pre = kinds.index((WorkloadPreempted, "v"))
    i_stop = kinds.index((WorkloadStopped, "v"))
    i_start = kinds.index((WorkloadStarted, "p"))
    assert i_pre < i_stop < i_start           # nothing placed on v's GPUs before it stopped
    stopped = journal[i_stop]
    assert isinstance(stopped, WorkloadStopped)
    assert (stopped.host, stopped.run_number, stopped.exit_code) == ("h0", 1, 0)
    wait_until(lambda: started_p.exists() and started_p.read_text().strip(), 10,
               what="p's command")
    assert float(ckpt.read_text()) <= float(started_p.read_text())  # the checkpoint came first
    assert not _of(live, cluster, WorkloadFinished, "v")
    _no_rejected_reports(live, cluster)


def test_a_run_past_its_time_limit_is_stopped_and_reported(live: Live, tmp_path: Path,
                                                           executor_for) -> None:
    cluster = "xl-limit"
    mk = _setup(live, cluster)
    executor_for(cluster)
    t0 = time.monotonic()
    live.send(mk.submit("long", "lab/a", 1, 0, at=int(time.time()), time_limit_s=1,
                        command=_sh("sleep 60")))
    fin = _wait(live, cluster, WorkloadFinished, "long")
    assert (fin.outcome, fin.reason, fin.signal) == ("failed", "time_limit", "SIGTERM")
    assert time.monotonic() - t0 < 8
    _no_rejected_reports(live, cluster)


def test_kill_9_of_the_executor_loses_and_doubles_nothing(live: Live, tmp_path: Path,
                                                          executor_for) -> None:
    cluster = "xl-crash"
    mk = _setup(live, cluster)
    ex = executor_for(cluster)

    def job(name: str, code: int) -> tuple[str, ...]:
        # Counts its starts, then runs until its "go" file appears.
        return _sh(f"echo start >> {tmp_path / name}.starts; "
                   f"while [ ! -e {tmp_path / name}.go ]; do sleep 0.05; done; exit {code}")

    now = int(time.time())
    live.send_many([mk.submit("a1", "lab/a", 1, 0, at=now, command=job("a1", 0)),
                    mk.submit("a2", "lab/a", 1, 0, at=now, command=job("a2", 5))])
    for w in ("a1", "a2"):
        wait_until((tmp_path / f"{w}.starts").exists, 15, what=f"{w} to run")
    ex.kill9()
    # While the executor is down: a1 ends, and a3 is started by the scheduler.
    (tmp_path / "a1.go").touch()
    live.send(mk.submit("a3", "lab/a", 1, 0, at=int(time.time()), command=job("a3", 0)))
    _wait(live, cluster, WorkloadStarted, "a3")
    time.sleep(0.3)
    assert not _of(live, cluster, WorkloadFinished, "a1")
    ex.start()
    fin1 = _wait(live, cluster, WorkloadFinished, "a1")          # ended while it was down
    wait_until((tmp_path / "a3.starts").exists, 15, what="a3 to run")
    (tmp_path / "a2.go").touch()
    (tmp_path / "a3.go").touch()
    fin2 = _wait(live, cluster, WorkloadFinished, "a2")          # adopted, then ended
    fin3 = _wait(live, cluster, WorkloadFinished, "a3")          # launched after the restart
    assert (fin1.exit_code, fin2.exit_code, fin3.exit_code) == (0, 5, 0)
    time.sleep(0.5)
    for w in ("a1", "a2", "a3"):
        assert (tmp_path / f"{w}.starts").read_text() == "start\n", w   # run exactly once
        assert len(_of(live, cluster, WorkloadFinished, w)) == 1, w      # reported once
    _no_rejected_reports(live, cluster)


def test_a_gang_runs_one_process_group_per_host_with_its_rank(live: Live, tmp_path: Path,
                                                              executor_for) -> None:
    cluster = "xl-gang"
    mk = _setup(live, cluster, hosts=("h0", "h1"))
    executor_for(cluster, "h0")
    executor_for(cluster, "h1")
    out = tmp_path / "gang"
    script = (f'echo "$RANK $WORLD_SIZE $MASTER_ADDR $MASTER_PORT $CUDA_VISIBLE_DEVICES $ALLOT_HOST"'
              f' > {out}.$RANK; [ "$RANK" = 0 ] && sleep 1; exit 0')
    live.send(mk.submit("g", "lab/a", 4, 0, at=int(time.time()), hosts=2, command=_sh(script)))
    fin = _wait(live, cluster, WorkloadFinished, "g")
    [start] = _of(live, cluster, WorkloadStarted, "g")
    order = [s.host for s in start.placement]
    rows = {r: Path(f"{out}.{r}").read_text().split() for r in ("0", "1")}
    for r, (rank, world, master, _port, gpus, host) in rows.items():
        assert (rank, world, master, host) == (r, "2", order[0], order[int(r)])
        assert len(gpus.split(",")) == 2
    assert rows["0"][3] == rows["1"][3]          # one rendezvous port for the gang
    assert (fin.outcome, fin.exit_code) == ("succeeded", 0)
    time.sleep(0.5)
    assert len(_of(live, cluster, WorkloadFinished, "g")) == 1
    _no_rejected_reports(live, cluster)


def test_a_faulted_hosts_run_checkpoints_stops_and_resumes_on_another(
        live: Live, tmp_path: Path, executor_for) -> None:
    cluster = "xl-fault"
    mk = _setup(live, cluster, hosts=("h0", "h1"), preemption_grace_s=GRACE_S)
    executor_for(cluster, "h0")
    executor_for(cluster, "h1")
    ckpt = tmp_path / "ckpt"
    script = (f'[ -e {ckpt} ] && echo "resumed from $(cat {ckpt}) on $ALLOT_HOST"; '
              f"trap 'echo run$ALLOT_RUN > {ckpt}; exit 0' TERM; "
              "echo up; while :; do sleep 0.1; done")
    live.send(mk.submit("r", "lab/a", 4, 0, at=int(time.time()), resumable=True,
                        command=_sh(script)))
    first = _wait(live, cluster, WorkloadStarted, "r")
    [here] = [s.host for s in first.placement]
    there = "h1" if here == "h0" else "h0"
    time.sleep(0.5)  # (sh sets its trap)
    live.send(mk.fault(here, "failed", at=int(time.time()), reason="XID 79"))
    wait_until(lambda: len(_of(live, cluster, WorkloadStarted, "r")) == 2, GRACE_S + 10,
               what="r to start again")
    # (It restarts on the healthy host at once: those GPUs were free; the report
    # that the faulted host's share stopped may come after.)
    _wait(live, cluster, WorkloadStopped, "r", timeout=GRACE_S + 5)
    pre = _of(live, cluster, WorkloadPreempted, "r")
    stopped = _of(live, cluster, WorkloadStopped, "r")
    again = _of(live, cluster, WorkloadStarted, "r")[1]
    assert [(p.reason, p.requeued) for p in pre] == [("host_failure", True)]
    assert [(s.host, s.run_number) for s in stopped] == [(here, 1)]
    assert [s.host for s in again.placement] == [there]
    assert ckpt.read_text() == "run1\n"
    log2 = tmp_path / f"state{'' if there == 'h0' else '-h1'}" / "logs" / "r.run2.log"
    wait_until(lambda: log2.exists() and "resumed" in log2.read_text(), 10, what="run 2's log")
    assert log2.read_text().splitlines()[0] == f"resumed from run1 on {there}"
    _no_rejected_reports(live, cluster)


def test_a_preempted_session_checkpoints_through_its_hook_and_restores_when_requeued(
        live: Live, tmp_path: Path, executor_for) -> None:
    from tests.test_executor_hooks import RESTORE, SAVE, SESSION

    cluster = "xl-hooks"
    mk = _setup(live, cluster, preemption_grace_s=GRACE_S)
    executor_for(cluster)
    work = tmp_path / "work"
    work.mkdir()
    live.send(mk.submit("nb", "lab/b", 4, 0, at=int(time.time()), resumable=True,
                        kind="interactive", command=_sh(SESSION), workdir=str(work),
                        env=(f"ALLOT_CHECKPOINT_HOOK={SAVE}", f"ALLOT_RESTORE_HOOK={RESTORE}")))
    _wait(live, cluster, WorkloadStarted, "nb")
    time.sleep(0.5)  # (it counts, and sets its traps)
    live.send(mk.submit("p", "lab/a", 4, 60, at=int(time.time()), command=_sh("sleep 1")))
    _wait(live, cluster, WorkloadStopped, "nb", timeout=GRACE_S + 10)
    # p ran on nb's GPUs and finished; nb was requeued and runs again, restored.
    wait_until(lambda: len(_of(live, cluster, WorkloadStarted, "nb")) == 2, 20,
               what="the session to start again")
    ckpt = tmp_path / "state" / "checkpoints" / "nb" / "run1"
    saved = int((ckpt / "state").read_text())
    log2 = tmp_path / "state" / "logs" / "nb.run2.log"
    wait_until(lambda: log2.exists() and "run 2" in log2.read_text(), 10, what="run 2's log")
    [first] = [line for line in log2.read_text().splitlines() if line.startswith("run 2")]
    assert saved > 0 and first == f"run 2 from n={saved} restore={ckpt} status=ok"
    log1 = (tmp_path / "state" / "logs" / "nb.run1.log").read_text()
    assert log1.index("checkpoint hook completed") < log1.index("TERM at n=")
    [stopped] = _of(live, cluster, WorkloadStopped, "nb")
    assert (stopped.run_number, stopped.exit_code) == (1, 0)
    _no_rejected_reports(live, cluster)


# -- signed reports ---------------------------------------------------------------------------

SIGNED = "xl-signed"
ADMIN_SECRET = "xl-admin-secret"
EXEC_SECRET = "xl-executor-secret"


@pytest.fixture(scope="module")
def signed_live(kafka: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    from identity import keys
    from tests.kafka import TICK_KEY

    ring = tmp_path_factory.mktemp("keys") / "keyring.toml"
    pub = {name: keys.public_hex(keys.public_of(secret.encode())) for name, secret in
           (("admin", ADMIN_SECRET), ("allot.executor", EXEC_SECRET), ("allot.ticker", TICK_KEY))}
    ring.write_text("[keys]\n" + "".join(f'"{n}" = "{k}"\n' for n, k in pub.items()))
    lv = Live(kafka, unique_prefix(), watch_inbox=True).start()
    lv.start_worker((SIGNED,), time_scale=1.0, tick_interval_s=0.25, keyring_file=str(ring),
                    require_signatures=True, admin_principal="admin")
    try:
        yield lv
    finally:
        lv.close()


def test_reports_are_signed_with_the_executors_key(signed_live: Live, tmp_path: Path,
                                                   executor_for) -> None:
    from streams.records import HEADER_SIGNER

    live = signed_live
    live.wait_event(SIGNED, lambda e: isinstance(e, ClockTicked), what="the first tick")
    from events import PrincipalRegistered
    from identity import keys

    mk = Inputs(cluster=SIGNED, prefix="admin:sg-")  # ids are per signer
    now = int(time.time())

    def register(name: str, secret: str, roles: tuple[str, ...], hosts: tuple[str, ...] = ()
                 ) -> PrincipalRegistered:
        pub = keys.public_hex(keys.public_of(secret.encode()))
        return PrincipalRegistered(id=f"admin:reg-{name}", at=now, cluster=SIGNED, actor="admin",
                                   source="test", principal=name, public_key=pub,
                                   key_id=keys.key_id(keys.public_from_hex(pub)), roles=roles,
                                   hosts=hosts)

    # The configured admin registers itself (operator, manager) and the executor for h0.
    for e in (register("admin", ADMIN_SECRET, ("admin", "operator", "manager")),
              register("allot.executor", EXEC_SECRET, ("executor",), ("h0",)),
              mk.node("lab", managers=("admin",), at=now), mk.node("lab/a", at=now),
              mk.host("h0", gpus=4, at=now, actor="admin"),
              mk.submit("job", "lab/a", 1, 0, at=now, user="admin", command=_sh("exit 0"))):
        live.send(e, sign_as=("admin", ADMIN_SECRET))
    key_file = tmp_path / "executor.key"
    key_file.write_text(EXEC_SECRET + "\n")
    ex = Executor(live, SIGNED, tmp_path)
    ex.argv += ["--key-file", str(key_file)]
    ex.start()
    try:
        fin = _wait(live, SIGNED, WorkloadFinished, "job")
    finally:
        ex.stop()
    assert fin.outcome == "succeeded" and fin.actor == "allot.executor"
    # Journaled although the worker requires signatures (unsigned, it would be a dead letter).
    assert not live.dead_letters()
    [record] = [r for r in live.inbox_of(live.partition_of(SIGNED)) if fin.id.encode() in r.value]
    assert (HEADER_SIGNER, b"allot.executor") in list(record.headers)
