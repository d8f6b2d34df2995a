"""Rules that every layer shares, each with one home: an error's first line, a file written
in one step, the table of worker pools, the pool checks."""

from __future__ import annotations

import pytest

from trainer.common import files
from trainer.common.errors import first_line


def test_the_first_line_of_an_error_never_fails_on_an_empty_message():
    assert first_line(ValueError("")) == "ValueError"  # was an IndexError in two places
    assert first_line(OSError()) == "OSError"
    assert first_line(RuntimeError("\n\n  denied\nstack...")) == "denied"
    assert first_line("x" * 500, 20) == "x" * 17 + "..."


def test_an_unreadable_image_with_an_empty_error_is_skipped_with_a_reason(monkeypatch):
    from components.dataset import encode, sources
    from components.dataset.sources import base

    def unreadable(ref):
        raise PermissionError()  # an error without a message

    monkeypatch.setattr(base, "read_bytes", unreadable)
    index, data, reason, _, _ = encode._encode((3, "/data/cat/1.jpg", 32, "png",
                                                sources.LocalFolder))
    assert (index, data, reason) == (3, None, "cannot read (PermissionError)")


def test_a_file_is_replaced_whole_or_left_as_it_was(tmp_path):
    target = tmp_path / "manifest.json"
    files.write_json(target, {"a": 1})
    assert target.read_text() == '{\n  "a": 1\n}\n'
    with pytest.raises(RuntimeError), files.replaced(target) as partial:
        partial.write_text("half")
        raise RuntimeError("crash while writing")
    assert target.read_text() == '{\n  "a": 1\n}\n'  # the old file, no debris beside it
    assert sorted(p.name for p in tmp_path.iterdir()) == ["manifest.json"]
    with files.replaced(tmp_path / "spec.yaml") as partial:
        assert partial.suffix == ".yaml" and partial.parent == tmp_path  # tools read the suffix
        partial.write_text("x: 1\n")
    assert (tmp_path / "spec.yaml").read_text() == "x: 1\n"


def test_one_table_names_the_worker_pools_for_every_layer():
    from components.gpu import ai_platform_pools as ai_platform
    from components.gpu import validation
    from components.training import local_cluster
    from trainer.cluster.roles import POOLS, ROLES, Layout

    assert ROLES == ("chief", "worker", "ps", "evaluator")
    assert validation.POOL_ROLES == ("chief", "worker", "parameter server", "evaluator")
    assert ai_platform._TASKS == (("master", 0), ("worker", 1), ("parameterServer", 2),
                                  ("evaluator", 3))
    envs = local_cluster.cluster_environments(Layout(workers=1, parameter_servers=1,
                                                     evaluators=1), {})
    import json

    spec = json.loads(envs[0][1]["CLUSTER_SPEC"])
    assert sorted(spec["cluster"]) == [f"workerpool{p.index}" for p in POOLS]


def test_the_config_the_stage_and_validate_gpu_run_the_same_pool_checks(capsys):
    from components.gpu.pools import check_pools
    from pipelines.cli import main
    from pipelines.config import ConfigError
    from pipelines.config_loading import load_config

    gpu = {"machine_type": "n1-standard-8", "accelerator_type": "NVIDIA_TESLA_T4",
           "accelerator_count": 1}
    pools = [{"machine_spec": gpu, "replica_count": 1}, {"machine_spec": gpu, "replica_count": 1},
             {}, {"machine_spec": gpu, "replica_count": 2}]  # two evaluators
    result = check_pools(pools, region="us-central1")
    assert not result.ok and any("evaluator" in e for e in result.errors)
    with pytest.raises(ConfigError) as raised:
        load_config(overrides={"vertex": {"worker_pool_specs": pools}})
    assert result.errors[0] in str(raised.value)
    import json
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".json") as spec:
        json.dump(pools, spec)
        spec.flush()
        assert main(["validate-gpu", "--config", spec.name, "--region", "us-central1"]) == 1
    assert result.errors[0] in capsys.readouterr().out
