"""TF_CONFIG as Vertex AI sets it, and the trainer's output locations."""

from __future__ import annotations

import json

import pytest

from components.training.local_cluster import cluster_environments
from trainer import paths
from trainer.gcs import to_mount_path
from trainer.cluster import ClusterConfigError, cluster_from_env, vertex_tf_config


def test_vertex_chief_and_workers():
    chief = cluster_from_env({"TF_CONFIG": vertex_tf_config("h:1", ["h:2", "h:3"], "chief", 0)})
    worker0 = cluster_from_env({"TF_CONFIG": vertex_tf_config("h:1", ["h:2", "h:3"], "worker", 0)})
    assert (chief.is_chief, chief.num_workers, chief.name) == (True, 3, "chief:0")
    # Worker index 0 is not the chief when the cluster has a chief (Vertex's pool 0).
    assert (worker0.is_chief, worker0.num_workers) == (False, 3)


def test_cluster_without_chief_and_without_tf_config():
    config = {"cluster": {"worker": ["h:1", "h:2"]}, "task": {"type": "worker", "index": 0}}
    assert cluster_from_env({"TF_CONFIG": json.dumps(config)}).is_chief
    single = cluster_from_env({})
    assert single.is_chief and single.num_workers == 1 and single.task_type is None


@pytest.mark.parametrize("raw", ["{not json", json.dumps(
    {"cluster": {"chief": ["h:1"]}, "task": {"type": "worker", "index": 0}})])
def test_invalid_tf_config(raw):
    with pytest.raises(ClusterConfigError):
        cluster_from_env({"TF_CONFIG": raw})


def test_paths():
    assert to_mount_path("gs://bucket/a/b") == "/gcs/bucket/a/b"
    assert to_mount_path("/tmp/x") == "/tmp/x"
    assert paths.model_dir("/job", {}) == "/job/model"
    assert paths.model_dir("/job", {"AIP_MODEL_DIR": "gs://b/m"}) == "/gcs/b/m"
    assert paths.model_dir("/job", {"AIP_MODEL_DIR": "gs://b/m"}, "/explicit") == "/explicit"


def test_local_cluster_environments_follow_vertex_roles():
    envs = cluster_environments(3, {"KEEP": "1"})
    configs = [json.loads(e["TF_CONFIG"]) for e in envs]
    assert [(c["task"]["type"], c["task"]["index"]) for c in configs] == \
        [("chief", 0), ("worker", 0), ("worker", 1)]
    cluster = configs[0]["cluster"]
    assert len(cluster["chief"]) == 1 and len(cluster["worker"]) == 2
    assert len(set(cluster["chief"] + cluster["worker"])) == 3  # distinct ports
    assert all(c["cluster"] == cluster for c in configs) and envs[0]["KEEP"] == "1"
    assert "TF_CONFIG" not in cluster_environments(1, {"TF_CONFIG": "stale"})[0]
