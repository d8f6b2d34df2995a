"""The cluster's network: keeping its gRPC off proxies, and saying why it did not form.

Pure Python (no TensorFlow): `no_grpc_proxy` must be set before TensorFlow starts its
channels.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping

from trainer.cluster.tf_config import ClusterInfo

#: What gRPC (TensorFlow's cluster transport) reads to find a proxy, in its order, and what
#: exempts a host from it: "checked in order, and the first one that has a value is used"
#: (grpc/grpc doc/environment_variables.md). Unlike most HTTP clients, gRPC proxies every
#: channel, localhost included, unless one of the exemption lists names the host; and
#: with `no_grpc_proxy` set, it ignores `no_proxy`.
GRPC_PROXY_VARIABLES = ("grpc_proxy", "https_proxy", "http_proxy")
GRPC_NO_PROXY_VARIABLES = ("no_grpc_proxy", "no_proxy")


def grpc_proxy_exemptions(info: ClusterInfo, environ: Mapping[str, str]) -> str | None:
    """The `no_grpc_proxy` that keeps the cluster's traffic off any proxy in `environ`.

    The cluster's hosts (and localhost) join the user's own exemptions (`no_grpc_proxy`,
    else `no_proxy` or `NO_PROXY`, which gRPC would otherwise have used), so that other
    gRPC traffic (Google's clients) still goes where the user sends it; HTTP downloads
    (Keras weights, Cloud Storage) read `no_proxy`, which is left as it is.

    Returns:
        The value to set, or None when no proxy is set or there is no cluster.
    """
    if not info.cluster or not any(environ.get(name) for name in GRPC_PROXY_VARIABLES):
        return None
    user = next((environ[name] for name in (*GRPC_NO_PROXY_VARIABLES, "NO_PROXY")
                 if environ.get(name)), "")
    hosts = [address.rsplit(":", 1)[0].strip("[]")
             for addresses in info.cluster.values() for address in addresses]
    exempt: list[str] = []
    for host in (*user.split(","), "localhost", "127.0.0.1", *hosts):
        if host.strip() and host.strip() not in exempt:
            exempt.append(host.strip())
    return ",".join(exempt)


def keep_cluster_off_proxies(info: ClusterInfo, environ: Mapping[str, str]) -> str | None:
    """Sets `no_grpc_proxy` in this process's environment (before TensorFlow starts its
    gRPC channels) as `grpc_proxy_exemptions` says; returns what was set, if anything."""
    exempt = grpc_proxy_exemptions(info, environ)
    if exempt is not None:
        os.environ["no_grpc_proxy"] = exempt
    return exempt



def unreachable(info: ClusterInfo, timeout: float = 2.0) -> list[str]:
    """The other replicas of the cluster whose address accepts no TCP connection (no
    server listening there yet, or the way to it blocked), as `worker:0 (host:port)`."""
    missing = []
    for role, addresses in info.cluster.items():
        for index, address in enumerate(addresses):
            if (role, index) == (info.task_type, info.task_index):
                continue
            host, _, port = address.rpartition(":")
            try:
                socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
            except (OSError, ValueError):
                missing.append(f"{role}:{index} ({address})")
    return missing


def not_formed_message(info: ClusterInfo, seconds: int, environ: Mapping[str, str]) -> str:
    """Why a replica gave up waiting for its cluster, with what it could not reach."""
    missing = unreachable(info)
    proxies = [f"{name}={environ[name]}" for name in (*GRPC_PROXY_VARIABLES, "no_grpc_proxy")
               if environ.get(name)]
    return (f"{info.name}: the training cluster did not form within {seconds} s "
            "(training.cluster_wait): "
            + (f"could not reach {', '.join(missing)}" if missing else
               "every replica's address answers, but not all of them joined")
            + ". Likely causes: a replica that failed to start or died (see its log), a "
            "firewall between the machines, or a proxy"
            + (f" ({', '.join(proxies)})" if proxies else ""))
