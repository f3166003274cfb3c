"""Spark's JVM starts from an archive of its classes when there is one
(``dbus_spark.config.jvm``)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("pyspark")

from dbus_spark.config import jvm, logs


def test_no_archive_no_option(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(jvm.ARCHIVE_ENV, str(tmp_path / "none.jsa"))
    assert jvm.java_options() == ""
    assert "SharedArchiveFile" not in logs.spark_java_options()


def test_an_archive_there_is_used_and_its_failures_stay_quiet(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    archive = tmp_path / "classes.jsa"
    archive.write_bytes(b"not an archive")
    monkeypatch.setenv(jvm.ARCHIVE_ENV, str(archive))
    assert f"-XX:SharedArchiveFile={archive}" in logs.spark_java_options()
    assert "-Xlog:cds=off" in jvm.java_options()
    # A JVM that cannot map it starts as without it, and prints nothing of it.
    java = shutil.which("java")
    assert java is not None
    done = subprocess.run([java, *jvm.java_options().split(), "-version"],
                          capture_output=True, text=True, check=False)  # fmt: skip
    assert done.returncode == 0
    assert "cds" not in done.stdout + done.stderr


def test_a_build_that_fails_warns_in_one_line_and_leaves_nothing(tmp_path: Path) -> None:
    archive = tmp_path / "share" / "spark-classes.jsa"
    env = {**os.environ, jvm.ARCHIVE_ENV: str(archive), "JAVA_HOME": str(tmp_path / "no-java")}
    done = subprocess.run([sys.executable, "-m", "dbus_spark.config.jvm"], env=env,
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr  # an install goes on without it
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("dbus: warning: no class archive"), lines
    assert not archive.exists() and not list(archive.parent.iterdir())


def test_off_turns_it_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(jvm.ARCHIVE_ENV, "off")
    assert jvm.archive_path() is None
    assert jvm.java_options() == ""


def test_the_default_archive_belongs_to_this_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    import pyspark

    monkeypatch.delenv(jvm.ARCHIVE_ENV, raising=False)
    path = jvm.archive_path()
    assert path is not None
    assert path.is_relative_to(sys.prefix) and pyspark.__version__ in path.name


_SESSION = """
import json, sys
from dbus_spark.spark.session import spark_session
spark = spark_session("local[1]")
print(json.dumps({"pid": int(spark.sparkContext._jvm.ProcessHandle.current().pid())}), flush=True)
sys.stdin.readline()
spark.stop()
"""


@pytest.mark.integration
def test_a_session_started_after_a_build_maps_the_archive(tmp_path: Path) -> None:
    archive = tmp_path / "share" / "spark-classes.jsa"
    env = {**os.environ, jvm.ARCHIVE_ENV: str(archive)}
    made = subprocess.run([sys.executable, "-m", "dbus_spark.config.jvm"], env=env,
                          capture_output=True, text=True, check=True, timeout=600)  # fmt: skip
    assert "class archive made" in made.stdout, made.stdout + made.stderr
    assert archive.is_file() and not list(archive.parent.glob(".*"))  # whole, renamed
    again = subprocess.run([sys.executable, "-m", "dbus_spark.config.jvm"], env=env,
                           capture_output=True, text=True, check=True, timeout=60)  # fmt: skip
    assert again.stdout == "", "made once"

    with subprocess.Popen([sys.executable, "-c", _SESSION], env=env, text=True,
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE) as session:  # fmt: skip
        try:
            assert session.stdout is not None and session.stdin is not None
            pid = json.loads(session.stdout.readline())["pid"]
            jcmd = Path(shutil.which("java") or "java").resolve().with_name("jcmd")
            info = subprocess.run([str(jcmd), str(pid), "VM.info"], capture_output=True,
                                  text=True, check=True, timeout=60).stdout  # fmt: skip
            mapped = re.search(r"CDS archive\(s\) mapped at: .*size (\d+)", info)
            assert mapped is not None, info
            # The JDK's own archive is some 13 MB; with Spark's classes, more than their file.
            assert int(mapped.group(1)) > archive.stat().st_size, mapped.group(0)
            session.stdin.write("\n")
            session.stdin.flush()
            assert session.wait(60) == 0
        finally:
            if session.poll() is None:
                session.kill()
