"""TF_CONFIG as Vertex AI sets it, and the trainer's output locations."""

from __future__ import annotations

import json
import re
import socket

import pytest

from components.training.local_cluster import cluster_environments
from trainer.cluster.local import cluster_wait_seconds
from trainer.cluster.network import grpc_proxy_exemptions, not_formed_message
from trainer.cluster.roles import ClusterConfigError, Layout
from trainer.cluster.tf_config import cluster_from_env, vertex_tf_config
from trainer.cluster.training_plan import choose_strategy
from trainer.common.gcs import to_mount_path
from trainer.run import paths

CLUSTER = {"chief": ["h:1"], "worker": ["h:2", "h:3"]}


def test_vertex_chief_and_workers():
    chief = cluster_from_env({"TF_CONFIG": vertex_tf_config(CLUSTER, "chief", 0)})
    worker0 = cluster_from_env({"TF_CONFIG": vertex_tf_config(CLUSTER, "worker", 0)})
    assert (chief.is_chief, chief.training_machines, chief.name) == (True, 3, "chief:0")
    # Worker index 0 is not the chief when the cluster has a chief (Vertex's pool 0).
    assert (worker0.is_chief, worker0.training_machines) == (False, 3)


def test_the_clusters_grpc_goes_around_the_users_proxy_and_the_rest_still_through_it():
    vertex = cluster_from_env({"TF_CONFIG": vertex_tf_config(
        {"chief": ["workerpool0-0:2222"], "worker": ["workerpool1-0:2222", "[::1]:5"]},
        "chief", 0)})
    proxy = {"https_proxy": "http://proxy.corp:3128"}
    # gRPC reads no_grpc_proxy first and then ignores no_proxy: the user's list is kept.
    assert grpc_proxy_exemptions(vertex, {**proxy, "no_proxy": "metadata.google.internal,"
                                                               ".corp"}) == \
        "metadata.google.internal,.corp,localhost,127.0.0.1,workerpool0-0,workerpool1-0,::1"
    assert grpc_proxy_exemptions(vertex, {**proxy, "no_grpc_proxy": "a", "no_proxy": "b"}) == \
        "a,localhost,127.0.0.1,workerpool0-0,workerpool1-0,::1"
    assert grpc_proxy_exemptions(vertex, {"grpc_proxy": "http://p:1", "NO_PROXY": "c"}) \
        .startswith("c,localhost,")
    # No proxy, or no cluster: nothing to change.
    assert grpc_proxy_exemptions(vertex, {"no_proxy": "x"}) is None
    assert grpc_proxy_exemptions(cluster_from_env({}), proxy) is None


def test_a_replica_names_the_replicas_it_cannot_reach_when_the_cluster_does_not_form():
    with socket.socket() as listening, socket.socket() as closed:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        closed.bind(("127.0.0.1", 0))  # bound, not listening: refuses connections
        up, down = (f"127.0.0.1:{s.getsockname()[1]}" for s in (listening, closed))
        info = cluster_from_env({"TF_CONFIG": vertex_tf_config(
            {"chief": ["127.0.0.1:1"], "worker": [up, down]}, "chief", 0)})
        message = not_formed_message(info, 30, {"grpc_proxy": "http://p:3128"})
    assert message == (
        f"chief:0: the training cluster did not form within 30 s (training.cluster_wait): "
        f"could not reach worker:1 ({down}). Likely causes: a replica that failed to start "
        "or died (see its log), a firewall between the machines, or a proxy "
        "(grpc_proxy=http://p:3128)")
    # 0 means: by where the replica runs.
    assert cluster_wait_seconds(0, {"TRAINER_LOCAL_CLUSTER": "1"}) == 180
    assert cluster_wait_seconds(0, {}) == 1800 and cluster_wait_seconds(45, {}) == 45


def test_vertex_evaluator_is_a_task_outside_the_cluster():
    # Vertex AI lists chief, worker and ps in the cluster, never the evaluator.
    raw = vertex_tf_config({**CLUSTER, "ps": ["h:4"], "evaluator": ["h:5"]}, "evaluator", 0)
    config = json.loads(raw)
    assert set(config["cluster"]) == {"chief", "worker", "ps"}
    evaluator = cluster_from_env({"TF_CONFIG": raw})
    assert evaluator.task_type == "evaluator" and not evaluator.is_chief
    assert evaluator.layout == Layout(workers=2, parameter_servers=1, evaluators=1)


def test_cluster_without_chief_and_without_tf_config():
    config = {"cluster": {"worker": ["h:1", "h:2"]}, "task": {"type": "worker", "index": 0}}
    assert cluster_from_env({"TF_CONFIG": json.dumps(config)}).is_chief
    single = cluster_from_env({})
    assert single.is_chief and single.training_machines == 1 and single.task_type is None


@pytest.mark.parametrize("raw", ["{not json", json.dumps(
    {"cluster": {"chief": ["h:1"]}, "task": {"type": "worker", "index": 0}}), json.dumps(
    {"cluster": {"chief": ["h:1"]}, "task": {"type": "evaluator", "index": 1}})])
def test_invalid_tf_config(raw):
    with pytest.raises(ClusterConfigError):
        cluster_from_env({"TF_CONFIG": raw})


@pytest.mark.parametrize("layout,requested,chosen", [
    (Layout(), "auto", "single"),
    (Layout(workers=2), "auto", "multi_worker_mirrored"),
    (Layout(workers=2, evaluators=1), "auto", "multi_worker_mirrored"),
    (Layout(workers=2, parameter_servers=1), "auto", "parameter_server"),
    (Layout(workers=9, parameter_servers=3), "parameter_server", "parameter_server"),
    # Asked for explicitly, pool-2 replicas stay out of training (a Reduction Server).
    (Layout(workers=1, parameter_servers=1), "multi_worker_mirrored", "multi_worker_mirrored"),
])
def test_the_strategy_follows_the_layout(layout, requested, chosen):
    assert choose_strategy(layout, requested) == chosen


@pytest.mark.parametrize("layout,requested,message", [
    (Layout(workers=2), "parameter_server", "needs at least one worker and one parameter "
                                            "server; the cluster has 2 worker(s) and 0"),
    (Layout(parameter_servers=1), "auto", "the cluster has 0 worker(s) and 1 parameter"),
    (Layout(workers=1, evaluators=2), "auto", "a sidecar evaluator is one replica"),
    (Layout(), "sync", "training.strategy is 'sync'; valid values are auto, "
                       "multi_worker_mirrored, parameter_server"),
])
def test_layouts_a_strategy_cannot_run(layout, requested, message):
    with pytest.raises(ClusterConfigError, match=re.escape(message)):
        choose_strategy(layout, requested)


def test_paths():
    assert to_mount_path("gs://bucket/a/b") == "/gcs/bucket/a/b"
    assert to_mount_path("/tmp/x") == "/tmp/x"
    assert paths.model_dir("/job", {}) == "/job/model"
    assert paths.model_dir("/job", {"AIP_MODEL_DIR": "gs://b/m"}) == "/gcs/b/m"
    assert paths.model_dir("/job", {"AIP_MODEL_DIR": "gs://b/m"}, "/explicit") == "/explicit"


def test_local_cluster_environments_follow_vertex_roles():
    envs = cluster_environments(Layout(workers=2, parameter_servers=1, evaluators=1),
                                {"KEEP": "1"})
    assert [name for name, _ in envs] == ["chief", "worker-0", "worker-1", "ps-0",
                                          "evaluator-0"]
    configs = [json.loads(e["TF_CONFIG"]) for _, e in envs]
    assert [(c["task"]["type"], c["task"]["index"]) for c in configs] == \
        [("chief", 0), ("worker", 0), ("worker", 1), ("ps", 0), ("evaluator", 0)]
    cluster = configs[0]["cluster"]
    assert {k: len(v) for k, v in cluster.items()} == {"chief": 1, "worker": 2, "ps": 1}
    assert len(set(cluster["chief"] + cluster["worker"] + cluster["ps"])) == 4  # distinct ports
    assert all(c["cluster"] == cluster and c["environment"] == "cloud" for c in configs)
    specs = [json.loads(e["CLUSTER_SPEC"]) for _, e in envs]
    assert set(specs[0]["cluster"]) == {"workerpool0", "workerpool1", "workerpool2",
                                        "workerpool3"}
    assert specs[4]["task"] == {"type": "workerpool3", "index": 0}
    assert envs[0][1]["KEEP"] == "1"
    ((_, single),) = cluster_environments(Layout(), {"TF_CONFIG": "stale"})
    assert "TF_CONFIG" not in single


def test_core_plan_gives_training_processes_their_own_cores():
    from components.training.local_cluster import core_sets

    assert core_sets(["chief", "worker-0"], [0, 1]) == {"chief": [0], "worker-0": [1]}
    assert core_sets(["chief", "worker-0"], [0, 1, 2, 3, 4]) == {
        "chief": [0, 1], "worker-0": [2, 3]}
    # Parameter servers and the evaluator mostly wait: they run unpinned.
    assert core_sets(["chief", "worker-0", "ps-0", "evaluator-0"], [2, 3]) == {
        "chief": [2], "worker-0": [3]}
    # More training processes than cores: nothing pinned (sharing beats queueing).
    assert core_sets(["chief", "worker-0", "worker-1"], [0, 1]) == {}
