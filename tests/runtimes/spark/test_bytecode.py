"""Spark's Python processes import pyspark from byte code (``dbus_spark.spark.bytecode``)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytest.importorskip("pyspark")

from dbus_spark.spark import bytecode

_MODULES = {
    "pyspark/__init__.py": "VALUE = 'package'\n",
    "pyspark/sub.py": "VALUE = 'sub'\n",
    "pyspark/later.py": "def f(:\n",  # another Python's syntax: its source stays
    "pyspark/data.txt": "not a module\n",
}


def _spark_home(tmp_path: Path, modules: dict[str, str] = _MODULES) -> Path:
    """A SPARK_HOME whose python/lib/pyspark.zip holds ``modules``; the zip's path."""
    path = tmp_path / "spark" / "python" / "lib" / bytecode.ZIP_NAME
    path.parent.mkdir(parents=True)
    with zipfile.ZipFile(path, "w") as archive:
        for name, text in modules.items():
            archive.writestr(name, text)
    return path


def _run(args: list[str], path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args],
        env={**os.environ, "SPARK_HOME": str(path.parents[2]), **env},
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def _imported(path: Path) -> list[str]:
    """What a process with the zip first on its path (as Spark starts them) imports:
    each module's file and value."""
    done = _run(
        ["-c", "import pyspark, pyspark.sub; print(pyspark.__file__, pyspark.VALUE, "
         "pyspark.sub.__file__, pyspark.sub.VALUE)"],
        path, PYTHONPATH=str(path),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_a_zip_gets_byte_code_beside_its_sources_and_imports_use_it(tmp_path: Path) -> None:
    path = _spark_home(tmp_path)
    assert _imported(path)[0].endswith("pyspark/__init__.py")  # compiled in each process

    done = _run(["-m", "dbus_spark.spark.bytecode"], path)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert done.stdout.startswith("dbus: byte code for 2 modules written into"), done.stdout
    with zipfile.ZipFile(path) as archive:
        names = set(archive.namelist())
        assert names == {*_MODULES, "pyspark/__init__.pyc", "pyspark/sub.pyc"}
        for name, text in _MODULES.items():
            assert archive.read(name).decode() == text
        assert archive.read("pyspark/sub.pyc")[:4] == importlib.util.MAGIC_NUMBER
    assert not list(path.parent.glob(".*")), "the zip is replaced whole"
    assert bytecode.compiled(path)

    package, package_value, sub, sub_value = _imported(path)
    assert package.endswith("pyspark/__init__.pyc") and sub.endswith("pyspark/sub.pyc")
    assert (package_value, sub_value) == ("package", "sub")

    inode = path.stat().st_ino
    again = _run(["-m", "dbus_spark.spark.bytecode"], path)
    assert again.returncode == 0 and again.stdout == again.stderr == "", "written once"
    assert path.stat().st_ino == inode


def _replace(path: Path, name: str, data: bytes) -> None:
    """The zip at ``path`` with entry ``name`` holding ``data`` instead."""
    with zipfile.ZipFile(path) as archive:
        entries = [(info, archive.read(info)) for info in archive.infolist()]
    with zipfile.ZipFile(path, "w") as archive:
        for info, old in entries:
            archive.writestr(info, data if info.filename == name else old)


def test_byte_code_is_never_used_for_another_source(tmp_path: Path) -> None:
    path = _spark_home(tmp_path)
    bytecode.compile_zip(path)
    _replace(path, "pyspark/sub.py", b"VALUE = 'changed'\n")
    _, _, sub, value = _imported(path)
    assert value == "changed" and sub.endswith("pyspark/sub.py")


def test_byte_code_of_another_python_is_ignored_then_made_again(tmp_path: Path) -> None:
    path = _spark_home(tmp_path)
    bytecode.compile_zip(path)
    with zipfile.ZipFile(path) as archive:
        made = archive.read("pyspark/__init__.pyc")
    _replace(path, "pyspark/__init__.pyc", b"\x00\x01\r\n" + made[4:])  # another magic
    assert not bytecode.compiled(path)
    package, value, _, _ = _imported(path)
    assert value == "package" and package.endswith("pyspark/__init__.py")

    assert _run(["-m", "dbus_spark.spark.bytecode"], path).returncode == 0
    assert bytecode.compiled(path)
    with zipfile.ZipFile(path) as archive:
        assert archive.namelist().count("pyspark/__init__.pyc") == 1
    assert _imported(path)[0].endswith("pyspark/__init__.pyc")


def test_a_zip_that_cannot_be_written_warns_in_one_line_and_stays(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _spark_home(tmp_path)
    before = path.read_bytes()
    monkeypatch.setenv("SPARK_HOME", str(path.parents[2]))
    monkeypatch.setattr(os, "getpid", lambda: 7)
    (path.parent / f".{path.name}.7").mkdir()  # where the new zip would be written
    assert bytecode.main() == 0  # an install goes on without it
    out, err = capsys.readouterr()
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("dbus: warning: no byte code in Spark's"), lines
    assert path.read_bytes() == before


def test_a_zip_that_cannot_be_read_warns_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _spark_home(tmp_path)
    path.write_bytes(b"not a zip")
    monkeypatch.setenv("SPARK_HOME", str(path.parents[2]))
    assert bytecode.main() == 0
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("dbus: warning: no byte code in Spark's"), lines
    assert path.read_bytes() == b"not a zip"


def test_no_zip_nothing_to_do(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPARK_HOME", str(tmp_path))
    assert bytecode.worker_zip() is None
    assert bytecode.main() == 0


@pytest.mark.integration
def test_sparks_python_workers_import_pyspark_from_byte_code() -> None:
    """In this environment (its install wrote the byte code), a Spark worker's pyspark
    comes from the zip's byte code."""
    path = bytecode.worker_zip()
    assert path is not None and bytecode.compiled(path), "python -m dbus_spark.spark.bytecode"
    script = (
        "from dbus_spark.spark.session import spark_session\n"
        "spark = spark_session('local[1]')\n"
        "print(spark.sparkContext.parallelize([0], 1)"
        ".map(lambda _: __import__('pyspark').__file__).collect()[0])\n"
        "spark.stop()\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=300, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == f"{path}/pyspark/__init__.pyc", done.stdout
