"""The helpers every test shares: the ports they hand out."""

from __future__ import annotations

import socket

import support


def test_ports_are_distinct_free_and_below_the_ephemeral_range() -> None:
    ports = support.free_ports(50) + [support.free_port() for _ in range(50)]
    assert len(set(ports)) == 100
    assert all(20000 <= port < support._ephemeral_low() for port in ports)
    for port in ports[:10]:
        with socket.socket() as server:
            server.bind(("127.0.0.1", port))


def test_a_port_something_listens_on_is_passed_over() -> None:
    taken = support.free_port()
    with socket.socket() as server:
        server.bind(("127.0.0.1", taken + 1))
        server.listen()
        # The next port in this process's walk is the one now listened on.
        assert taken + 1 not in support.free_ports(20)
