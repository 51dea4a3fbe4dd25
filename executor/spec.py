"""One host's share of one run: what to execute, on which GPUs, with which environment, logging where.

A ``RunSpec`` is fixed when the executor launches the run and written to the
run's directory, so a restarted executor knows what it launched (and which
GPU ids are taken) without the journal.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from pathlib import Path

import msgspec

_SAFE = re.compile(r"[^A-Za-z0-9._-]")
MASTER_PORT_BASE = 29_500


class RunSpec(msgspec.Struct, frozen=True, kw_only=True):
    """This host's share of run ``run`` of ``workload`` (rank ``rank`` of ``world_size`` hosts)."""

    cluster: str
    workload: str
    run: int
    host: str
    rank: int
    world_size: int
    hosts: tuple[str, ...]          # the gang's hosts in placement order (rank = index)
    gpu_ids: tuple[str, ...]        # exactly the GPUs of this share (CUDA_VISIBLE_DEVICES)
    argv: tuple[str, ...]
    workdir: str | None = None
    env: tuple[str, ...] = ()       # NAME=value entries of the workload
    log_path: str
    time_limit_s: int | None = None
    grace_s: int = 0                # how long a stop waits between SIGTERM and SIGKILL
    # With hooks (executor.hooks): where this share's checkpoint goes, and the
    # completed checkpoint of an earlier run it restores from (None: none).
    checkpoint_dir: str | None = None
    restore_from: str | None = None


def safe_name(text: str, limit: int = 80) -> str:
    """``text`` as one file name: unsafe characters replaced, long names shortened with a digest."""
    name = _SAFE.sub("_", text)
    if len(name) > limit or name in ("", ".", ".."):
        digest = hashlib.blake2b(text.encode(), digest_size=8).hexdigest()
        name = name[: limit - 17] + "-" + digest
    return name


def master_port(workload: str, run: int) -> int:
    """The rendezvous port of a gang: the same on every host, derived from workload and run."""
    h = hashlib.blake2b(f"{workload}:{run}".encode(), digest_size=4).digest()
    return MASTER_PORT_BASE + int.from_bytes(h, "big") % 10_000


def log_file(template: str | None, log_dir: Path, workload: str, run: int, rank: int,
             host: str) -> Path:
    """Where the output of this share goes: the workload's ``log_path`` filled in, else one file per run.

    ``{workload}``, ``{run}``, ``{rank}`` and ``{host}`` are replaced; a relative
    path is under ``log_dir``. The default names a gang's shares by rank.
    """
    if template:
        text = (template.replace("{workload}", safe_name(workload)).replace("{run}", str(run))
                .replace("{rank}", str(rank)).replace("{host}", safe_name(host)))
        p = Path(text).expanduser()
        return p if p.is_absolute() else log_dir / p
    suffix = f".rank{rank}" if rank else ""
    return log_dir / f"{safe_name(workload)}.run{run}{suffix}.log"


def run_environment(spec: RunSpec, base: Mapping[str, str]) -> dict[str, str]:
    """The environment the command gets: ``base``, the workload's own entries, then allot's.

    allot's come last so a workload cannot claim other GPUs: ``CUDA_VISIBLE_DEVICES``
    is exactly this share's. The gang variables follow torchrun's names, one
    process group per host: ``RANK``/``NODE_RANK`` is the host's index in the
    placement, ``WORLD_SIZE``/``NNODES`` the number of hosts, ``MASTER_ADDR`` the
    first host, ``LOCAL_WORLD_SIZE`` the GPUs here. A run with hooks also gets
    ``ALLOT_CHECKPOINT_DIR`` and, when it restores, ``ALLOT_RESTORE_FROM``.
    """
    env = dict(base)
    for item in spec.env:
        name, _, value = item.partition("=")
        env[name] = value
    ids = ",".join(spec.gpu_ids)
    env.update({
        "CUDA_VISIBLE_DEVICES": ids,
        "NVIDIA_VISIBLE_DEVICES": ids,
        "MASTER_ADDR": spec.hosts[0],
        "MASTER_PORT": str(master_port(spec.workload, spec.run)),
        "RANK": str(spec.rank),
        "NODE_RANK": str(spec.rank),
        "WORLD_SIZE": str(spec.world_size),
        "NNODES": str(spec.world_size),
        "LOCAL_WORLD_SIZE": str(len(spec.gpu_ids)),
        "ALLOT_CLUSTER": spec.cluster,
        "ALLOT_WORKLOAD": spec.workload,
        "ALLOT_RUN": str(spec.run),
        "ALLOT_HOST": spec.host,
        "ALLOT_HOSTS": ",".join(spec.hosts),
    })
    if spec.checkpoint_dir is not None:
        env["ALLOT_CHECKPOINT_DIR"] = spec.checkpoint_dir
    if spec.restore_from is not None:
        env["ALLOT_RESTORE_FROM"] = spec.restore_from
    return env


__all__ = ["RunSpec", "log_file", "master_port", "run_environment", "safe_name"]
