"""``allot keys create|list|register|rotate|revoke`` and ``allot sign``: keys from the command line.

- ``keys create NAME``: a new private key in the local key directory
  (``identity.local``, 0600); prints its public key and key id.
- ``keys list``: the local keys; ``--toml`` prints them as a keyring of public
  keys (for ``allot audit verify --keyring`` or a worker's ``keyring_file``).
- ``keys register NAME --role ROLE ...``: publish ``principal.registered``
  (signed by ``--actor``, an admin), with NAME's local public key or
  ``--public-key``.
- ``keys rotate NAME``: a new key for NAME, announced with
  ``principal.key_rotated`` signed by its current key; the new key file
  replaces the old one only once the worker took the rotation.
- ``keys revoke NAME --key-id ID``: publish ``principal.key_revoked``.
- ``sign FILE``: the signature headers of a JSON record, as kcat flags, so
  any producer (kcat, librdkafka, Go) publishes signed records
  (docs/live-clients.md).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from events import ROLES, PrincipalKeyRevoked, PrincipalKeyRotated, PrincipalRegistered
from events.errors import AllotError
from identity import keys
from identity.local import Keychain, key_dir

EXIT_ERROR = 2


def _keychain(args: argparse.Namespace) -> Keychain:
    return Keychain(args.key_dir) if getattr(args, "key_dir", None) else Keychain()


def _connection(p: argparse.ArgumentParser) -> None:
    """The connection and identity flags of the publishing verbs (as in streams.commands)."""
    g = p.add_argument_group("connection and identity")
    g.add_argument("--bootstrap", default=None, metavar="HOST:PORT",
                   help="Kafka bootstrap servers (default: the running allot up's, else "
                        "KAFKA_BOOTSTRAP_SERVERS, ALLOT_BOOTSTRAP, 127.0.0.1:9092)")
    g.add_argument("--topic-prefix", default=None, help="prefix of the topic names")
    g.add_argument("--config", default=None, metavar="FILE", help="the worker's TOML settings")
    g.add_argument("--cluster", default=None, help="the cluster (default: the first configured)")
    g.add_argument("--actor", default=None,
                   help="who publishes (default: $ALLOT_ACTOR or the login name)")
    g.add_argument("--key-file", default=None, metavar="FILE",
                   help="sign as --actor with this private key (default: its local key)")
    g.add_argument("--id", dest="event_id", default=None, help="the input's id")
    g.add_argument("--timeout", type=float, default=30.0, help="seconds to wait (default 30)")
    g.add_argument("--json", action="store_true", help="print the outcome as JSON")


def register(subparsers: Any) -> None:
    """Add ``allot keys`` and ``allot sign`` to the command line."""
    from streams.commands import _guarded

    k = subparsers.add_parser(
        "keys", help="local Ed25519 keys and the principals registered on the log",
        description=f"Private keys live in the local key directory ($ALLOT_KEY_DIR, else "
                    f"~/.config/allot/keys; here: {key_dir()}), one 0600 file per principal. "
                    f"Principals, their public keys and roles are events on the log.")
    k.set_defaults(func=lambda _a: (k.print_help(sys.stderr), EXIT_ERROR)[1])
    ks = k.add_subparsers(title="keys commands", metavar="COMMAND")

    p = ks.add_parser("create", help="create a private key for a principal (0600)",
                      description="Create NAME's private key in the key directory and print "
                                  "its public key and key id. An existing key is kept.")
    p.add_argument("name", help="the principal, e.g. alice")
    p.add_argument("--key-dir", default=None, help="the key directory")
    p.add_argument("--json", action="store_true", help="print as JSON")
    p.set_defaults(func=_guarded(_create))

    p = ks.add_parser("list", help="the local keys (public halves)",
                      description="List the principals with a key here, their public keys "
                                  "and key ids. --toml prints a keyring of public keys.")
    p.add_argument("--key-dir", default=None, help="the key directory")
    p.add_argument("--toml", action="store_true",
                   help="print a [keys] keyring (for allot audit verify --keyring)")
    p.add_argument("--json", action="store_true", help="print as JSON")
    p.set_defaults(func=_guarded(_list))

    p = ks.add_parser("register", help="publish principal.registered (an admin's verb)",
                      description="Register NAME with its public key and roles on the log. "
                                  "Signed by --actor, who must be an admin.")
    p.add_argument("name", help="the principal")
    p.add_argument("--role", action="append", required=True, choices=ROLES,
                   help="a role (repeatable)")
    p.add_argument("--host", action="append", default=[],
                   help="executors: a host it reports for (repeatable; '*': every host)")
    p.add_argument("--acts-for", action="append", default=[], metavar="PRINCIPAL",
                   help="a principal it may submit for (repeatable; '*': anyone)")
    p.add_argument("--public-key", default=None,
                   help="its public key (64 hex; default: its local key, created if missing)")
    p.add_argument("--key-dir", default=None, help="the key directory")
    _connection(p)
    p.set_defaults(func=_guarded(_register))

    p = ks.add_parser("rotate", help="a new key for a principal (principal.key_rotated)",
                      description="Create a new key for NAME and publish principal.key_rotated "
                                  "signed with its current key; the new key replaces the old "
                                  "one in the key directory once the worker took it (the old "
                                  "file is kept as NAME.key.<old key id>).")
    p.add_argument("name", help="the principal (signs with its current key)")
    p.add_argument("--key-dir", default=None, help="the key directory")
    _connection(p)
    p.set_defaults(func=_guarded(_rotate))

    p = ks.add_parser("revoke", help="retire a key at once (principal.key_revoked)",
                      description="Publish principal.key_revoked: inputs the key signs from now "
                                  "on are refused (revoked); earlier ones stay valid.")
    p.add_argument("name", help="the key's principal")
    p.add_argument("--key-id", required=True, help="the key id to revoke")
    p.add_argument("--reason", default="", help="why (free text)")
    _connection(p)
    p.set_defaults(func=_guarded(_revoke))

    p = subparsers.add_parser(
        "sign", help="print the signature headers of a JSON record (for kcat and friends)",
        description="Sign FILE's bytes exactly as they are (the message kcat -P sends for a "
                    "file argument) with --actor's private key, after checking that they are "
                    "an allot event whose actor is the signer and whose id is in its namespace. "
                    "Prints kcat flags: -k CLUSTER -p PARTITION -H allot-signer=... -H "
                    "allot-key-id=... -H allot-signature=...")
    p.add_argument("file", help="the JSON record ('-': standard input)")
    p.add_argument("--actor", default=None, help="the signer (default: the record's actor)")
    p.add_argument("--key-file", default=None, metavar="FILE", help="its private key file")
    p.add_argument("--key-dir", default=None, help="the key directory")
    p.add_argument("--partitions", type=int, default=8,
                   help="the inbox's partitions, for -p (default 8)")
    p.add_argument("--json", action="store_true",
                   help="print {key, partition, headers} as JSON instead")
    p.set_defaults(func=_guarded(_sign))


def _describe(kc: Keychain, name: str) -> dict[str, str]:
    return {"principal": name, "public_key": kc.public_hex(name) or "",
            "key_id": kc.key_id(name) or "", "file": str(kc.path(name))}


def _create(args: argparse.Namespace) -> int:
    kc = _keychain(args)
    existed = kc.secret(args.name) is not None
    kc.ensure(args.name)
    info = {**_describe(kc, args.name), "created": not existed}
    if args.json:
        print(json.dumps(info))
    else:
        what = "kept the existing key" if existed else "created"
        print(f"{args.name}: {what} {info['file']} (0600)\n  public key {info['public_key']}\n"
              f"  key id     {info['key_id']}")
    return 0


def _list(args: argparse.Namespace) -> int:
    kc = _keychain(args)
    rows = [_describe(kc, n) for n in kc.names()]
    if args.toml:
        print("[keys]")
        for r in rows:
            print(f'"{r["principal"]}" = "{r["public_key"]}"')
    elif args.json:
        print(json.dumps(rows))
    else:
        if not rows:
            print(f"no keys in {kc.dir}")
        for r in rows:
            print(f"{r['principal']:<24} {r['key_id']}  {r['public_key']}")
    return 0


def _publish(args: argparse.Namespace, build: Any) -> int:
    from streams.commands import _ctx, _envelope, _send

    ctx = _ctx(args)
    return _send(ctx, build(_envelope(ctx, "keys")))


def _register(args: argparse.Namespace) -> int:
    kc = _keychain(args)
    pub = args.public_key
    if pub is None:
        kc.ensure(args.name)
        pub = kc.public_hex(args.name)
    try:
        kid = keys.key_id(keys.public_from_hex(pub))
    except keys.KeyError_ as exc:
        raise AllotError(f"--public-key: {exc}") from None
    return _publish(args, lambda env: PrincipalRegistered(
        **env, principal=args.name, public_key=pub.strip().lower(), key_id=kid,
        roles=tuple(args.role), hosts=tuple(args.host), acts_for=tuple(args.acts_for)))


def _rotate(args: argparse.Namespace) -> int:
    kc = _keychain(args)
    old = kc.secret(args.name)
    if old is None:
        raise AllotError(f"no key for {args.name!r} in {kc.dir} to rotate from")
    seed = keys.new_seed_hex()
    new_pub = keys.public_of(seed.encode())
    args.actor = args.name
    if args.key_file is None:
        args.key_file = str(kc.path(args.name))
    code = _publish(args, lambda env: PrincipalKeyRotated(
        **env, principal=args.name, public_key=keys.public_hex(new_pub),
        key_id=keys.key_id(new_pub)))
    if code == 0:
        path = kc.path(args.name)
        old_kid = keys.key_id(keys.public_of(old))
        path.rename(path.with_name(f"{path.name}.{old_kid}"))
        keys.write_key_file(path, seed)
    return code


def _revoke(args: argparse.Namespace) -> int:
    return _publish(args, lambda env: PrincipalKeyRevoked(
        **env, principal=args.name, key_id=args.key_id, reason=args.reason))


def _sign(args: argparse.Namespace) -> int:
    from events import MalformedEvent, decode
    from streams.client import partition_for
    from streams.signing import sign_headers

    value = sys.stdin.buffer.read() if args.file == "-" else Path(args.file).read_bytes()
    try:
        event = decode(value)
    except MalformedEvent as exc:
        raise AllotError(f"{args.file}: not an allot event: {exc.reason}") from None
    signer = args.actor or event.actor
    if event.actor != signer:
        raise AllotError(f"the record's actor is {event.actor!r}, not the signer {signer!r}")
    if not event.id.startswith(signer + ":"):
        raise AllotError(f"the record's id {event.id!r} must begin with '{signer}:' (ids are "
                         f"per signer)")
    if args.key_file:
        lines = Path(args.key_file).read_text().splitlines()
        secret = lines[0].strip().encode() if lines and lines[0].strip() else None
    else:
        secret = _keychain(args).secret(signer)
    if not secret:
        raise AllotError(f"no private key for {signer!r} (allot keys create {signer})")
    headers = sign_headers(value, signer, secret)
    part = partition_for(event.cluster, args.partitions)
    if args.json:
        print(json.dumps({"key": event.cluster, "partition": part,
                          "headers": {k: v.decode() for k, v in headers}}))
    else:
        print(" ".join([f"-k {event.cluster}", f"-p {part}",
                        *(f"-H {k}={v.decode()}" for k, v in headers)]))
    return 0
