"""Worker settings: defaults, then the config file, then the environment, then flags."""

from __future__ import annotations

from pathlib import Path

import pytest

from streams import config
from streams.config import ConfigError


def test_defaults_bind_loopback_and_need_no_file() -> None:
    s = config.load(environ={})
    assert s.bootstrap == "127.0.0.1:9092"
    assert s.metrics_host == "127.0.0.1"


def test_file_then_env_then_flags(tmp_path: Path) -> None:
    f = tmp_path / "w.toml"
    f.write_text('bootstrap = "10.0.0.1:9092"\npartitions = 3\nclusters = ["a", "b"]\n'
                 'time_scale = 2.0\n')
    s = config.load(f, environ={"ALLOT_PARTITIONS": "5"}, flags={"time_scale": 4.0,
                                                                  "partitions": None})
    assert (s.bootstrap, s.partitions, s.clusters, s.time_scale) == \
        ("10.0.0.1:9092", 5, ("a", "b"), 4.0)


def test_kafka_bootstrap_servers_is_read() -> None:
    s = config.load(environ={"KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:1234"})
    assert s.bootstrap == "127.0.0.1:1234"


def test_a_worker_table_is_read(tmp_path: Path) -> None:
    f = tmp_path / "w.toml"
    f.write_text('[worker]\ngroup = "g2"\n')
    assert config.load(f, environ={}).group == "g2"


@pytest.mark.parametrize(("source", "text"), [
    ("file", 'no_such_setting = 1\n'),
    ("file", 'partitions = "many"\n'),
    ("file", 'partitions = 0\n'),
    ("file", 'metrics_host = "0.0.0.0"\n'),
    ("file", 'clusters = ["bad/id"]\n'),
    ("env", "ALLOT_TIME_SCALE=fast"),
    ("env", "ALLOT_NUDGE=maybe"),
    ("file", "not toml ["),
])
def test_bad_settings_are_one_config_error(tmp_path: Path, source: str, text: str) -> None:
    f = None
    env: dict[str, str] = {}
    if source == "file":
        f = tmp_path / "w.toml"
        f.write_text(text)
    else:
        k, v = text.split("=", 1)
        env[k] = v
    with pytest.raises(ConfigError):
        config.load(f, environ=env)


def test_a_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="No such file"):
        config.load(tmp_path / "absent.toml", environ={})


def test_every_setting_has_documentation() -> None:
    assert all(len(doc) > 20 for doc in config.SETTINGS.values())


def test_tick_key_file(tmp_path: Path) -> None:
    f = tmp_path / "key"
    f.write_text("s3cret\n")
    assert config.load(environ={"ALLOT_TICK_KEY_FILE": str(f)}).signing_key() == b"s3cret"
