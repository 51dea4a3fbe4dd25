"""The Kafka client security settings and the one helper every aiokafka client takes them from.

Default: plaintext, no options at all (the embedded Tansu broker has no SASL), so
nothing changes for the live tests. With ``SASL_*`` the helper hands aiokafka its
documented arguments (``security_protocol``, ``sasl_mechanism``,
``sasl_plain_username``, ``sasl_plain_password``, and an ``ssl_context`` for
``SASL_SSL``). A source scan checks that every aiokafka client allot constructs
passes them on.
"""

from __future__ import annotations

import ast
import ssl
from pathlib import Path

import pytest

from streams import config
from streams.config import ConfigError, faust_credentials, kafka_client_options

ROOT = Path(__file__).resolve().parent.parent
SASL_ENV = {"ALLOT_SECURITY_PROTOCOL": "SASL_PLAINTEXT", "ALLOT_SASL_USERNAME": "worker",
            "ALLOT_SASL_PASSWORD": "s3cret"}


def test_plaintext_by_default_adds_nothing() -> None:
    assert kafka_client_options(environ={}) == {}
    assert kafka_client_options(config.WorkerSettings()) == {}
    assert faust_credentials(environ={}) is None


def test_sasl_from_the_environment() -> None:
    assert kafka_client_options(environ=SASL_ENV) == {
        "security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": "worker", "sasl_plain_password": "s3cret"}


def test_the_password_file_wins_and_its_first_line_is_used(tmp_path: Path) -> None:
    pw = tmp_path / "pw"
    pw.write_text("from-file\nignored\n")
    env = {**SASL_ENV, "ALLOT_SASL_PASSWORD": "", "ALLOT_SASL_PASSWORD_FILE": str(pw)}
    assert kafka_client_options(environ=env)["sasl_plain_password"] == "from-file"
    pw.write_text("\n")
    with pytest.raises(ConfigError, match=r"sasl_password_file: .* is empty"):
        kafka_client_options(environ=env)
    with pytest.raises(ConfigError, match="sasl_password_file"):
        kafka_client_options(environ={**env, "ALLOT_SASL_PASSWORD_FILE": str(tmp_path / "none")})


def test_the_worker_reads_them_from_toml_like_any_setting(tmp_path: Path) -> None:
    f = tmp_path / "worker.toml"
    f.write_text('[worker]\nsecurity_protocol = "SASL_PLAINTEXT"\nsasl_mechanism = "SCRAM-SHA-256"\n'
                 'sasl_username = "worker"\nsasl_password = "pw"\n')
    s = config.load(f, environ={})
    opts = kafka_client_options(s)
    assert opts["sasl_mechanism"] == "SCRAM-SHA-256" and opts["sasl_plain_username"] == "worker"
    # The environment still wins over the file, as for every setting.
    s = config.load(f, environ={"ALLOT_SASL_USERNAME": "worker-2"})
    assert kafka_client_options(s)["sasl_plain_username"] == "worker-2"


@pytest.mark.parametrize(("env", "message"), [
    ({"ALLOT_SECURITY_PROTOCOL": "SASL"}, "security_protocol: must be one of"),
    ({**SASL_ENV, "ALLOT_SASL_MECHANISM": "GSSAPI"}, "sasl_mechanism: must be one of"),
    ({**SASL_ENV, "ALLOT_SASL_USERNAME": ""}, "sasl_username: SASL_PLAINTEXT needs a user"),
    ({**SASL_ENV, "ALLOT_SASL_PASSWORD": ""}, "sasl_password: SASL_PLAINTEXT needs"),
])
def test_bad_security_settings_are_one_clear_error(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        kafka_client_options(environ=env)
    with pytest.raises(ConfigError, match=message):
        config.load(environ=env)


def test_sasl_ssl_gets_a_verifying_tls_context() -> None:
    opts = kafka_client_options(environ={**SASL_ENV, "ALLOT_SECURITY_PROTOCOL": "SASL_SSL"})
    ctx = opts["ssl_context"]
    assert isinstance(ctx, ssl.SSLContext)
    assert ctx.verify_mode == ssl.CERT_REQUIRED and ctx.check_hostname


def test_faust_gets_the_same_credentials() -> None:
    creds = faust_credentials(environ={**SASL_ENV, "ALLOT_SASL_MECHANISM": "SCRAM-SHA-256"})
    from faust.transport.drivers.aiokafka import credentials_to_aiokafka_auth

    # What Faust hands aiokafka is what every other allot client gets.
    auth = credentials_to_aiokafka_auth(creds)
    assert auth["security_protocol"] == "SASL_PLAINTEXT"
    assert auth["sasl_mechanism"] == "SCRAM-SHA-256"
    assert (auth["sasl_plain_username"], auth["sasl_plain_password"]) == ("worker", "s3cret")


CLIENTS = {"AIOKafkaProducer", "AIOKafkaConsumer", "AIOKafkaAdminClient"}
# Where allot constructs Kafka clients (tests and benchmarks talk to the embedded broker).
SOURCES = [p for d in ("streams", "archive", "executor", "monitor", "allot", "audit",
                       "dashboard", "identity", "projections", "forecast", "whatif")
           for p in sorted((ROOT / d).rglob("*.py")) if (ROOT / d).is_dir()]


def _client_calls(path: Path) -> list[tuple[int, str, bool]]:
    tree = ast.parse(path.read_text())
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = node.func.id if isinstance(node.func, ast.Name) else (
                node.func.attr if isinstance(node.func, ast.Attribute) else "")
            if name in CLIENTS:
                spread = [k for k in node.keywords if k.arg is None]
                ok = any("kafka_client_options" in ast.unparse(k.value)
                         or "security" in ast.unparse(k.value) for k in spread)
                out.append((node.lineno, name, ok))
    return out


def test_every_aiokafka_client_takes_the_security_options() -> None:
    calls = {(str(p.relative_to(ROOT)), line, name): ok
             for p in SOURCES for line, name, ok in _client_calls(p)}
    assert len(calls) >= 8  # the worker's three, client, tail, topics, restore, projections
    assert [k for k, ok in calls.items() if not ok] == []


def test_the_faust_app_takes_the_same_credentials() -> None:
    tree = ast.parse((ROOT / "streams" / "projections.py").read_text())
    apps = [n for n in ast.walk(tree) if isinstance(n, ast.Call)
            and ast.unparse(n.func) == "faust.App"]
    assert apps, "no faust.App in streams/projections.py"
    for app in apps:
        creds = [k for k in app.keywords if k.arg == "broker_credentials"]
        assert creds and "faust_credentials" in ast.unparse(creds[0].value)


@pytest.mark.parametrize("protocol", ["SASL_PLAINTEXT", "SASL_SSL"])
def test_aiokafka_takes_every_option(protocol: str) -> None:
    # Constructing the clients (no connection) checks every name against aiokafka's own
    # arguments and its consistency checks (SASL_SSL without an ssl_context is refused).
    import asyncio

    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.admin import AIOKafkaAdminClient

    opts = kafka_client_options(environ={**SASL_ENV, "ALLOT_SECURITY_PROTOCOL": protocol})

    async def build() -> None:
        p = AIOKafkaProducer(bootstrap_servers="127.0.0.1:9", **opts)
        c = AIOKafkaConsumer(bootstrap_servers="127.0.0.1:9", **opts)
        a = AIOKafkaAdminClient(bootstrap_servers="127.0.0.1:9", **opts)
        assert p.client._security_protocol == protocol
        assert c._client._sasl_mechanism == "SCRAM-SHA-512"
        assert a._client._sasl_plain_username == "worker"
        await p.stop()
        await c.stop()
        await a.close()

    asyncio.run(build())
