"""Worker-pool layouts beyond the default, run from the compiled spec on an emulated Vertex
AI of their own (`tests.support.vertex_emulator.emulated_runs`)."""

from __future__ import annotations

import json

import pytest
from google.cloud import aiplatform_v1

from components import images
from components.ops import names
from tests.support.vertex_emulator.emulated_runs import built, emulated_vertex

pytestmark = pytest.mark.slow


def test_a_parameter_server_layout_trains_with_tf_config_as_vertex_sets_it(tmp_path):
    gpu = {"machine_type": "n1-standard-8", "accelerator_type": "NVIDIA_TESLA_T4",
           "accelerator_count": 1}
    # The seeds' layout with one worker (two workers and an evaluator on small splits:
    # test_local_cluster's seeds' layout test).
    layout = [{"machine_spec": gpu, "replica_count": 1},
              {"machine_spec": gpu, "replica_count": 1},
              {"machine_spec": {"machine_type": "n1-highmem-8"}, "replica_count": 1}]
    with emulated_vertex(tmp_path) as submit:
        # vertex.promotion never: decided and reported, nothing registered.
        # Transfer learning's two phases under ParameterServerStrategy (a backbone frozen
        # for phase 1, its top unfrozen and re-compiled for phase 2, on the coordinator).
        run = submit({"worker_pool_specs": layout, "promotion": "never"},
                     {"model": "mobilenet_v3_small", "epochs": 1, "fine_tune_epochs": 1,
                      "batch_size": 32})
        tasks, apis = run["tasks"], run["apis"]
        assert tasks["validate-gpu-config"].parameters["strategy"] == "parameter_server"
        assert tasks["validate-gpu-config"].parameters["input_pipelines"] == 1
        (sent,) = apis.recorded(r"/customJobs$")
        job = aiplatform_v1.CustomJob.from_json(json.dumps(sent.body))
        assert [p.replica_count for p in job.job_spec.worker_pool_specs] == [1, 1, 1]
        ps_pool = job.job_spec.worker_pool_specs[2]
        assert not ps_pool.machine_spec.accelerator_count
        # The CPU image, whose entry point is Beam's boot program: the pool names the
        # trainer (without it the replica exits as the boot program does, failing the job).
        assert ps_pool.container_spec.image_uri == built(apis, images.CPU)
        assert list(ps_pool.container_spec.command) == list(images.TRAINER_COMMAND)
        record = next(iter(apis.jobs.values()))
        assert record.state == "JOB_STATE_SUCCEEDED"
        configs = [json.loads(r.env["TF_CONFIG"]) for r in record.replicas]
        assert [(c["task"]["type"], c["task"]["index"]) for c in configs] == \
            [("chief", 0), ("worker", 0), ("ps", 0)]
        assert {k: len(v) for k, v in configs[0]["cluster"].items()} == \
            {"chief": 1, "worker": 1, "ps": 1}
        chief_log = record.replicas[0].log.read_text()
        assert "parameter_server with 2 training machine(s), 1 parameter server(s)" in chief_log
        # The seeds' layout's plan, on every replica: no all-reduce, no float16, no XLA.
        assert {(r.training_plan["strategy"], r.training_plan["all_reduce"],
                 r.training_plan["mixed_precision"], r.training_plan["xla"])
                for r in record.replicas} == {("parameter_server", "none", "off", False)}
        assert "training plan: xla: off (under ParameterServerStrategy" in chief_log
        assert "epoch 1/2:" in chief_log and "fine-tuning: " in chief_log
        assert "epoch 2/2:" in chief_log
        assert "serving at" in record.replicas[2].log.read_text()
        assert tasks[names.DECIDE_REGISTRATION].parameters["register"] is False
        assert "vertex.promotion is never" in tasks["export-model"].parameters["decision"]
        assert tasks["condition-2"].state == "SKIPPED" and "model-upload" not in tasks
        assert apis.recorded(r"/models:upload$") == []
        assert tasks["summarize-run"].state == "SUCCEEDED"
