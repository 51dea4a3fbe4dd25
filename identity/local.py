"""The local key directory: this machine's private keys, one 0600 file per principal.

``allot up`` creates the keys its own parts sign with (the first admin, the
local command-line user, the simulated executor) and every command-line verb
signs with ``<dir>/<actor>.key`` when it exists, so the default deployment is
signed with no extra step. The directory is ``$ALLOT_KEY_DIR``, else
``$XDG_CONFIG_HOME/allot/keys``, else ``~/.config/allot/keys``; it is created
0700 and each key file 0600, holding the Ed25519 seed as 64 hex characters
(``identity.keys.write_key_file``).

Keys are kept (never re-made on start) because the log remembers them: a
restarted ``allot up`` restores its journal from the archive, whose
registrations name the old public keys.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Mapping
from pathlib import Path

from identity import keys

KEY_SUFFIX = ".key"
_NAME = re.compile(r"[A-Za-z0-9._@+=~-]{1,64}")
MAX_ID_CHARS = 128


def key_dir(environ: Mapping[str, str] | None = None) -> Path:
    """Where this machine's private keys live (see the module docstring)."""
    env = os.environ if environ is None else environ
    if env.get("ALLOT_KEY_DIR"):
        return Path(env["ALLOT_KEY_DIR"])
    base = Path(env["XDG_CONFIG_HOME"]) if env.get("XDG_CONFIG_HOME") else \
        Path.home() / ".config"
    return base / "allot" / "keys"


def namespaced_id(principal: str, event_id: str) -> str:
    """``event_id`` in ``principal``'s namespace (``<principal>:<id>``), deterministic.

    The worker takes a signed input only when its id begins with its signer's
    name and ``:`` (ids are per signer); an id that would be too long is hashed.
    """
    if event_id.startswith(principal + ":"):
        return event_id
    nid = f"{principal}:{event_id}"
    if len(nid) > MAX_ID_CHARS:
        nid = f"{principal}:h-{hashlib.blake2b(event_id.encode(), digest_size=16).hexdigest()}"
    return nid


class Keychain:
    """Private keys by principal name: files in a directory, or (for tests, demos) in memory."""

    def __init__(self, directory: str | Path | None = None,
                 memory: Mapping[str, bytes] | None = None) -> None:
        self.dir = Path(directory) if directory is not None else key_dir()
        self._memory: dict[str, bytes] = dict(memory or {})

    def path(self, principal: str) -> Path:
        if _NAME.fullmatch(principal) is None:
            raise keys.KeyError_(f"{principal[:80]!r} is not a principal name "
                                 f"([A-Za-z0-9._@+=~-]{{1,64}})")
        return self.dir / f"{principal}{KEY_SUFFIX}"

    def secret(self, principal: str) -> bytes | None:
        """The private key (seed hex) of ``principal``, or None when there is none here."""
        if principal in self._memory:
            return self._memory[principal]
        if _NAME.fullmatch(principal) is None:
            return None
        try:
            text = self.path(principal).read_text().splitlines()
        except OSError:
            return None
        return text[0].strip().encode() if text and text[0].strip() else None

    def ensure(self, principal: str) -> bytes:
        """``principal``'s key, created (0600, in a 0700 directory) if it has none yet."""
        have = self.secret(principal)
        if have is not None:
            return have
        path = self.path(principal)
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        seed = keys.new_seed_hex()
        try:
            # O_EXCL: two processes creating one key at once keep the first one's.
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            got = self.secret(principal)
            if got is None:
                raise keys.KeyError_(f"{path}: exists but holds no key") from None
            return got
        with os.fdopen(fd, "w") as fh:
            fh.write(seed + "\n")
        return seed.encode()

    def add(self, principal: str, secret: bytes) -> None:
        """Hold ``secret`` for ``principal`` in memory (not written anywhere)."""
        self._memory[principal] = secret

    def public_hex(self, principal: str) -> str | None:
        s = self.secret(principal)
        return keys.public_hex(keys.public_of(s)) if s is not None else None

    def key_id(self, principal: str) -> str | None:
        s = self.secret(principal)
        return keys.key_id(keys.public_of(s)) if s is not None else None

    def names(self) -> list[str]:
        """The principals with a key file here (and in memory)."""
        found = set(self._memory)
        if self.dir.is_dir():
            found |= {p.name[: -len(KEY_SUFFIX)] for p in self.dir.glob(f"*{KEY_SUFFIX}")}
        return sorted(found)
