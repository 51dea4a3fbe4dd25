"""docker-compose.yml's broker security, checked without a Docker engine.

The journal trusts whoever can write it, so the compose file runs Kafka with
SASL/SCRAM and ACLs. Nothing here starts Kafka; instead the file is parsed and
checked against Kafka's own documentation and against allot's code:

- every ``KAFKA_*`` variable of the broker, converted to a property name the way
  the apache/kafka image converts it (a port of ``ConvertKey`` in the image's
  ``docker/resources/utility/utility.go``, itself checked against the rules in
  https://github.com/apache/kafka/blob/trunk/docker/examples/README.md), is a
  documented broker setting (``BROKER_CONFIGS``, with its sources);
- the listener map covers every listener; the plaintext listeners (principal
  ``User:ANONYMOUS``, a super user) bind the container's loopback only;
- every ``kafka-acls.sh`` and ``kafka-configs.sh`` line of kafka-init parses
  (``shlex``) with the tools' documented flags and operations (``ACL_FLAGS``);
- from the ACLs, evaluated the way Kafka's authorizer does (literal, prefixed and
  ``*`` patterns, ``All``, super users), and allot's topic list
  (``streams.topics.names``, not a copy): the worker may read and write every
  topic and its group; the inbox is the only allot topic anyone else may write;
  no one but the worker may write the journal, the dead letters or the snapshots.

Each check returns its problems; ``test_the_checks_catch_*`` feed them broken
copies of the file so a check that cannot fail would show.
"""

from __future__ import annotations

import copy
import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from streams import config, topics
from streams.projections import app_id
from streams.records import DEADLETTER, INBOX, JOURNAL, SNAPSHOTS

COMPOSE = Path(__file__).resolve().parent.parent / "docker-compose.yml"

# Broker settings the compose file may use, each documented for Kafka 3.9:
# - https://kafka.apache.org/39/documentation.html#brokerconfigs (the broker table);
# - https://kafka.apache.org/39/security/authorization-and-acls ("authorizer.class.name=
#   org.apache.kafka.metadata.authorizer.StandardAuthorizer" for KRaft, super.users,
#   allow.everyone.if.no.acl.found: StandardAuthorizer's own settings, KIP-801);
# - https://kafka.apache.org/39/security/authentication-using-sasl (sasl.enabled.mechanisms,
#   and listener.name.<listener>.<mechanism>.sasl.jaas.config, lower-case: see
#   listener_prefixed below).
BROKER_CONFIGS = frozenset({
    "node.id", "process.roles", "controller.quorum.voters", "controller.quorum.bootstrap.servers",
    "controller.listener.names", "listeners", "advertised.listeners",
    "listener.security.protocol.map", "inter.broker.listener.name",
    "security.inter.broker.protocol", "sasl.enabled.mechanisms",
    "sasl.mechanism.inter.broker.protocol", "sasl.mechanism.controller.protocol",
    "sasl.jaas.config", "authorizer.class.name", "super.users", "allow.everyone.if.no.acl.found",
    "offsets.topic.replication.factor", "transaction.state.log.replication.factor",
    "transaction.state.log.min.isr", "auto.create.topics.enable", "log.dirs", "log.dir",
    "group.initial.rebalance.delay.ms", "message.max.bytes", "num.partitions",
    "default.replication.factor", "min.insync.replicas", "ssl.keystore.location",
    "ssl.keystore.password", "ssl.key.password", "ssl.truststore.location",
    "ssl.truststore.password", "ssl.client.auth",
})
# Variables the image passes to the JVM or its scripts rather than server.properties
# ("excludes" of docker/resources/common-scripts/kafka-propertiesSpec.json).
IMAGE_EXCLUDES = frozenset({
    "KAFKA_VERSION", "KAFKA_HEAP_OPT", "KAFKA_LOG4J_OPTS", "KAFKA_OPTS", "KAFKA_JMX_OPTS",
    "KAFKA_JVM_PERFORMANCE_OPTS", "KAFKA_GC_LOG_OPTS", "KAFKA_LOG4J_ROOT_LOGLEVEL",
    "KAFKA_LOG4J_LOGGERS", "KAFKA_TOOLS_LOG4J_LOGLEVEL",
})
SECURITY_PROTOCOLS = frozenset({"PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"})
SASL_MECHANISMS = frozenset({"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "GSSAPI", "OAUTHBEARER"})
STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"

# kafka-acls.sh (Kafka 3.x, AclCommandOptions in core/src/main/scala/kafka/admin/AclCommand.scala;
# the option table of https://kafka.apache.org/39/security/authorization-and-acls):
# flag -> whether it takes a value.
ACL_FLAGS = {
    "--bootstrap-server": True, "--bootstrap-controller": True, "--command-config": True,
    "--add": False, "--remove": False, "--list": False, "--force": False, "--help": False,
    "--topic": True, "--cluster": False, "--group": True, "--transactional-id": True,
    "--delegation-token": True, "--user-principal": True, "--resource-pattern-type": True,
    "--operation": True, "--allow-principal": True, "--deny-principal": True,
    "--principal": True, "--allow-host": True, "--deny-host": True, "--producer": False,
    "--consumer": False, "--idempotent": False,
}
PATTERN_TYPES = frozenset({"literal", "prefixed"})  # 'any' and 'match' are filters, not for --add
# Operations valid per resource type (AclEntry.supportedOperations, plus All).
OPERATIONS = {
    "topic": frozenset({"Read", "Write", "Create", "Describe", "Delete", "DescribeConfigs",
                        "AlterConfigs", "All"}),
    "group": frozenset({"Read", "Describe", "Delete", "All"}),
    "cluster": frozenset({"Create", "ClusterAction", "DescribeConfigs", "AlterConfigs",
                          "IdempotentWrite", "Alter", "Describe", "All"}),
    "transactional-id": frozenset({"Describe", "Write", "All"}),
}
# kafka-configs.sh --add-config for SCRAM (security docs, "Creating SCRAM Credentials"):
# 'SCRAM-SHA-512=[iterations=8192,password=...]'; Kafka's minimum iteration count is 4096.
SCRAM_CONFIG = re.compile(r"^(SCRAM-SHA-(?:256|512))=\[(?:iterations=(\d+),)?password=(\S+)\]$")
# Operations that change a topic's records or its settings.
WRITES = frozenset({"Write", "Delete", "AlterConfigs", "All"})
# Topics only the worker writes (the issue: journal, dead letters, snapshots).
WORKER_ONLY = (JOURNAL, DEADLETTER, SNAPSHOTS)
WORKER = "User:worker"


def convert_key(key: str) -> str:
    """An environment variable name (``KAFKA_`` removed) as the apache/kafka image's property name.

    Ported from ``ConvertKey`` in docker/resources/utility/utility.go: a single ``_``
    becomes ``.``, ``___`` becomes ``-``, ``__`` becomes ``_``, then lower case. The
    single underscores are found by the regexp ``[^_]_[^_]``, replaced left to right
    without overlaps, exactly as Go's ``ReplaceAllStringFunc`` does.
    """
    single = re.sub(r"[^_]_[^_]", lambda m: m.group(0).replace("_", "."), key)
    return single.replace("___", "-").replace("__", "_").lower()


@dataclass(frozen=True)
class Acl:
    principal: str
    operation: str
    resource: str        # topic, group, cluster, transactional-id
    name: str
    pattern: str         # literal or prefixed

    def matches(self, resource: str, name: str) -> bool:
        if resource != self.resource:
            return False
        if self.pattern == "prefixed":
            return name.startswith(self.name)
        return self.name in ("*", name)


@dataclass
class Setup:
    """What kafka-init does, read from its script."""

    acl_commands: list[list[str]]
    config_commands: list[list[str]]
    users: list[str]
    acls: list[Acl]


def _load(text: str | None = None) -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text() if text is None else text)


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return _load()


def broker_properties(compose: dict[str, Any]) -> dict[str, str]:
    env = compose["services"]["kafka"]["environment"]
    return {convert_key(k[len("KAFKA_"):]): str(v) for k, v in env.items()
            if k.startswith("KAFKA_") and k not in IMAGE_EXCLUDES}


def _listeners(value: str) -> dict[str, tuple[str, int]]:
    out = {}
    for item in filter(None, (i.strip() for i in value.split(","))):
        m = re.fullmatch(r"([A-Za-z0-9_]+)://([^:]*):(\d+)", item)
        assert m, f"not NAME://HOST:PORT: {item!r}"
        out[m.group(1)] = (m.group(2), int(m.group(3)))
    return out


def _script_lines(compose: dict[str, Any]) -> Iterator[str]:
    """kafka-init's script, one logical line at a time (backslash continuations joined)."""
    script = "\n".join(compose["services"]["kafka-init"]["command"])
    yield from (line.strip() for line in script.replace("\\\n", " ").splitlines())


def parse_setup(compose: dict[str, Any]) -> Setup:
    """The users and ACLs kafka-init creates (its ``user`` and ``acl`` shell functions expanded)."""
    lines = list(_script_lines(compose))
    # acl() runs kafka-acls.sh with --bootstrap-server, --add and --force before its arguments.
    acl_fn = next(li for li in lines if "kafka-acls.sh" in li and '"$$@"' in li)
    acl_prefix = shlex.split(acl_fn.split("kafka-acls.sh", 1)[1].split('"$$@"')[0])
    acl_commands = [acl_prefix + shlex.split(li)[1:] for li in lines if li.startswith("acl ")]
    acl_commands += [shlex.split(li.split("kafka-acls.sh", 1)[1]) for li in lines
                     if "kafka-acls.sh" in li and '"$$@"' not in li]
    config_commands = [shlex.split(li.split("kafka-configs.sh", 1)[1]) for li in lines
                       if "kafka-configs.sh" in li]
    users: list[str] = []
    for li in lines:
        m = re.fullmatch(r"for u in ([\w ]+); do user \"\$\$u\"; done", li)
        if m:
            users += m.group(1).split()
        elif li.startswith("user "):
            users += shlex.split(li)[1:]
    acls = [a for cmd in acl_commands for a in acls_of(cmd)]
    return Setup(acl_commands=acl_commands, config_commands=config_commands, users=users,
                 acls=acls)


def parse_flags(args: list[str]) -> dict[str, list[str | None]]:
    """kafka-acls.sh arguments as flag -> values; AssertionError naming an unknown flag."""
    out: dict[str, list[str | None]] = {}
    i = 0
    while i < len(args):
        flag = args[i]
        assert flag in ACL_FLAGS, f"kafka-acls.sh has no flag {flag!r} ({' '.join(args)})"
        if ACL_FLAGS[flag]:
            assert i + 1 < len(args) and not args[i + 1].startswith("--"), f"{flag} needs a value"
            out.setdefault(flag, []).append(args[i + 1])
            i += 2
        else:
            out.setdefault(flag, []).append(None)
            i += 1
    return out


def acls_of(args: list[str]) -> list[Acl]:
    """The ACLs one ``kafka-acls.sh --add`` adds (none for --list)."""
    f = parse_flags(args)
    if "--add" not in f:
        return []
    pattern = str((f.get("--resource-pattern-type") or ["literal"])[0]).lower()
    resources = [("topic", str(t)) for t in f.get("--topic", [])]
    resources += [("group", str(g)) for g in f.get("--group", [])]
    resources += [("transactional-id", str(t)) for t in f.get("--transactional-id", [])]
    if "--cluster" in f:
        resources.append(("cluster", "kafka-cluster"))
    return [Acl(str(p), str(op), r, n, pattern) for p in f.get("--allow-principal", [])
            for op in f.get("--operation", ["All"]) for r, n in resources]


def super_users(props: dict[str, str]) -> set[str]:
    return {u.strip() for u in props.get("super.users", "").split(";") if u.strip()}


def allowed(setup: Setup, supers: set[str], principal: str, operation: str, resource: str,
            name: str) -> bool:
    """Whether the authorizer lets ``principal`` do ``operation`` (no deny ACLs are used here)."""
    if principal in supers:
        return True
    implied = {operation, "All"}
    if operation == "Describe":  # Read, Write and Delete imply Describe
        implied |= {"Read", "Write", "Delete"}
    return any(a.operation in implied and a.matches(resource, name) for a in setup.acls
               if a.principal in (principal, "User:*"))


def allot_topics() -> dict[str, str]:
    """Contract name -> topic name, from the code (the compose file uses no topic prefix):
    the contract topics, and the workers' heartbeats (the fast takeover)."""
    from streams.worker import LIVENESS

    return {**topics.names(""), LIVENESS: topics.topic(LIVENESS, "")}


# ---------------------------------------------------------------- the checks


def setting_problems(compose: dict[str, Any]) -> list[str]:
    props = broker_properties(compose)
    listeners = _listeners(props.get("listeners", ""))
    mechanisms = {m.strip() for m in props.get("sasl.enabled.mechanisms", "").split(",")}

    def listener_prefixed(name: str) -> bool:
        # listener.name.<listener>.<mechanism>.sasl.jaas.config, both lower case.
        m = re.fullmatch(r"listener\.name\.([a-z0-9_]+)\.([a-z0-9-]+)\.sasl\.jaas\.config", name)
        return bool(m) and m.group(1).upper() in listeners and m.group(2).upper() in mechanisms

    out = [f"{name}: not a documented broker setting" for name in props
           if name not in BROKER_CONFIGS and not listener_prefixed(name)]
    # The image reads its environment as KEY=VALUE split on "=" and keeps only the
    # entries with exactly two parts (ListToMap in utility.go): a value holding "=" is
    # dropped without a word, so none may.
    env = compose["services"]["kafka"]["environment"]
    out += [f"{k}: its value holds '=', which the image drops" for k, v in env.items()
            if k.startswith("KAFKA_") and "=" in str(v)]
    return out


def listener_problems(compose: dict[str, Any]) -> list[str]:
    props = broker_properties(compose)
    out: list[str] = []
    pmap = dict(i.split(":", 1) for i in props["listener.security.protocol.map"].split(","))
    listeners = _listeners(props["listeners"])
    advertised = _listeners(props.get("advertised.listeners", ""))
    controllers = props["controller.listener.names"].split(",")
    for name in [*listeners, *advertised, props["inter.broker.listener.name"], *controllers]:
        if name not in pmap:
            out.append(f"{name}: not in listener.security.protocol.map")
    for name, proto in pmap.items():
        if proto not in SECURITY_PROTOCOLS:
            out.append(f"{name}: unknown security protocol {proto}")
        if name not in listeners:
            out.append(f"{name}: mapped but not a listener")
    for name in advertised:
        if name not in listeners:
            out.append(f"{name}: advertised but not a listener")
    for name in controllers:
        if name in advertised:
            out.append(f"{name}: a controller listener must not be advertised")
    mechanisms = [m.strip() for m in props.get("sasl.enabled.mechanisms", "").split(",") if m]
    for m in mechanisms:
        if m not in SASL_MECHANISMS:
            out.append(f"sasl.enabled.mechanisms: unknown {m}")
    for name, proto in pmap.items():
        if proto.startswith("SASL_"):
            if not mechanisms:
                out.append(f"{name}: SASL without sasl.enabled.mechanisms")
            for m in mechanisms:
                key = f"listener.name.{name.lower()}.{m.lower()}.sasl.jaas.config"
                if key not in props and "sasl.jaas.config" not in props:
                    out.append(f"{name}: no JAAS config for {m} ({key})")
        elif proto == "PLAINTEXT":
            # Its principal is User:ANONYMOUS: reachable only from inside the container.
            for where in (listeners, advertised):
                if name in where and where[name][0] not in ("localhost", "127.0.0.1"):
                    out.append(f"{name}: plaintext listener on {where[name][0]}, not loopback")
    if "PLAINTEXT" not in [pmap[n] for n in listeners if n in pmap] and \
            "User:ANONYMOUS" in super_users(props):
        out.append("User:ANONYMOUS is a super user but no listener needs it")
    # The published port must reach a SASL listener.
    for port in compose["services"]["kafka"].get("ports", []):
        inside = int(str(port).rsplit(":", 1)[1])
        names = [n for n, (_, p) in listeners.items() if p == inside]
        if not names or not all(pmap.get(n, "").startswith("SASL_") for n in names):
            out.append(f"published port {port} does not reach a SASL listener")
    return out


def authorizer_problems(compose: dict[str, Any]) -> list[str]:
    props = broker_properties(compose)
    out = []
    if props.get("authorizer.class.name") != STANDARD_AUTHORIZER:
        out.append(f"authorizer.class.name is not {STANDARD_AUTHORIZER}")
    if props.get("allow.everyone.if.no.acl.found", "false").lower() != "false":
        out.append("allow.everyone.if.no.acl.found must be false")
    supers = super_users(props)
    if not supers <= {"User:admin", "User:ANONYMOUS"}:
        out.append(f"unexpected super users {sorted(supers - {'User:admin', 'User:ANONYMOUS'})}")
    return out


def command_problems(compose: dict[str, Any]) -> list[str]:
    out: list[str] = []
    setup = parse_setup(compose)
    props = broker_properties(compose)
    mechanisms = set(props.get("sasl.enabled.mechanisms", "").split(","))
    if not setup.acl_commands:
        out.append("kafka-init adds no ACL")
    for cmd in setup.acl_commands:
        try:
            f = parse_flags(cmd)
        except AssertionError as exc:
            out.append(str(exc))
            continue
        actions = [a for a in ("--add", "--remove", "--list") if a in f]
        if len(actions) != 1:
            out.append(f"exactly one of --add/--remove/--list: {' '.join(cmd)}")
        if "--bootstrap-server" not in f and "--bootstrap-controller" not in f:
            out.append(f"no --bootstrap-server: {' '.join(cmd)}")
        if "--add" not in f:
            continue
        for p in f.get("--allow-principal", []):
            if not re.fullmatch(r"User:[A-Za-z0-9_.-]+", str(p)):
                out.append(f"principal {p!r} is not User:<name> (no wildcard)")
        for pt in f.get("--resource-pattern-type", []):
            if str(pt).lower() not in PATTERN_TYPES:
                out.append(f"--resource-pattern-type {pt} cannot be added")
        acls = acls_of(cmd)
        if not acls:
            out.append(f"adds no ACL (no principal or resource): {' '.join(cmd)}")
        for a in acls:
            if a.operation not in OPERATIONS[a.resource]:
                out.append(f"{a.resource} has no operation {a.operation}: {' '.join(cmd)}")
    for cmd in setup.config_commands:
        text = " ".join(cmd)
        for needed in ("--bootstrap-server", "--alter", "--entity-type", "--entity-name",
                       "--add-config"):
            if needed not in cmd:
                out.append(f"kafka-configs.sh without {needed}: {text}")
        if "--entity-type" in cmd and cmd[cmd.index("--entity-type") + 1] != "users":
            out.append(f"SCRAM credentials belong to --entity-type users: {text}")
        if "--add-config" in cmd:
            m = SCRAM_CONFIG.fullmatch(cmd[cmd.index("--add-config") + 1])
            if not m:
                out.append(f"not a SCRAM credential: {text}")
            else:
                if m.group(1) not in mechanisms:
                    out.append(f"{m.group(1)} is not enabled on the broker")
                if m.group(2) and int(m.group(2)) < 4096:
                    out.append(f"SCRAM iterations {m.group(2)} below Kafka's minimum 4096")
                if "$$" not in m.group(3):
                    out.append("a SCRAM password is written in the file, not read from a secret")
    if not setup.config_commands:
        out.append("kafka-init creates no SCRAM user")
    return out


def worker_problems(compose: dict[str, Any]) -> list[str]:
    setup = parse_setup(compose)
    supers = super_users(broker_properties(compose))
    out = []
    for contract, name in allot_topics().items():
        for op in ("Read", "Write", "Describe"):
            if not allowed(setup, supers, WORKER, op, "topic", name):
                out.append(f"the worker may not {op} {name} ({contract})")
    group = config.WorkerSettings().group
    if not allowed(setup, supers, WORKER, "Read", "group", group):
        out.append(f"the worker may not Read its group {group}")
    return out


def principals(setup: Setup) -> set[str]:
    return {a.principal for a in setup.acls} | {f"User:{u}" for u in setup.users}


def write_problems(compose: dict[str, Any]) -> list[str]:
    setup = parse_setup(compose)
    supers = super_users(broker_properties(compose))
    names = allot_topics()
    out = []
    for p in sorted(principals(setup) - supers - {WORKER}):
        for contract, name in names.items():
            for op in sorted(WRITES):
                if allowed(setup, supers, p, op, "topic", name) and (contract, op) != (INBOX, "Write"):
                    out.append(f"{p} may {op} {name}")
    for contract in WORKER_ONLY:
        writers = {p for p in principals(setup) | {"User:*"}
                   if allowed(setup, set(), p, "Write", "topic", names[contract])}
        if writers != {WORKER}:
            out.append(f"{names[contract]} is written by {sorted(writers)}, not the worker alone")
    return out


def client_problems(compose: dict[str, Any]) -> list[str]:
    """The roles can do their work: producers write inputs and read what they caused."""
    setup = parse_setup(compose)
    supers = super_users(broker_properties(compose))
    names = allot_topics()
    out = []
    for role in ("producer", "executor", "monitor"):
        p = f"User:{role}"
        if not allowed(setup, supers, p, "Write", "topic", names[INBOX]):
            out.append(f"{p} may not write the inbox")
        for contract in (JOURNAL, DEADLETTER):  # Client.request reads both
            if not allowed(setup, supers, p, "Read", "topic", names[contract]):
                out.append(f"{p} may not read {names[contract]}")
    for role in ("projections", "archiver", "auditor"):
        if not allowed(setup, supers, f"User:{role}", "Read", "topic", names[JOURNAL]):
            out.append(f"User:{role} may not read the journal")
    faust = app_id("")
    for internal in (f"{faust}-usage-changelog", f"{faust}-__assignor-__leader"):
        for op in ("Create", "Read", "Write"):
            if not allowed(setup, supers, "User:projections", op, "topic", internal):
                out.append(f"User:projections may not {op} its topic {internal}")
    if not allowed(setup, supers, "User:projections", "Read", "group", faust):
        out.append(f"User:projections may not Read its group {faust}")
    return out


def credential_problems(compose: dict[str, Any]) -> list[str]:
    """Every principal is a SCRAM user with a secret; every allot service logs in as one."""
    setup = parse_setup(compose)
    out = []
    declared = set(compose.get("secrets", {}))
    init_secrets = set(compose["services"]["kafka-init"].get("secrets", []))
    for p in sorted({a.principal for a in setup.acls}):
        if p.removeprefix("User:") not in setup.users:
            out.append(f"{p} has ACLs but no SCRAM user")
    for u in setup.users:
        secret = f"kafka_{u}_password"
        if secret not in declared or secret not in init_secrets:
            out.append(f"{u}: secret {secret} not declared and given to kafka-init")
    props = broker_properties(compose)
    mechanisms = set(props.get("sasl.enabled.mechanisms", "").split(","))
    for name, svc in compose["services"].items():
        if svc.get("image", "").startswith("apache/kafka"):
            continue
        env = {k: str(v) for k, v in svc.get("environment", {}).items()}
        s = config.load(environ=env)
        if s.security_protocol == "PLAINTEXT":
            out.append(f"{name}: connects without SASL")
            continue
        if s.sasl_mechanism not in mechanisms:
            out.append(f"{name}: {s.sasl_mechanism} is not enabled on the broker")
        if s.sasl_username not in setup.users:
            out.append(f"{name}: {s.sasl_username} is not a SCRAM user kafka-init creates")
        secret = f"kafka_{s.sasl_username}_password"
        if s.sasl_password or s.sasl_password_file != f"/run/secrets/{secret}" \
                or secret not in svc.get("secrets", []):
            out.append(f"{name}: its password must be the secret {secret}")
    return out


CHECKS = (setting_problems, listener_problems, authorizer_problems, command_problems,
          worker_problems, write_problems, client_problems, credential_problems)


@pytest.mark.parametrize("check", CHECKS, ids=[c.__name__ for c in CHECKS])
def test_the_compose_file_passes(compose: dict[str, Any], check: Any) -> None:
    assert check(compose) == []


def test_convert_key_follows_the_images_documented_rules() -> None:
    # docker/examples/README.md: abc.def -> KAFKA_ABC_DEF, abc-def -> KAFKA_ABC___DEF,
    # abc_def -> KAFKA_ABC__DEF.
    assert convert_key("ABC_DEF") == "abc.def"
    assert convert_key("ABC___DEF") == "abc-def"
    assert convert_key("ABC__DEF") == "abc_def"
    assert convert_key("LISTENER_NAME_CLIENT_SCRAM___SHA___512_SASL_JAAS_CONFIG") == \
        "listener.name.client.scram-sha-512.sasl.jaas.config"


def test_every_allot_topic_is_in_the_compose_file(compose: dict[str, Any]) -> None:
    # The ACL checks are only as good as the topic list: it is the code's, and complete.
    from streams.worker import LIVENESS

    assert set(allot_topics()) == {INBOX, JOURNAL, DEADLETTER, SNAPSHOTS, LIVENESS}
    script = "\n".join(compose["services"]["kafka-init"]["command"])
    for name in allot_topics().values():
        assert f"create {name} " in script


# ------------------------------------------- the checks fail on broken files


def _with_script_line(compose: dict[str, Any], line: str) -> dict[str, Any]:
    broken = copy.deepcopy(compose)
    cmd = broken["services"]["kafka-init"]["command"]
    cmd[0] = cmd[0] + line + "\n"
    return broken


def test_the_checks_catch_a_producer_writing_the_journal(compose: dict[str, Any]) -> None:
    broken = _with_script_line(
        compose, "acl --allow-principal User:producer --operation Write --topic allot.journal")
    assert "User:producer may Write allot.journal" in write_problems(broken)


def test_the_checks_catch_a_prefixed_or_wildcard_grant(compose: dict[str, Any]) -> None:
    broken = _with_script_line(compose, "acl --allow-principal User:monitor --operation All "
                                        "--topic allot. --resource-pattern-type prefixed")
    problems = write_problems(broken)
    assert "User:monitor may Write allot.snapshots" in problems
    assert any("allot.deadletter is written by" in p for p in problems)
    wild = _with_script_line(compose, "acl --allow-principal 'User:*' --operation Write --topic '*'")
    assert any("User:*" in p for p in write_problems(wild))
    assert any("no wildcard" in p for p in command_problems(wild))


def test_the_checks_catch_a_worker_missing_a_topic(compose: dict[str, Any]) -> None:
    broken = copy.deepcopy(compose)
    cmd = broken["services"]["kafka-init"]["command"]
    cmd[0] = "\n".join(li for li in cmd[0].splitlines()
                       if not ("User:worker" in li and "allot.snapshots" in li))
    assert "the worker may not Write allot.snapshots (allot.snapshots)" in worker_problems(broken)


def test_the_checks_catch_bad_commands(compose: dict[str, Any]) -> None:
    broken = _with_script_line(compose, "acl --allow-principal User:worker --operation Write "
                                        "--group allot.worker")
    assert any("group has no operation Write" in p for p in command_problems(broken))
    typo = _with_script_line(compose, "acl --allow-principal User:worker --operations Read "
                                      "--topic allot.inbox")
    with pytest.raises(AssertionError, match="no flag '--operations'"):
        parse_setup(typo)


def test_the_checks_catch_broken_broker_settings(compose: dict[str, Any]) -> None:
    broken = copy.deepcopy(compose)
    env = broken["services"]["kafka"]["environment"]
    env["KAFKA_SASL_ENABLED_MECHANISM"] = env.pop("KAFKA_SASL_ENABLED_MECHANISMS")
    assert "sasl.enabled.mechanism: not a documented broker setting" in setting_problems(broken)
    env["KAFKA_LISTENER_NAME_CLIENT_SCRAM___SHA___512_SASL_JAAS_CONFIG"] = (
        'org.apache.kafka.common.security.scram.ScramLoginModule required username="a";')
    assert ("KAFKA_LISTENER_NAME_CLIENT_SCRAM___SHA___512_SASL_JAAS_CONFIG: its value holds '=', "
            "which the image drops") in setting_problems(broken)
    env["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"] = "CLIENT:SASL_PLAINTEXT,BROKER:PLAINTEXT,CONTROLLER:PLAINTEXT"
    assert "EXTERNAL: not in listener.security.protocol.map" in listener_problems(broken)
    exposed = copy.deepcopy(compose)
    kenv = exposed["services"]["kafka"]["environment"]
    kenv["KAFKA_LISTENERS"] = kenv["KAFKA_LISTENERS"].replace("BROKER://localhost", "BROKER://kafka")
    assert "BROKER: plaintext listener on kafka, not loopback" in listener_problems(exposed)
    kenv["KAFKA_ALLOW_EVERYONE_IF_NO_ACL_FOUND"] = "true"
    assert "allow.everyone.if.no.acl.found must be false" in authorizer_problems(exposed)


def test_the_checks_catch_a_service_without_credentials(compose: dict[str, Any]) -> None:
    broken = copy.deepcopy(compose)
    env = broken["services"]["allot"]["environment"]
    env["ALLOT_SASL_USERNAME"] = "worker"
    problems = credential_problems(broken)
    assert "allot: its password must be the secret kafka_worker_password" in problems
    del env["ALLOT_SECURITY_PROTOCOL"]
    assert "allot: connects without SASL" in credential_problems(broken)


# ------------------------------- kafka-init's script, run with stand-in tools

SEP = "\x1f"


def _run_init(compose: dict[str, Any], tmp: Path, passwords: dict[str, str]) -> tuple[
        Any, list[list[str]]]:
    """Run kafka-init's script under bash with stand-ins for the Kafka tools; their argv lists."""
    import subprocess

    bindir, secrets, log = tmp / "bin", tmp / "secrets", tmp / "calls"
    bindir.mkdir()
    secrets.mkdir()
    for tool in ("kafka-topics.sh", "kafka-configs.sh", "kafka-acls.sh"):
        stub = bindir / tool
        stub.write_text(f'#!/bin/bash\nprintf "%s{SEP}" "{tool}" "$@" >> "{log}"\necho >> "{log}"\n')
        stub.chmod(0o755)
    for user, pw in passwords.items():
        (secrets / f"kafka_{user}_password").write_text(pw + "\n")
    # Compose turns $$ into $ (a single $ would be interpolated from the host's environment).
    script = "\n".join(compose["services"]["kafka-init"]["command"]).replace("$$", "$")
    script = script.replace("/opt/kafka/bin/", f"{bindir}/").replace("/run/secrets/", f"{secrets}/")
    proc = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=30)
    calls = [line.split(SEP)[:-1] for line in log.read_text().splitlines()] if log.exists() else []
    return proc, calls


def test_the_script_leaves_nothing_for_compose_to_interpolate(compose: dict[str, Any]) -> None:
    script = "\n".join(compose["services"]["kafka-init"]["command"])
    assert re.findall(r"(?<!\$)\$(?!\$)", script.replace("$$", "")) == []


def test_kafka_init_runs_the_commands_the_checks_read(compose: dict[str, Any],
                                                      tmp_path: Path) -> None:
    setup = parse_setup(compose)
    passwords = {u: f"pw-{u}_0123456789abcdef" for u in setup.users}
    proc, calls = _run_init(compose, tmp_path, passwords)
    assert proc.returncode == 0, proc.stderr
    acl_calls = [c[1:] for c in calls if c[0] == "kafka-acls.sh"]
    # The ACLs bash really passes are the ones the checks above evaluated.
    assert {a for c in acl_calls for a in acls_of(c)} == set(setup.acls)
    assert all(c[:4] == ["--bootstrap-server", "localhost:19093", "--add", "--force"]
               for c in acl_calls if "--list" not in c)
    scram = [c[1:] for c in calls if c[0] == "kafka-configs.sh"]
    assert [c[c.index("--entity-name") + 1] for c in scram] == setup.users
    for c in scram:
        m = SCRAM_CONFIG.fullmatch(c[c.index("--add-config") + 1])
        assert m and m.group(3) == passwords[c[c.index("--entity-name") + 1]]
    created = [c[c.index("--topic") + 1] for c in calls if c[0] == "kafka-topics.sh" and "--create" in c]
    assert sorted(created) == sorted(allot_topics().values())


@pytest.mark.parametrize("bad", ["", "has]bracket", "has,comma", "has=equals", "with space"])
def test_kafka_init_refuses_a_password_scram_syntax_would_misread(
        compose: dict[str, Any], tmp_path: Path, bad: str) -> None:
    setup = parse_setup(compose)
    passwords = {u: "fine" for u in setup.users} | {"producer": bad}
    proc, calls = _run_init(compose, tmp_path, passwords)
    assert proc.returncode != 0
    assert "kafka_producer_password: empty or not [A-Za-z0-9_-]" in proc.stderr
    assert not any(c[0] == "kafka-configs.sh" and "producer" in c for c in calls)
    assert not any(c[0] == "kafka-acls.sh" for c in calls)  # stopped before any ACL
