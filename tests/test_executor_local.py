"""The local executor without Kafka: process supervision, the host's journal fold, one reconcile pass.

Real processes (short ``sh`` scripts) on fake GPU ids; the journal is a list
of events fed to the executor's book by hand, so every case runs in a second
or two.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest

from events import (
    Event,
    InputRejected,
    Slot,
    WorkloadFinished,
    WorkloadPreempted,
    WorkloadStarted,
    WorkloadStopped,
)
from events.factory import Inputs
from executor.book import HostBook
from executor.local import LocalExecutor, finished_id, stopped_id
from executor.spec import RunSpec, log_file, run_environment
from executor.supervisor import Supervisor
from tests.kafka import wait_until

T = 1_000_000
GPUS = ("0", "1", "2", "3")


def _spec(tmp: Path, script: str, *, workload: str = "w", run: int = 1,
          gpus: tuple[str, ...] = ("1", "3"), **kw: Any) -> RunSpec:
    values: dict[str, Any] = dict(cluster="c", workload=workload, run=run, host="h0", rank=0,
                                  world_size=1, hosts=("h0",), gpu_ids=gpus,
                                  argv=("sh", "-c", script), workdir=str(tmp), log_path="")
    values.update(kw)
    return RunSpec(**values)


def _ended(sup: Supervisor, s: Any, timeout: float = 10.0) -> None:
    wait_until(lambda: not sup.alive(s), timeout, interval=0.02, what="the run to end")


# -- the supervisor ------------------------------------------------------------------------


def test_a_run_gets_exactly_its_gpus_and_its_exit_code(tmp_path: Path) -> None:
    sup = Supervisor(tmp_path / "state", GPUS, base_env={"PATH": os.environ["PATH"]})
    s = sup.launch(_spec(tmp_path, 'echo "gpus=$CUDA_VISIBLE_DEVICES rank=$RANK of $WORLD_SIZE"; '
                                   "echo oops >&2; exit 3"))
    assert sup.free_ids() == ["0", "2"]
    _ended(sup, s)
    ex = sup.exit_of(s)
    assert (ex.exit_code, ex.signal, ex.reason, ex.ok) == (3, None, None, False)
    assert sup.log_of(s).read_text() == "gpus=1,3 rank=0 of 1\noops\n"
    assert sup.log_of(s) == tmp_path / "state" / "logs" / "w.run1.log"
    assert sup.free_ids() == list(GPUS)


def test_sigterm_lets_a_trapping_process_checkpoint_within_its_grace(tmp_path: Path) -> None:
    sup = Supervisor(tmp_path / "state", GPUS, base_env={"PATH": os.environ["PATH"]})
    ckpt = tmp_path / "ckpt"
    s = sup.launch(_spec(tmp_path, f"trap 'echo saved > {ckpt}; exit 0' TERM; "
                                   "echo up; while :; do sleep 0.05; done"))
    wait_until(lambda: sup.log_of(s).exists() and "up" in sup.log_of(s).read_text(), 10,
               what="the trap to be set")
    now = time.time()
    sup.terminate(s, 5.0, "preempted", now)
    _ended(sup, s)
    sup.kill_due(s, now + 1)  # (nothing left to kill)
    ex = sup.exit_of(s)
    assert (ex.exit_code, ex.signal) == (0, None)
    assert ckpt.read_text() == "saved\n"
    assert time.time() - now < 4


def test_a_process_that_ignores_sigterm_is_killed_when_its_grace_ends(tmp_path: Path) -> None:
    sup = Supervisor(tmp_path / "state", GPUS, base_env={"PATH": os.environ["PATH"]})
    s = sup.launch(_spec(tmp_path, "trap '' TERM; echo up; while :; do sleep 0.05; done"))
    wait_until(lambda: sup.log_of(s).exists() and "up" in sup.log_of(s).read_text(), 10,
               what="the trap to be set")
    now = time.time()
    sup.terminate(s, 0.5, "preempted", now)
    time.sleep(0.3)
    sup.kill_due(s, time.time())
    assert sup.alive(s), "killed before its grace ended"
    sup.kill_due(s, now + 0.5)
    _ended(sup, s)
    assert sup.exit_of(s).signal == "SIGKILL"


def test_a_restarted_supervisor_finds_its_runs_and_how_they_ended(tmp_path: Path) -> None:
    state = tmp_path / "state"
    first = Supervisor(state, GPUS, base_env={"PATH": os.environ["PATH"]})
    go = tmp_path / "go"
    s = first.launch(_spec(tmp_path, f"while [ ! -e {go} ]; do sleep 0.05; done; exit 7"))
    wait_until(lambda: (s.path / "pid.json").exists(), 10, what="the launcher's pid file")
    # A new supervisor on the same directory (the executor restarted): the run is adopted.
    again = Supervisor(state, GPUS, base_env={})
    [found] = again.load()
    assert found.key == ("w", 1) and found.proc is None and again.alive(found)
    assert again.free_ids() == ["0", "2"]
    with pytest.raises(FileExistsError):
        again.launch(_spec(tmp_path, "exit 0"))  # never twice
    go.touch()
    _ended(again, found)
    assert again.exit_of(found).exit_code == 7
    first.runs[s.key].proc.wait(5)  # (reap the child of the "dead" executor)


def test_a_command_that_cannot_start_is_reported_so(tmp_path: Path) -> None:
    sup = Supervisor(tmp_path / "state", GPUS, base_env={"PATH": os.environ["PATH"]})
    s = sup.launch(_spec(tmp_path, "", argv=("/no/such/program",)))
    _ended(sup, s)
    ex = sup.exit_of(s)
    assert ex.reason == "cannot_start" and "No such file" in (ex.error or "")


def test_the_environment_names_the_gang_and_allot_has_the_last_word(tmp_path: Path) -> None:
    spec = _spec(tmp_path, "", rank=1, world_size=2, hosts=("h7", "h0"),
                 env=("CUDA_VISIBLE_DEVICES=0,1,2,3", "MY_FLAG=on"))
    env = run_environment(spec, {"PATH": "/bin"})
    assert env["CUDA_VISIBLE_DEVICES"] == "1,3"
    assert (env["RANK"], env["WORLD_SIZE"], env["MASTER_ADDR"], env["MY_FLAG"]) == \
        ("1", "2", "h7", "on")
    assert env["MASTER_PORT"] == run_environment(
        _spec(tmp_path, "", rank=0, world_size=2, hosts=("h7", "h0")), {})["MASTER_PORT"]
    assert log_file("/logs/{workload}-{run}-{rank}.out", tmp_path, "a/b", 2, 1, "h0") == \
        Path("/logs/a_b-2-1.out")


# -- the book and one reconcile pass ------------------------------------------------------


class Journal:
    """Hand-made journal events for cluster ``c``."""

    def __init__(self) -> None:
        self.mk = Inputs("c", prefix="i")
        self.n = 0

    def decision(self, cls: type, **kw: Any) -> Event:
        self.n += 1
        return cls(id=f"d{self.n}", at=kw.pop("at", T), cluster="c", cause="cause", **kw)

    def started(self, workload: str, slots: tuple[tuple[str, int], ...]) -> Event:
        return self.decision(WorkloadStarted, workload=workload,
                             placement=tuple(Slot(host=h, gpus=g) for h, g in slots),
                             allocated=True, protected_until=T + 60)

    def preempted(self, workload: str) -> Event:
        return self.decision(WorkloadPreempted, workload=workload, reason="fair_share",
                             requeued=True)


def _executor(tmp: Path, *events: Event) -> LocalExecutor:
    ex = LocalExecutor("unused:1", "", "c", "h0", GPUS, tmp / "state",
                       base_env={"PATH": os.environ["PATH"]}, kill_wait_s=1.0)
    for e in events:
        ex.book.add(e)
    return ex


def reconcile_until(ex: LocalExecutor, until: Any, timeout: float = 10.0) -> list[Event]:
    """Reconcile until ``until(reports)`` holds; every report made."""
    reports: list[Event] = []
    deadline = time.monotonic() + timeout
    while not until(reports):
        assert time.monotonic() < deadline, f"timed out; reports so far: {reports}"
        for s, e in ex.reconcile(time.time()):
            reports.append(e)
            if s is not None:
                ex.supervisor.mark_reported(s, e.id)
        time.sleep(0.02)
    return reports


def test_a_started_share_runs_once_and_its_exit_is_reported_with_its_run(tmp_path: Path) -> None:
    j = Journal()
    ex = _executor(tmp_path, j.mk.submit("w", "lab/a", 2, 0, at=T, command=("sh", "-c", "exit 4")),
                   j.mk.tick(T), j.started("w", (("h1", 8), ("h0", 2))))
    assert ex.book.active["w"].rank == 1
    [report] = reconcile_until(ex, lambda r: r)
    assert isinstance(report, WorkloadFinished)
    assert (report.id, report.outcome, report.exit_code, report.run_number) == (
        finished_id("c", "w", 1), "failed", 4, 1)
    assert len(ex.supervisor.runs) == 1
    assert ex.reconcile(time.time()) == []  # reported once, launched once


def test_a_gang_peers_success_is_left_to_rank_0(tmp_path: Path) -> None:
    j = Journal()
    ex = _executor(tmp_path, j.mk.submit("w", "lab/a", 2, 0, at=T, command=("true",)),
                   j.mk.tick(T), j.started("w", (("h1", 1), ("h0", 1))))
    assert ex.reconcile(time.time()) == []
    [s] = ex.supervisor.runs.values()
    assert s.spec.rank == 1
    _ended(ex.supervisor, s)
    assert ex.reconcile(time.time()) == []  # exit 0 on rank 1: nothing to report
    assert s.reported == ""


def test_a_preempted_share_is_stopped_with_the_grace_and_reported_stopped(tmp_path: Path) -> None:
    j = Journal()
    ckpt = tmp_path / "ckpt"
    policy = j.mk.policy(at=T, preemption_grace_s=5)
    script = f"trap 'echo ok > {ckpt}; exit 0' TERM; while :; do sleep 0.05; done"
    ex = _executor(tmp_path, policy, j.mk.submit("w", "lab/a", 2, 0, at=T,
                                                 command=("sh", "-c", script)),
                   j.mk.tick(T), j.started("w", (("h0", 2),)))
    assert ex.reconcile(time.time()) == []
    [s] = ex.supervisor.runs.values()
    wait_until(lambda: (s.path / "pid.json").exists(), 10, what="the run to start")
    time.sleep(0.2)  # (sh sets its trap)
    ex.book.add(j.preempted("w"))
    ex.book.add(j.mk.tick(T + 1))
    [report] = reconcile_until(ex, lambda r: r)
    assert isinstance(report, WorkloadStopped)
    assert (report.id, report.run_number, report.host, report.exit_code) == (
        stopped_id("c", "w", 1, "h0"), 1, "h0", 0)
    assert ckpt.read_text() == "ok\n"
    assert s.stop is not None and s.stop["reason"] == "preempted"
    assert float(s.stop["kill_at"]) - float(s.stop["term_at"]) == 5.0


def test_a_run_past_its_time_limit_is_stopped_and_reported_failed(tmp_path: Path) -> None:
    j = Journal()
    ex = _executor(tmp_path, j.mk.submit("w", "lab/a", 1, 0, at=T, time_limit_s=1,
                                         command=("sh", "-c", "sleep 30")),
                   j.mk.tick(T), j.started("w", (("h0", 1),)))
    t0 = time.monotonic()
    [report] = reconcile_until(ex, lambda r: r)
    assert isinstance(report, WorkloadFinished)
    assert (report.outcome, report.reason, report.signal) == ("failed", "time_limit", "SIGTERM")
    assert 1.0 <= time.monotonic() - t0 < 5


def test_a_workload_with_no_command_is_answered_cannot_start(tmp_path: Path) -> None:
    j = Journal()
    ex = _executor(tmp_path, j.mk.submit("w", "lab/a", 1, 0, at=T), j.mk.tick(T),
                   j.started("w", (("h0", 1),)))
    [(s, report)] = ex.reconcile(time.time())
    assert s is None and isinstance(report, WorkloadFinished) and report.reason == "cannot_start"
    assert ex.reconcile(time.time()) == []


def test_the_book_follows_runs_across_hosts() -> None:
    j = Journal()
    book = HostBook("c", "h0")
    for e in (j.mk.submit("w", "lab/a", 1, 0, at=T, command=("true",)), j.mk.tick(T),
              j.started("w", (("h5", 1),)), j.preempted("w"), j.mk.tick(T + 1),
              j.started("w", (("h0", 1),)), j.mk.tick(T + 2)):
        book.add(e)
    assert book.active["w"].run == 2  # the first run was on h5; this host has the second
    assert book.stops == {}


@pytest.mark.parametrize("rejected", [True, False])
def test_only_an_accepted_cancel_stops_the_share(rejected: bool) -> None:
    """A cancel applies once its group is complete, unless a rejection answered it."""
    j = Journal()
    book = HostBook("c", "h0")
    cancel = j.mk.cancel("v", actor="mallory", at=T)
    events: list[Event] = [j.mk.submit("v", "lab/a", 1, 0, at=T, command=("true",)),
                           j.mk.tick(T), j.started("v", (("h0", 1),)), cancel]
    if rejected:
        events.append(InputRejected(id=f"{cancel.id}/1", at=T, cluster="c", cause=cancel.id,
                                    reason="not_authorised"))
    for e in [*events, j.mk.tick(T + 1)]:
        book.add(e)
    assert ("v" in book.active) is rejected
    assert (("v", 1) in book.stops) is not rejected


def test_the_books_grace_is_the_schedulers() -> None:
    j = Journal()
    book = HostBook("c", "h0")
    for e in (j.mk.policy(at=T, preemption_grace_s=60),
              j.mk.submit("a", "lab/a", 1, 0, at=T, grace_s=10),
              j.mk.submit("b", "lab/a", 1, 0, at=T, grace_s=600),
              j.mk.submit("c", "lab/a", 1, 0, at=T), j.mk.tick(T)):
        book.add(e)
    assert [book.grace_of(w) for w in "abc"] == [10, 60, 60]


# -- allot submit -- CMD --------------------------------------------------------------------


def test_submit_takes_the_command_after_double_dash_and_slurm_durations(tmp_path: Path) -> None:
    from allot.cli import build_parser
    from streams.commands import run_spec

    args = build_parser().parse_args([
        "submit", "--budget", "lab/a", "--gpus", "2", "--time", "1:30:00", "--env", "A=1",
        "--env", "B=x=y", "--workdir", str(tmp_path), "--grace", "30s", "--",
        "python", "train.py", "--lr", "3e-4"])
    assert run_spec(args) == {
        "command": ("python", "train.py", "--lr", "3e-4"), "workdir": str(tmp_path),
        "env": ("A=1", "B=x=y"), "log_path": None, "time_limit_s": 5400, "grace_s": 30}
    assert args.command == "submit"  # (the verb's name is not the workload's command)
    plain = build_parser().parse_args(["submit", "--budget", "lab/a", "--gpus", "2"])
    assert set(run_spec(plain).values()) == {None}


def test_submit_refuses_a_bad_env_entry() -> None:
    from allot.cli import build_parser
    from streams.commands import run_spec
    from streams.errors import ClientError

    args = build_parser().parse_args(["submit", "--budget", "lab/a", "--gpus", "1",
                                      "--env", "NOVALUE", "--", "true"])
    with pytest.raises(ClientError, match="NAME=VALUE"):
        run_spec(args)


def test_a_run_directory_cut_before_its_spec_is_launched_afresh(tmp_path: Path) -> None:
    state = tmp_path / "state"
    (state / "runs" / "w.run1").mkdir(parents=True)      # the executor died right after mkdir
    (state / "runs" / "w.run1" / "spec.json.tmp").write_text("{")
    sup = Supervisor(state, GPUS, base_env={"PATH": os.environ["PATH"]})
    assert sup.load() == []
    s = sup.launch(_spec(tmp_path, "exit 0"))
    _ended(sup, s)
    assert sup.exit_of(s).ok


def test_gpu_ids_are_given_counted_or_listed_by_nvidia_smi(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from executor.cli import GpuDiscoveryError, gpu_ids

    assert gpu_ids(3, None) == ("0", "1", "2")
    assert gpu_ids(None, "GPU-a, GPU-b") == ("GPU-a", "GPU-b")
    with pytest.raises(GpuDiscoveryError, match="does not name 3"):
        gpu_ids(3, "0,1")
    fake = tmp_path / "bin"
    fake.mkdir()
    smi = fake / "nvidia-smi"
    # What `nvidia-smi --query-gpu=index --format=csv,noheader` prints on a 4-GPU host.
    smi.write_text('#!/bin/sh\n[ "$1" = "--query-gpu=index" ] || exit 9\nprintf "0\\n1\\n2\\n3\\n"\n')
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake}:{os.environ['PATH']}")
    assert gpu_ids(None, None) == ("0", "1", "2", "3")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(GpuDiscoveryError, match="no nvidia-smi"):
        gpu_ids(None, None)


def test_submit_runs_a_script_file_like_sbatch(tmp_path: Path) -> None:
    from allot.cli import build_parser
    from streams.commands import run_spec
    from streams.errors import ClientError

    plain, runnable = tmp_path / "job.sh", tmp_path / "run.sh"
    plain.write_text("echo hi\n")
    runnable.write_text("#!/bin/sh\necho hi\n")
    runnable.chmod(0o755)

    def spec(*argv: str) -> dict[str, Any]:
        return run_spec(build_parser().parse_args(
            ["submit", "--budget", "lab/a", "--gpus", "1", *argv]))

    assert spec("--script", str(plain))["command"] == ("sh", str(plain))
    assert spec("--script", str(runnable), "--", "--epochs", "3")["command"] == (
        str(runnable), "--epochs", "3")
    with pytest.raises(ClientError, match="no such file"):
        spec("--script", str(tmp_path / "missing.sh"))
