"""Ports and paths for the tests that start TensorFlow multi-worker processes."""

import os
import socket


ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def free_ports(count):
    """`count` TCP ports free on 127.0.0.1 now (bound, read, released)."""
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports
