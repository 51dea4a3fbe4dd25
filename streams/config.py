"""The live worker's settings: defaults, then a TOML file, then the environment, then flags.

Every setting is one field of ``WorkerSettings`` with its documentation beside
it (``SETTINGS`` lists them; docs/live.md has the same table, and a test keeps
the two in step). A setting named ``foo_bar`` is read from the key ``foo_bar``
of the config file (top level or a ``[worker]`` table), from the environment
variable ``ALLOT_FOO_BAR``, and from the flag ``--foo-bar``; the bootstrap
servers are also read from ``KAFKA_BOOTSTRAP_SERVERS``, the name every Kafka
tool uses. Later sources win. A bad value is a ``ConfigError`` naming the
source and the setting, never a traceback.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from events.errors import AllotError

ENV_PREFIX = "ALLOT_"
BOOTSTRAP_ENV = "KAFKA_BOOTSTRAP_SERVERS"


class ConfigError(AllotError):
    """A setting could not be read: an unknown key, a bad value, an unreadable file."""


def _doc(text: str, default: Any) -> Any:
    return dataclasses.field(default=default, metadata={"doc": text})


def _default_name() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


@dataclasses.dataclass(frozen=True, kw_only=True)
class WorkerSettings:
    """Everything the worker, the ticker and the journal export read. Immutable."""

    bootstrap: str = _doc(
        "Kafka bootstrap servers, `HOST:PORT[,HOST:PORT...]`. Also read from "
        "`KAFKA_BOOTSTRAP_SERVERS`.", "127.0.0.1:9092")
    topic_prefix: str = _doc(
        "Prefix of every topic name (`allot.inbox` becomes `<prefix>allot.inbox`).", "")
    clusters: tuple[str, ...] = _doc(
        "The clusters this deployment schedules. Inputs for any other cluster are "
        "dead-lettered (`unknown_cluster`); the ticker ticks each owned one. In the "
        "environment: comma-separated.", ("default",))
    partitions: int = _doc(
        "Partitions of the topics the worker creates (inbox, journal, snapshots and dead "
        "letter alike). Existing topics keep theirs; inbox, journal and snapshots must agree.",
        8)
    replication_factor: int = _doc("Replication factor of the topics the worker creates.", 1)
    group: str = _doc("The consumer group the workers share on the inbox.", "allot.worker")
    worker_name: str = _doc(
        "This worker's name in claims, dead letters and logs (default: host-pid).", "")
    instance_id: str = _doc(
        "Static group membership (`group.instance.id`): a worker restarted with the same id "
        "takes its partitions back without waiting for the session timeout. Empty: dynamic.",
        "")
    session_timeout_ms: int = _doc(
        "How long the group waits for a silent worker before giving its partitions to "
        "another (the takeover time after a crash is about this).", 6000)
    heartbeat_interval_ms: int = _doc("Heartbeat period to the group coordinator.", 1000)
    liveness: bool = _doc(
        "Fast takeover: every worker writes a heartbeat to `allot.liveness` every "
        "`liveness_interval_s`, and when the worker holding a partition has not been heard "
        "for `liveness_lapse_s`, a live one claims it at once (the claim fences the silent "
        "one), without waiting for the group's session timeout and rebalance. Off: the "
        "group alone moves partitions.", True)
    liveness_interval_s: float = _doc(
        "Seconds between two heartbeats of a worker on `allot.liveness`.", 0.5)
    liveness_lapse_s: float = _doc(
        "A worker not heard for this long is taken for dead or frozen and its partitions are "
        "claimed by another (safe even when it is only slow: the claim fences it). Shorter: "
        "faster failover, more needless takeovers of a worker that stalls (a long GC, a "
        "loaded machine).", 2.0)
    tick_interval_s: float = _doc(
        "Wall-clock seconds between two ticks of each owned cluster.", 1.0)
    time_scale: float = _doc(
        "Virtual seconds per wall-clock second. 1: ticks carry the wall clock. Above 1, "
        "virtual time continues from the cluster's last tick at this speed (demos, tests).",
        1.0)
    tick_key: str = _doc(
        "The ticker's private key, shared by the workers of a group only (each tick is signed "
        "with Ed25519 under it: a 64-hex seed, or any secret hashed to one). Every worker of a "
        "group needs the same one; empty: a random key per process (a single worker only). "
        "Prefer `tick_key_file` or `ALLOT_TICK_KEY` to a flag.", "")
    tick_key_file: str = _doc("A file holding `tick_key` (its first line).", "")
    ticker_principal: str = _doc(
        "The signer name (and `actor`) of ticks. A tick signed by anyone else is dead-lettered.",
        "allot.ticker")
    keyring_file: str = _doc(
        "A TOML file `[keys]` principal = \"<Ed25519 public key, 64 hex>\": configured signers "
        "(principals registered on the log need no entry). A "
        "signed record must name its signer as the event's `actor`.", "")
    require_signatures: bool = _doc(
        "Dead-letter every unsigned input (`unauthenticated`), so `actor` is always "
        "authenticated, and authorise every input by its signer's roles (docs/events.md, "
        "\"Who may send what\"). On by default; off only with `insecure_dev`.", True)
    insecure_dev: bool = _doc(
        "Development only: accept unsigned inputs and check no roles (`actor` is then a "
        "claim anyone can forge). Said loudly at start, in the log, on `/healthz` and `/state`.",
        False)
    journal_seals: bool = _doc(
        "Sign every journal record this worker writes (Ed25519 under `tick_key`), and on a "
        "fold refuse any record whose seal does not verify, or an unsealed one after sealed "
        "ones (`fold.forged`): forged journal records move neither the state, the fence nor "
        "the inbox position.", True)
    admin_principal: str = _doc(
        "The first admin: its signed inputs hold the `admin` role from the start, so it "
        "registers the other principals (no bootstrap race). Its public key: "
        "`admin_public_key` or the keyring.", "")
    admin_public_key: str = _doc(
        "The first admin's Ed25519 public key, 64 hex (`allot keys create` prints it).", "")
    nudge: bool = _doc(
        "After journaling inputs that can change the schedule, publish an immediate signed "
        "tick (a nudge) instead of waiting up to a tick interval.", True)
    cycle_in_batch: bool = _doc(
        "With `nudge`: run the cycle at the end of the batch itself. The worker journals a "
        "signed tick of its own (id `nudge:<cluster>:<inbox offset>:batch`) right after a "
        "batch's schedule-changing inputs, in the same produce, instead of a nudge through "
        "the inbox a broker round trip later. One cycle per cluster per batch; a cycle that "
        "decided something is followed by another (`cycle_continue`) or an inbox nudge.", True)
    cycle_busy_share: float = _doc(
        "With `cycle_in_batch`: the largest share of the worker's time batch cycles may take. "
        "After batch cycles that took t seconds, the next waits until t / share has "
        "passed since they began (the inputs in between join one cycle); ticks and nudges "
        "from the inbox are not held back. 1: a cycle after every batch (the default: holding "
        "cycles back made the p99 worse: at 0.5, 392 / 1,249 ms unsigned / signed against "
        "285 / 688 ms, docs/benchmarks.md).", 1.0)
    cycle_continue: bool = _doc(
        "With `cycle_in_batch`: after a cycle that decided something (a cycle's work is "
        "bounded, so more may be startable), run the next cycle as a batch cycle too (id "
        "`nudge:<cluster>:<inbox offset>:batch:<n>`), when `cycle_busy_share` lets it, joined "
        "by the inputs that arrive until then; false: publish an inbox nudge, whose cycle runs "
        "when it is read back, beside the batch cycle of the inputs read with it.", True)
    verify_processes: int = _doc(
        "Processes that verify a batch's input signatures ahead of the loop (0: verify in the "
        "loop). Ed25519 verification is about half of a signed input's CPU and holds the GIL; "
        "more processes use more cores. Decisions are the same either way.", 0)
    max_batch: int = _doc(
        "Inbox records handled per journal produce (inputs and their decisions go out "
        "together, acks=all).", 500)
    fetch_wait_ms: int = _doc(
        "The inbox consumer's fetch wait. On Tansu every fetch waits this long, so it bounds "
        "latency from below; keep it short.", 5)
    fold_fetch_wait_ms: int = _doc(
        "The fetch wait of bulk journal reads (restart folds, export). Tansu time-limits a "
        "fetch, so a short wait reads nothing from a long partition.", 200)
    linger_ms: int = _doc("Producer linger: how long a produce waits to fill its batch.", 1)
    gc_freeze: bool = _doc(
        "Keep the long-lived state out of the garbage collector's full scans: `gc.freeze()` "
        "after a partition is taken and after each full collection (`streams/gc_freeze.py`); "
        "at 20,000 pending a full collection otherwise stopped the loop for a median 89-100 ms "
        "(25-27 ms with it, load 9-13). Every 10 minutes the heap is unfrozen and collected "
        "whole once, so reference cycles that died frozen do not pile up with uptime.", True)
    trace_file: str = _doc(
        "Measuring aid: append one JSON line per handled batch to this file (its poll, "
        "records, cycles, seal, produce, acks and GC pauses, `streams/batch_trace.py`); "
        "empty: off.", "")
    snapshot_every_records: int = _doc(
        "Snapshot a partition's engines after this many journal records (0: never by count).",
        20000)
    snapshot_every_s: float = _doc(
        "Snapshot a partition at least this often while it changes (0: never by time).", 300.0)
    snapshot_chunk_bytes: int = _doc(
        "Largest snapshot record; a snapshot is zlib-compressed and cut into chunks of this "
        "size (keep it under the broker's `message.max.bytes`).", 512 * 1024)
    prefetch_snapshots: bool = _doc(
        "At start, restore the newest snapshot of every partition while the consumer group "
        "is still joining; the ones the group then assigns are used, the others dropped.",
        True)
    metrics_host: str = _doc(
        "Address of `/healthz` and `/metrics`. Loopback unless a container publishes it.",
        "127.0.0.1")
    metrics_port: int = _doc("Port of `/healthz` and `/metrics`; 0 picks a free one, -1 off.", -1)
    metrics_non_loopback: bool = _doc(
        "Allow `metrics_host` to be an address that is not loopback (a container that publishes "
        "the port). Off: the host is resolved and every address it names must be loopback.",
        False)
    log_format: str = _doc(
        "`json` (production), `console` (readable) or `auto` (console on a terminal).", "auto")
    log_level: str = _doc("`debug`, `info`, `warning` or `error`.", "info")
    security_protocol: str = _doc(
        "How every allot Kafka client connects: `PLAINTEXT` (the embedded broker), "
        "`SASL_PLAINTEXT` (SASL without TLS: a private network only) or `SASL_SSL` "
        "(production). Read by the worker and, from the environment, by every other client "
        "(the command line, executor, monitor, projections, archiver).", "PLAINTEXT")
    sasl_mechanism: str = _doc(
        "The SASL mechanism with a `SASL_*` protocol: `SCRAM-SHA-512` (docker-compose.yml), "
        "`SCRAM-SHA-256` or `PLAIN`.", "SCRAM-SHA-512")
    sasl_username: str = _doc(
        "The SASL user (the Kafka principal `User:<name>` the broker's ACLs name).", "")
    sasl_password: str = _doc(
        "The SASL password. Prefer `sasl_password_file` (a Docker secret) to the environment.", "")
    sasl_password_file: str = _doc("A file holding `sasl_password` (its first line).", "")
    ssl_cafile: str = _doc(
        "With `SASL_SSL`: the CA bundle that signs the broker's certificate (empty: the "
        "system's trust store).", "")

    @property
    def insecure(self) -> bool:
        """True when inputs need no signature (``insecure_dev``, or ``require_signatures`` off)."""
        return self.insecure_dev or not self.require_signatures

    @property
    def name(self) -> str:
        """The worker name, defaulting to host-pid."""
        return self.worker_name or _default_name()

    def signing_key(self) -> bytes:
        """The tick key as bytes (from the file when one is named)."""
        if self.tick_key_file:
            try:
                text = Path(self.tick_key_file).read_text().splitlines()
            except OSError as exc:
                raise ConfigError(f"tick_key_file: {exc}") from exc
            if not text or not text[0].strip():
                raise ConfigError(f"tick_key_file: {self.tick_key_file} is empty")
            return text[0].strip().encode()
        return self.tick_key.encode()

    def sasl_secret(self) -> str:
        """The SASL password (from the file when one is named)."""
        if self.sasl_password_file:
            try:
                text = Path(self.sasl_password_file).read_text().splitlines()
            except OSError as exc:
                raise ConfigError(f"sasl_password_file: {exc}") from exc
            if not text or not text[0].strip():
                raise ConfigError(f"sasl_password_file: {self.sasl_password_file} is empty")
            return text[0].strip()
        return self.sasl_password

    def replace(self, **changes: Any) -> WorkerSettings:
        """A copy with some settings changed (validated like any other source)."""
        return _build({**dataclasses.asdict(self), **changes}, "replace()")


FIELDS: dict[str, dataclasses.Field[Any]] = {f.name: f for f in dataclasses.fields(WorkerSettings)}
SETTINGS: dict[str, str] = {name: f.metadata["doc"] for name, f in FIELDS.items()}

_LOG_FORMATS = ("auto", "json", "console")
_LOG_LEVELS = ("debug", "info", "warning", "error")


def _coerce(name: str, raw: Any, source: str) -> Any:
    """``raw`` (a string from the environment or a flag, or a TOML value) as ``name``'s type."""
    default = FIELDS[name].default
    try:
        if isinstance(default, bool):
            if isinstance(raw, bool):
                return raw
            text = str(raw).strip().lower()
            if text in ("1", "true", "yes", "on"):
                return True
            if text in ("0", "false", "no", "off", ""):
                return False
            raise ValueError(f"expected true or false, got {raw!r}")
        if isinstance(default, int):
            if isinstance(raw, float) and not raw.is_integer():
                raise ValueError(f"expected an integer, got {raw!r}")
            return int(raw)
        if isinstance(default, float):
            return float(raw)
        if isinstance(default, tuple):
            items = raw.split(",") if isinstance(raw, str) else list(raw)
            return tuple(str(i).strip() for i in items if str(i).strip())
        if not isinstance(raw, str):
            raise ValueError(f"expected a string, got {raw!r}")
        return raw
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{source}: {name}: {exc}") from None


def _check(s: WorkerSettings) -> WorkerSettings:
    def bad(name: str, why: str) -> ConfigError:
        return ConfigError(f"{name}: {why} (got {getattr(s, name)!r})")

    if not s.bootstrap.strip():
        raise bad("bootstrap", "must name at least one HOST:PORT")
    if not s.clusters:
        raise bad("clusters", "must name at least one cluster")
    import re

    from events.limits import CLUSTER_ID_PATTERN

    for c in s.clusters:
        if re.fullmatch(CLUSTER_ID_PATTERN, c) is None:
            raise bad("clusters", f"{c!r} is not a valid cluster id ({CLUSTER_ID_PATTERN})")
    for name in ("partitions", "replication_factor", "max_batch", "snapshot_chunk_bytes",
                 "session_timeout_ms", "heartbeat_interval_ms", "fetch_wait_ms",
                 "fold_fetch_wait_ms"):
        if getattr(s, name) < 1:
            raise bad(name, "must be at least 1")
    for name in ("linger_ms", "snapshot_every_records"):
        if getattr(s, name) < 0:
            raise bad(name, "must not be negative")
    if s.snapshot_every_s < 0:
        raise bad("snapshot_every_s", "must not be negative")
    if s.liveness_interval_s <= 0:
        raise bad("liveness_interval_s", "must be positive")
    if s.liveness_lapse_s < 2 * s.liveness_interval_s:
        raise bad("liveness_lapse_s", "must be at least two liveness intervals "
                  f"(2 x {s.liveness_interval_s:g} s)")
    if s.tick_interval_s <= 0:
        raise bad("tick_interval_s", "must be positive")
    if s.time_scale <= 0:
        raise bad("time_scale", "must be positive")
    if not 0 < s.cycle_busy_share <= 1:
        raise bad("cycle_busy_share", "must be above 0 and at most 1")
    if s.metrics_port < -1 or s.metrics_port > 65535:
        raise bad("metrics_port", "must be -1 (off), 0 (any free port) or a port")
    if s.log_format not in _LOG_FORMATS:
        raise bad("log_format", f"must be one of {', '.join(_LOG_FORMATS)}")
    if s.log_level not in _LOG_LEVELS:
        raise bad("log_level", f"must be one of {', '.join(_LOG_LEVELS)}")
    problem = bind_problem(s.metrics_host, s.metrics_non_loopback)
    if problem is not None:
        raise bad("metrics_host", problem + ("" if s.metrics_non_loopback else
                                             "; set metrics_non_loopback to serve another "
                                             "address"))
    problem = security_problem(s)
    if problem is not None:
        raise ConfigError(problem)
    if not s.ticker_principal:
        raise bad("ticker_principal", "must not be empty")
    if s.admin_public_key:
        from identity.keys import KeyError_, public_from_hex

        try:
            public_from_hex(s.admin_public_key)
        except KeyError_ as exc:
            raise bad("admin_public_key", str(exc)) from None
    return s


SECURITY_PROTOCOLS = ("PLAINTEXT", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN")
# The settings every Kafka client reads (also outside the worker, from the environment).
SECURITY_SETTINGS = ("security_protocol", "sasl_mechanism", "sasl_username", "sasl_password",
                     "sasl_password_file", "ssl_cafile")


def security_problem(s: WorkerSettings) -> str | None:
    """Why the Kafka security settings cannot work together, or None."""
    if s.security_protocol not in SECURITY_PROTOCOLS:
        return (f"security_protocol: must be one of {', '.join(SECURITY_PROTOCOLS)} "
                f"(got {s.security_protocol!r})")
    if not s.security_protocol.startswith("SASL_"):
        return None
    if s.sasl_mechanism not in SASL_MECHANISMS:
        return (f"sasl_mechanism: must be one of {', '.join(SASL_MECHANISMS)} "
                f"(got {s.sasl_mechanism!r})")
    if not s.sasl_username:
        return f"sasl_username: {s.security_protocol} needs a user"
    if not (s.sasl_password or s.sasl_password_file):
        return f"sasl_password: {s.security_protocol} needs sasl_password or sasl_password_file"
    return None


def security_settings(environ: Mapping[str, str] | None = None) -> WorkerSettings:
    """Settings holding only the Kafka security ones, from the environment (``ALLOT_SASL_*``...).

    For the clients that are not the worker (the command line, executor, monitor,
    projections, archiver): they take a bootstrap address, not a settings file,
    so their security comes from the same ``ALLOT_<NAME>`` variables.
    """
    env = read_env(os.environ if environ is None else environ)
    s = WorkerSettings(**{k: v for k, v in env.items() if k in SECURITY_SETTINGS})
    problem = security_problem(s)
    if problem is not None:
        raise ConfigError(problem)
    return s


def kafka_client_options(settings: WorkerSettings | None = None,
                         environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The keyword arguments every aiokafka client allot creates gets, for its security.

    Empty with ``PLAINTEXT`` (the default, and the embedded Tansu broker, which has
    no SASL), so nothing changes there. ``settings`` is the worker's; without it the
    security settings are read from ``environ`` (default ``os.environ``).
    """
    s = settings if settings is not None else security_settings(environ)
    if s.security_protocol == "PLAINTEXT":
        return {}
    out: dict[str, Any] = {
        "security_protocol": s.security_protocol,
        "sasl_mechanism": s.sasl_mechanism,
        "sasl_plain_username": s.sasl_username,
        "sasl_plain_password": s.sasl_secret(),
    }
    if s.security_protocol == "SASL_SSL":
        from aiokafka.helpers import create_ssl_context

        out["ssl_context"] = create_ssl_context(cafile=s.ssl_cafile or None)
    return out


def faust_credentials(settings: WorkerSettings | None = None,
                      environ: Mapping[str, str] | None = None) -> Any:
    """The same security as ``faust.SASLCredentials`` for the Faust projections (None: plaintext)."""
    options = kafka_client_options(settings, environ)
    if not options:
        return None
    import faust

    return faust.SASLCredentials(username=options["sasl_plain_username"],
                                 password=options["sasl_plain_password"],
                                 mechanism=options["sasl_mechanism"],
                                 ssl_context=options.get("ssl_context"))


def _resolved(host: str) -> list[Any] | str:
    """Every IP address ``host`` resolves to (``socket.getaddrinfo``), else why it does not."""
    import ipaddress

    if not host or not host.strip():
        return "an empty host binds every interface"
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        return f"{host!r} does not resolve ({exc})"
    if not infos:
        return f"{host!r} resolves to no address"
    out = []
    for info in infos:
        addr = str(info[4][0]).split("%")[0]
        try:
            out.append(ipaddress.ip_address(addr))
        except ValueError:
            return f"{host!r} resolves to {addr!r}, not an IP address"
    return out


def loopback_problem(host: str) -> str | None:
    """None when every address ``host`` resolves to is loopback, else why not.

    A string check is not enough: ``0`` binds every interface, a name may
    resolve anywhere. So the host is resolved and each address must be a
    loopback one (127.0.0.0/8, ::1).
    """
    ips = _resolved(host)
    if isinstance(ips, str):
        return ips
    for ip in ips:
        if not ip.is_loopback:
            return f"{host!r} resolves to {ip}, which is not a loopback address"
    return None


def every_interface_problem(host: str) -> str | None:
    """None unless ``host`` is empty or resolves to 0.0.0.0 or :: (in any spelling), else why.

    A name that does not resolve here is let through: a container's host name
    resolves only on its own network, and binding it fails loudly there if wrong.
    """
    if not host or not host.strip():
        return "an empty host binds every interface"
    ips = _resolved(host)
    if isinstance(ips, str):
        return None
    for ip in ips:
        if ip.is_unspecified:
            return f"{host!r} resolves to {ip}, which binds every interface"
    return None


def bind_problem(host: str, non_loopback: bool) -> str | None:
    """Why a server may not bind ``host``: loopback only unless ``non_loopback``, never every interface."""
    if non_loopback:
        return every_interface_problem(host)
    return loopback_problem(host)


def _build(values: Mapping[str, Any], source: str) -> WorkerSettings:
    typed = {k: _coerce(k, v, source) for k, v in values.items()}
    return _check(WorkerSettings(**typed))


def read_file(path: str | Path) -> dict[str, Any]:
    """The settings in a TOML file (top-level keys, or a ``[worker]`` table)."""
    try:
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
    except OSError as exc:
        raise ConfigError(f"{path}: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not TOML: {exc}") from None
    table = data.get("worker", data)
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: [worker] must be a table")
    unknown = sorted(k for k in table if k not in FIELDS and k != "worker")
    if unknown:
        raise ConfigError(f"{path}: unknown setting(s) {', '.join(unknown)}")
    return {k: _coerce(k, v, str(path)) for k, v in table.items() if k in FIELDS}


def read_env(environ: Mapping[str, str]) -> dict[str, Any]:
    """The settings named in the environment (``ALLOT_<NAME>``, and ``KAFKA_BOOTSTRAP_SERVERS``)."""
    out: dict[str, Any] = {}
    if environ.get(BOOTSTRAP_ENV):
        out["bootstrap"] = _coerce("bootstrap", environ[BOOTSTRAP_ENV], BOOTSTRAP_ENV)
    for name in FIELDS:
        var = ENV_PREFIX + name.upper()
        if var in environ:
            out[name] = _coerce(name, environ[var], var)
    return out


def load(config_file: str | Path | None = None, environ: Mapping[str, str] | None = None,
         flags: Mapping[str, Any] | None = None) -> WorkerSettings:
    """Settings from the defaults, then ``config_file``, then ``environ``, then ``flags``.

    ``flags`` maps setting names to values; ``None`` values (a flag not given) are
    skipped. ``environ`` defaults to ``os.environ``.
    """
    values: dict[str, Any] = {}
    if config_file:
        values.update(read_file(config_file))
    values.update(read_env(os.environ if environ is None else environ))
    for name, value in (flags or {}).items():
        if name not in FIELDS:
            raise ConfigError(f"unknown setting {name!r}")
        if value is not None:
            values[name] = _coerce(name, value, f"--{name.replace('_', '-')}")
    return _build(values, "settings")
