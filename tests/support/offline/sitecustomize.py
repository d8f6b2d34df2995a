"""Loaded by a process started with this folder first on PYTHONPATH: a machine whose network
is cut, as inside a VPC Service Controls perimeter. Every connection and name lookup but
loopback's is refused, as a network without a route out refuses it."""

import errno
import socket

_LOOPBACK = ("127.0.0.1", "::1", "localhost")
_connect, _connect_ex, _getaddrinfo = (socket.socket.connect, socket.socket.connect_ex,
                                       socket.getaddrinfo)


def _outside(address):
    return isinstance(address, tuple) and str(address[0]) not in _LOOPBACK


def connect(self, address):
    if _outside(address):
        raise OSError(errno.ENETUNREACH, f"the network is cut: {address[0]} is unreachable")
    return _connect(self, address)


def connect_ex(self, address):
    return errno.ENETUNREACH if _outside(address) else _connect_ex(self, address)


def getaddrinfo(host, *args, **kwargs):
    if host is not None and str(host) not in _LOOPBACK:
        raise socket.gaierror(socket.EAI_NONAME, f"the network is cut: no name {host}")
    return _getaddrinfo(host, *args, **kwargs)


socket.socket.connect = connect
socket.socket.connect_ex = connect_ex
socket.getaddrinfo = getaddrinfo
