"""``allot keys create|list`` and ``allot sign`` (no broker): files, modes, and signatures that verify."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import tomllib
from pathlib import Path

from events import WorkloadSubmitted, encode
from identity.local import Keychain, namespaced_id
from streams import signing

REPO = Path(__file__).resolve().parent.parent


def allot(key_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ALLOT_")}
    env["ALLOT_KEY_DIR"] = str(key_dir)
    return subprocess.run([sys.executable, "-m", "allot", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=60)


def test_create_writes_a_0600_key_in_a_0700_directory_and_keeps_it(tmp_path: Path) -> None:
    d = tmp_path / "keys"
    first = allot(d, "keys", "create", "alice", "--json")
    assert first.returncode == 0, first.stderr
    info = json.loads(first.stdout)
    path = Path(info["file"])
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(d.stat().st_mode) == 0o700
    again = json.loads(allot(d, "keys", "create", "alice", "--json").stdout)
    assert again["created"] is False and again["public_key"] == info["public_key"]
    ring_text = allot(d, "keys", "list", "--toml").stdout
    ring = tomllib.loads(ring_text)["keys"]
    assert ring == {"alice": info["public_key"]}


def test_sign_prints_headers_that_verify_and_refuses_what_the_worker_would(tmp_path: Path) -> None:
    d = tmp_path / "keys"
    Keychain(d).ensure("alice")
    e = WorkloadSubmitted(id="alice:k-1", at=1, cluster="default", actor="alice", source="kcat",
                          workload="w", budget="lab/a", user="alice", gpus=1, min_runtime_s=0)
    rec = tmp_path / "rec.json"
    rec.write_bytes(encode(e))
    out = allot(d, "sign", str(rec), "--json")
    assert out.returncode == 0, out.stderr
    sig = json.loads(out.stdout)
    assert sig["key"] == "default" and 0 <= sig["partition"] < 8
    headers = [(k, v.encode()) for k, v in sig["headers"].items()]
    ring = signing.Keyring.from_file(_ring(tmp_path, d))
    v = signing.verify(rec.read_bytes(), headers, ring)
    assert v.signer == "alice" and v.problem is None
    # One changed byte after signing: the signature no longer holds.
    assert signing.verify(rec.read_bytes().replace(b'"gpus":1', b'"gpus":8'), headers,
                          ring).problem == signing.BAD_SIGNATURE
    kcat = allot(d, "sign", str(rec)).stdout.split()
    assert kcat[:2] == ["-k", "default"] and "-H" in kcat
    # The worker's rules, said before anything is published.
    rec.write_bytes(encode(WorkloadSubmitted(**{**_env(e), "id": "k-2"})))
    bad = allot(d, "sign", str(rec))
    assert bad.returncode == 2 and "must begin with 'alice:'" in bad.stderr
    assert bad.stderr.count("\n") == 1
    assert allot(d, "sign", str(rec), "--actor", "bob").returncode == 2


def test_namespaced_ids_are_deterministic_and_bounded() -> None:
    assert namespaced_id("alice", "submit:1") == "alice:submit:1"
    assert namespaced_id("alice", "alice:submit:1") == "alice:submit:1"
    long = namespaced_id("allot.executor", "x" * 127)
    assert len(long) <= 128 and long == namespaced_id("allot.executor", "x" * 127)


def _env(e: WorkloadSubmitted) -> dict[str, object]:
    import msgspec

    return msgspec.structs.asdict(e)


def _ring(tmp: Path, d: Path) -> Path:
    p = tmp / "ring.toml"
    p.write_text(f'[keys]\nalice = "{Keychain(d).public_hex("alice")}"\n')
    return p
