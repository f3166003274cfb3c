"""The runtime's configuration file holds no password: the process that wrote it keeps
them and answers, on an abstract Unix socket, processes of the same user; once it is
gone, asking is one line naming the fix."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from dbus_fn.capture import SourceSpec
from dbus_fn.errors import ConfigError
from dbus_spark.config.runtime import RuntimeConfig, SourceBinding, load_config

DSN = "mysql://dbus:s3cr%40t@127.0.0.1:3306"


def _config(tmp_path: Path, dsn: str = DSN) -> RuntimeConfig:
    sources = (
        SourceBinding(SourceSpec("shop", dsn, ("shop.*",)), 7),
        SourceBinding(SourceSpec("open", "mysql://reader@127.0.0.1:3307", ("*.*",)), 8),
    )
    return RuntimeConfig(sources=sources, deployments=(), kafka_bootstrap="127.0.0.1:9092",
                         elasticsearch_url="http://127.0.0.1:9200",
                         checkpoint_dir=str(tmp_path / "checkpoint"))  # fmt: skip


def test_the_file_holds_no_password_and_this_process_answers_for_it(tmp_path: Path) -> None:
    path = _config(tmp_path).save(tmp_path / "checkpoint.config.json")
    text = path.read_text()
    assert "s3cr" not in text
    saved = {s["name"]: s for s in json.loads(text)["sources"]}
    assert saved["shop"]["dsn"] == "mysql://dbus@127.0.0.1:3306" and saved["shop"]["secret"]
    assert saved["open"]["dsn"] == "mysql://reader@127.0.0.1:3307"  # no password: as it is
    assert "secret" not in saved["open"]
    loaded = load_config(path)
    assert [b.spec.dsn for b in loaded.sources] == [DSN, "mysql://reader@127.0.0.1:3307"]
    public = load_config(path, with_secrets=False)
    assert public.sources[0].spec.dsn == "mysql://dbus@127.0.0.1:3306"


ASK = textwrap.dedent("""
    import sys
    from dbus_spark.config.runtime import load_config
    print(load_config(sys.argv[1]).sources[0].spec.dsn)
""")


def test_another_process_of_the_same_user_is_answered(tmp_path: Path) -> None:
    path = _config(tmp_path).save(tmp_path / "checkpoint.config.json")
    asked = subprocess.run([sys.executable, "-c", ASK, str(path)], capture_output=True,
                           text=True, timeout=60, check=False)  # fmt: skip
    assert asked.returncode == 0, asked.stderr
    assert asked.stdout.strip() == DSN


WRITE_AND_GO = textwrap.dedent("""
    import sys
    from pathlib import Path
    from dbus_fn.capture import SourceSpec
    from dbus_spark.config.runtime import RuntimeConfig, SourceBinding
    RuntimeConfig(sources=(SourceBinding(SourceSpec("shop", sys.argv[2], ("*.*",)), 7),),
                  deployments=(), kafka_bootstrap="k:9092", elasticsearch_url="http://e:9200",
                  checkpoint_dir=sys.argv[3]).save(Path(sys.argv[1]))
""")


def test_once_the_runtime_is_gone_asking_is_one_line_naming_the_fix(tmp_path: Path) -> None:
    path = tmp_path / "gone.config.json"
    wrote = subprocess.run(
        [sys.executable, "-c", WRITE_AND_GO, str(path), DSN, str(tmp_path / "gone")],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert wrote.returncode == 0, wrote.stderr
    assert "s3cr" not in path.read_text()
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    message = str(caught.value)
    assert "not kept on disk" in message and "run this while that runtime runs" in message
    assert "s3cr" not in message and "\n" not in message
    assert load_config(path, with_secrets=False).sources[0].spec.dsn.endswith("@127.0.0.1:3306")
