"""The host monitor's checks against recorded nvidia-smi answers (a fake nvidia-smi on PATH)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from monitor.checks import (
    QUERY_FIELDS,
    NvidiaSmiCheck,
    Observation,
    ParseError,
    XidLogCheck,
    judge,
    parse_query,
    worst,
)

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "nvidia-smi"
REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def fake_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``nvidia-smi`` on PATH is the fake; returns the file whose content it prints."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").symlink_to(FIXTURES / "fake-nvidia-smi")
    out = tmp_path / "answer"
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_NVIDIA_SMI_OUTPUT", str(out))
    monkeypatch.setenv("FAKE_NVIDIA_SMI_ARGS", str(tmp_path / "args"))
    return out


def _answer(out: Path, fixture: str) -> None:
    out.write_text((FIXTURES / fixture).read_text())


def test_healthy_host(fake_smi: Path) -> None:
    _answer(fake_smi, "healthy.csv")
    obs = NvidiaSmiCheck(expected_gpus=8).run()
    assert obs == Observation()
    args = (fake_smi.parent / "args").read_text().split()
    assert args == [f"--query-gpu={','.join(QUERY_FIELDS)}", "--format=csv,noheader,nounits"]


def test_uncorrected_ecc_is_degraded(fake_smi: Path) -> None:
    _answer(fake_smi, "ecc-uncorrected.csv")
    obs = NvidiaSmiCheck().run()
    assert obs.severity == "degraded"
    assert obs.reasons == ("GPU 5: 2 uncorrected ECC error(s)",)


def test_hot_gpu_is_degraded_at_the_limit_only(fake_smi: Path) -> None:
    _answer(fake_smi, "hot.csv")
    assert NvidiaSmiCheck(max_temp_c=90).run().reasons == ("GPU 3: 94 C (limit 90 C)",)
    assert NvidiaSmiCheck(max_temp_c=95).run().healthy


def test_a_lost_gpu_fails_the_host(fake_smi: Path) -> None:
    _answer(fake_smi, "lost-gpu.csv")
    obs = NvidiaSmiCheck(expected_gpus=8).run()
    assert obs.severity == "failed"
    assert obs.reasons == ("1 of 8 GPUs lost (index 6)",)
    assert NvidiaSmiCheck(expected_gpus=7).run().healthy


def test_device_handle_error_fails_the_host(fake_smi: Path) -> None:
    _answer(fake_smi, "device-handle-error.txt")
    obs = NvidiaSmiCheck().run()
    assert obs.severity == "failed"
    assert obs.reason == ("nvidia-smi exited 15: Unable to determine the device handle for "
                          "GPU0000:B7:00.0: Unknown Error")


def test_boards_without_ecc_report_nothing(fake_smi: Path) -> None:
    _answer(fake_smi, "no-remapping.csv")
    assert NvidiaSmiCheck().run().healthy


def test_no_nvidia_smi_and_garbage_output(tmp_path: Path, fake_smi: Path) -> None:
    obs = NvidiaSmiCheck(binary=str(tmp_path / "nowhere")).run()
    assert obs.severity == "failed" and "not found" in obs.reason
    fake_smi.write_text("NVIDIA-SMI has failed because it couldn't communicate with the driver\n")
    obs = NvidiaSmiCheck().run()
    assert obs.severity == "failed" and "unreadable output" in obs.reason


def test_parse_and_judge_pure() -> None:
    rows = parse_query((FIXTURES / "healthy.csv").read_text())
    assert [r.index for r in rows] == list(range(8)) and rows[4].temperature_c == 38
    with pytest.raises(ParseError):
        parse_query("0, GPU-x, 30\n")
    assert judge(rows[:6], 8, 90).reasons == ("2 of 8 GPUs lost (index 6, 7)",)
    # Failed wins, and keeps the lesser findings in its reason.
    ecc = parse_query((FIXTURES / "ecc-uncorrected.csv").read_text())
    o = judge(ecc[:7], 8, 90)
    assert o.severity == "failed" and len(o.reasons) == 2


def test_worst_combines() -> None:
    a = Observation(severity="degraded", reasons=("hot",))
    b = Observation(severity="failed", reasons=("lost",))
    assert worst([Observation(), a, b]) == Observation(severity="failed", reasons=("hot", "lost"))
    assert worst([Observation(), Observation()]).healthy


def test_xid_log_only_new_critical_lines_held_for_a_while(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_text("NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.\n")
    now = [0.0]
    check = XidLogCheck(log, hold_s=60, clock=lambda: now[0])
    assert check.run().healthy  # what was there before the monitor started is history
    with log.open("a") as fh:
        fh.write("NVRM: Xid (PCI:0000:3b:00): 13, Graphics Exception\n")  # the app's own
    assert check.run().healthy
    with log.open("a") as fh:
        fh.write("kernel: NVRM: Xid (PCI:0000:86:00): 48, An uncorrectable double bit error\n")
    now[0] = 10
    assert check.run() == Observation(severity="degraded", reasons=("XID 48 on PCI:0000:86:00",))
    now[0] = 50
    assert check.run().severity == "degraded"  # held
    now[0] = 71
    assert check.run().healthy  # the hold is over


def test_monitor_once_from_the_command_line(fake_smi: Path) -> None:
    env = {**os.environ, "ALLOT_CORE": "pure"}
    _answer(fake_smi, "lost-gpu.csv")
    p = subprocess.run([sys.executable, "-m", "allot", "monitor", "--host", "h1", "--once"],
                       cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 1 and "h1 failed: 1 of 8 GPUs lost (index 6)" in p.stdout, p.stderr
    _answer(fake_smi, "healthy.csv")
    p = subprocess.run([sys.executable, "-m", "allot", "monitor", "--host", "h1", "--once",
                        "--json"], cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and '"healthy": true' in p.stdout, p.stderr
    p = subprocess.run([sys.executable, "-m", "allot", "monitor", "--host", "h1", "--once",
                        "--fault-after", "0"], cwd=REPO, env=env, capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "at least 1" in p.stderr
