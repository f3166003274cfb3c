"""How much the runtime and its client libraries print, quiet and verbose."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import pytest

pytest.importorskip("pyspark")

from dbus_spark.config import logs


@pytest.fixture(autouse=True)
def _restore(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    # set_verbose() writes the environment itself: let monkeypatch own the variable.
    monkeypatch.setenv(logs.VERBOSE_ENV, "")
    monkeypatch.delenv(logs.VERBOSE_ENV)
    monkeypatch.delenv(logs.RUNTIME_LOG_ENV, raising=False)
    names = (*logs._CLIENT_LOGGERS, logs.LIBRDKAFKA_LOGGER)
    levels = {name: logging.getLogger(name).level for name in names}
    yield
    for name, level in levels.items():
        logging.getLogger(name).setLevel(level)


def test_kafka_clients_log_through_python_logging_errors_only_when_quiet() -> None:
    config = logs.kafka_config({"bootstrap.servers": "127.0.0.1:9092"})
    assert config["bootstrap.servers"] == "127.0.0.1:9092"
    librdkafka = config["logger"]
    assert librdkafka.name == logs.LIBRDKAFKA_LOGGER
    assert not librdkafka.isEnabledFor(logging.WARNING)
    assert librdkafka.isEnabledFor(logging.ERROR)


def test_verbose_shows_the_clients_warnings_and_notices_and_spark_warnings() -> None:
    logs.set_verbose(True)
    assert os.environ[logs.VERBOSE_ENV] == "1"
    assert logs.kafka_config({})["logger"].isEnabledFor(logging.INFO)
    assert logging.getLogger("elastic_transport.transport").isEnabledFor(logging.WARNING)
    assert logs.spark_log_level() == "WARN"
    assert "-Ddbus.spark.level=warn" in logs.spark_java_options()
    logs.set_verbose(False)
    assert os.environ[logs.VERBOSE_ENV] == "0"
    assert not logging.getLogger("elastic_transport.transport").isEnabledFor(logging.WARNING)
    assert logs.spark_log_level() == "ERROR"


def test_spark_logs_through_the_packaged_log4j2_file() -> None:
    assert logs.LOG4J2_CONFIG.is_file()
    assert f"-Dlog4j2.configurationFile={logs.LOG4J2_CONFIG.as_uri()}" in (
        logs.spark_java_options()
    )


def test_the_runtime_log_level_comes_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert logs.runtime_log_level() == logging.INFO
    monkeypatch.setenv(logs.RUNTIME_LOG_ENV, "error")
    assert logs.runtime_log_level() == logging.ERROR
    monkeypatch.setenv(logs.RUNTIME_LOG_ENV, "nonsense")
    assert logs.runtime_log_level() == logging.INFO


def test_the_jvm_stderr_filter_drops_only_the_incubator_warning() -> None:
    jvm_read, jvm_write = os.pipe()
    seen_read, seen_write = os.pipe()
    forward = threading.Thread(target=logs._forward_stderr, args=(jvm_read, seen_write))
    forward.start()
    os.write(jvm_write, b"WARNING: Using incubator modules: jdk.incubator.vector\n")
    os.write(jvm_write, b"26/11/23 ERROR SparkContext: something real\n")
    os.close(jvm_write)
    forward.join(timeout=10)
    os.close(seen_write)
    with open(seen_read, "rb") as seen:
        assert seen.read() == b"26/11/23 ERROR SparkContext: something real\n"


def test_quiet_kafka_client_lines_are_at_most_one_per_interval() -> None:
    now = [0.0]
    once = logs.OncePer(30.0, clock=lambda: now[0])

    def passes(message: str) -> logging.LogRecord | None:
        record = logging.LogRecord("x", logging.ERROR, __file__, 1, message, None, None)
        return record if once.filter(record) else None

    assert passes("FAIL connect refused") is not None
    for second in range(1, 30):
        now[0] = float(second)
        assert passes(f"FAIL connect refused #{second}") is None
    now[0] = 30.0
    record = passes("FAIL connect refused again")
    assert record is not None
    assert record.getMessage() == "FAIL connect refused again (29 more client line(s) held back)"
    librdkafka = logs.kafka_config({})["logger"]
    assert any(isinstance(f, logs.OncePer) for f in librdkafka.filters)
    logs.set_verbose(True)
    assert not any(isinstance(f, logs.OncePer) for f in logs.kafka_config({})["logger"].filters)


def test_the_stacks_signal_prints_every_thread_of_a_runtime_process() -> None:
    script = (
        "import os, threading, time\n"
        "from dbus_spark.config import logs\n"
        "logs.stacks_on_signal()\n"
        "threading.Thread(target=time.sleep, args=(30,), daemon=True).start()\n"
        "print('ready', flush=True)\n"
        "time.sleep(30)\n"
    )
    lines: list[str] = []
    reader: threading.Thread | None = None
    with subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    ) as process:
        try:
            assert process.stdout is not None and process.stdout.readline() == b"ready\n"
            err = process.stderr
            assert err is not None
            reader = threading.Thread(
                target=lambda: lines.extend(line.decode() for line in err), daemon=True
            )
            reader.start()
            process.send_signal(logs.STACKS_SIGNAL)

            def dumped() -> bool:
                # The whole dump, not its second header: faulthandler writes it piece by
                # piece from the signal handler, the main thread last (after its header,
                # its frames), so a kill at the second header can cut the frame off.
                text = "".join(lines)
                return text.count("hread 0x") >= 2 and 'File "<string>", line' in text

            deadline = time.monotonic() + 30
            while not dumped() and time.monotonic() < deadline:
                time.sleep(0.05)
            assert process.poll() is None, "the signal printed stacks; the process goes on"
        finally:
            process.kill()
            process.wait()
            if reader is not None:
                reader.join(10)
    text = "".join(lines)
    assert text.count("hread 0x") == 2, text  # the main thread and the sleeping one
    assert 'File "<string>", line' in text, text  # the main thread, in the script


def _drop_after_the_token(server: object, token: str) -> None:
    """Do what Spark's JVM does as its context stops: connect, send the token, close."""
    import socket

    host, port = server.server_address  # type: ignore[attr-defined]
    with socket.create_connection((host, port)) as conn:
        conn.sendall(token.encode())


@pytest.mark.parametrize("quiet", [False, True])
def test_the_accumulator_server_says_nothing_of_a_connection_closed_as_spark_stops(
    capfd: pytest.CaptureFixture[str], quiet: bool
) -> None:
    from types import SimpleNamespace

    from pyspark.accumulators import _start_update_server

    server = _start_update_server("t0ken", False)
    handled = threading.Event()
    close = server.shutdown_request

    def closed(request: object) -> None:  # after the handler and its error, if any
        close(request)
        handled.set()

    server.shutdown_request = closed  # type: ignore[method-assign]
    try:
        if quiet:
            logs.quiet_accumulator_server(SimpleNamespace(_accumulatorServer=server))
        _drop_after_the_token(server, "t0ken")
        assert handled.wait(30), "the server never finished with the connection"
    finally:
        server.shutdown()
        server.server_close()
    printed = capfd.readouterr().err
    # Without it, pyspark prints the EOFError the runtime's Ctrl-C line came after.
    assert ("EOFError" in printed) is not quiet, printed


@pytest.mark.parametrize("in_a_task", [True, False])
def test_a_spark_worker_goes_on_through_ctrl_c_and_no_other_process_does(
    in_a_task: bool,
) -> None:
    # pyspark's daemon gives each worker Python's KeyboardInterrupt back; the first
    # task takes it away again, as a terminal's Ctrl-C reaches the workers too. A
    # process that is no Spark task (a test calling worker code) keeps its Ctrl-C:
    # the processes it starts inherit what it ignores.
    code = (
        "import os, signal\n"
        "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
        "from pyspark import TaskContext\n"
        f"if {in_a_task}: TaskContext._getOrCreate()\n"
        "from dbus_spark.config import logs\n"
        "logs.ignore_ctrl_c()\n"
        "try:\n"
        "    os.kill(os.getpid(), signal.SIGINT)\n"
        "    print('went on')\n"
        "except KeyboardInterrupt:\n"
        "    print('interrupted')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)  # fmt: skip
    said = "went on\n" if in_a_task else "interrupted\n"
    assert (done.returncode, done.stdout, done.stderr) == (0, said, "")
