"""The socket an open read answers on: the next read of a source takes its name
once the read before it let go of it, and never leaks a socket when it cannot."""

from __future__ import annotations

import gc
import socket
import threading
import uuid

import pytest

from dbus_fn.errors import DbusError
from dbus_spark.reads import open_read_socket


def _name() -> str:
    return f"\0dbus-test-listen-{uuid.uuid4().hex}"


def test_a_name_let_go_of_within_the_wait_is_taken() -> None:
    name = _name()
    held = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    held.bind(name)
    timer = threading.Timer(0.3, held.close)
    timer.start()
    listener = open_read_socket.listen(name, "src")
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
            client.connect(name)  # it listens
    finally:
        listener.close()
        timer.join()


def test_a_name_held_past_the_wait_is_a_one_line_error_and_no_socket_is_left_open(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(open_read_socket, "LISTEN_WAIT", 0.2)
    name = _name()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as held:
        held.bind(name)
        with pytest.raises(DbusError) as raised:
            open_read_socket.listen(name, "src")
        # The test suite turns warnings into errors: an unclosed socket would fail here.
        gc.collect()
    message = str(raised.value)
    assert "\n" not in message
    assert "source 'src'" in message and "still taken" in message
    assert "read again" in message
