"""A run with a study, on an emulated Vertex AI of its own
(`tests.support.vertex_emulator.emulated_runs`): gcpc's tuning job and its trials, the
dataset prepared as a Dataflow job, a stock-out and a queue moving the training on to a
fallback, and the key every create carries under the CMEK org policy."""

from __future__ import annotations

import hashlib
import json

import pytest
from google.cloud import aiplatform_v1

from components import images
from tests.support.vertex_emulator.apis import kms_key_name
from tests.support.vertex_emulator.emulated_runs import (
    ACCOUNT,
    KEY,
    N1_8,
    REPO,
    T4_USD,
    allow_key,
    emulated_vertex,
)

pytestmark = pytest.mark.slow

STUDY = {"max_trials": 2, "parallel_trials": 1, "max_failed_trials": 1,
         "algorithm": "RANDOM_SEARCH", "parameters": [
             {"name": "learning_rate", "type": "DOUBLE", "min_value": 0.0005,
              "max_value": 0.01, "scale": "UNIT_LOG_SCALE"},
             {"name": "batch_size", "type": "DISCRETE", "values": [16, 32]}]}
L4 = {"machine_type": "g2-standard-8", "accelerator_type": "NVIDIA_L4", "accelerator_count": 1}
T4 = {"machine_type": "n1-standard-8", "accelerator_type": "NVIDIA_TESLA_T4",
      "accelerator_count": 1}


@pytest.fixture(scope="module")
def tuned_run(tmp_path_factory):
    """A run under the org policy that requires a customer-managed key: a study first, the
    dataset prepared by the Beam engine as a Dataflow job, and the model deployed to an
    endpoint the deploy stage creates. By the time the study ends, us-central1 has no
    n1-standard-8 machines left, and the first fallback's n1-standard-16 machines stay
    QUEUED past `vertex.queue_limit`: the training step trains on the second fallback's L4
    machines (`vertex.fallbacks`; all in the key's region)."""
    pools = [{"machine_spec": L4, "replica_count": 1}] * 2
    larger = [{"machine_spec": {**T4, "machine_type": "n1-standard-16"},
               "replica_count": 1}] * 2
    fallbacks = [{"worker_pool_specs": larger}, {"worker_pool_specs": pools}]
    with emulated_vertex(tmp_path_factory.mktemp("vertex")) as run:
        allow_key(run.apis)
        run.apis.stockouts = {("n1-standard-8", "us-central1")}
        run.apis.queued = {("n1-standard-16", "us-central1")}
        yield run({"fallbacks": fallbacks, "queue_limit": "3s", "encryption_key": KEY,
                   "accuracy_threshold": 0.0,
                   "deploy": {"endpoint": "keyed", "grace_period": "0s"}},
                  {"epochs": 1}, STUDY, {"engine": "beam"}, cmek=True)


def test_a_study_runs_as_a_tuning_job_and_its_best_trial_is_trained(tuned_run):
    """The compiled spec with a study runs gcpc's HyperparameterTuningJobRunOp, whose
    trials run the real trainer and report with cloudml-hypertune; our component reads the
    job back and the final CustomJob trains with the best trial's parameters."""
    apis = tuned_run["apis"]
    tuned = tuned_run
    tasks = tuned["tasks"]
    assert {"vertex-tuning-spec", "hyperparameter-tuning-job", "best-vertex-trial",
            "train-on-vertex-ai", "export-model"} <= {
        name for name, task in tasks.items() if task.state == "SUCCEEDED"}

    (sent,) = apis.recorded(r"/hyperparameterTuningJobs$")
    job = aiplatform_v1.HyperparameterTuningJob.from_json(json.dumps(sent.body))
    (metric,) = job.study_spec.metrics
    assert (metric.metric_id, metric.goal.name) == ("val_accuracy", "MAXIMIZE")
    rate, batch = job.study_spec.parameters
    assert (rate.parameter_id, rate.double_value_spec.min_value,
            rate.double_value_spec.max_value, rate.scale_type.name) == (
        "learning_rate", 0.0005, 0.01, "UNIT_LOG_SCALE")
    assert (batch.parameter_id, list(batch.discrete_value_spec.values)) == (
        "batch_size", [16.0, 32.0])
    assert job.study_spec.algorithm.name == "RANDOM_SEARCH"
    assert (job.max_trial_count, job.parallel_trial_count, job.max_failed_trial_count) == \
        (2, 1, 1)
    assert job.trial_job_spec.service_account == ACCOUNT
    pools = job.trial_job_spec.worker_pool_specs
    args = list(pools[0].container_spec.args)
    assert args[args.index("--hypertune-metric") + 1] == "val_accuracy"
    assert "@sha256:" in pools[0].container_spec.image_uri and \
        ":src-" not in pools[0].container_spec.image_uri
    assert job.trial_job_spec.base_output_directory.output_uri_prefix.startswith(
        "gs://pipelines/root/")

    # Every trial trained and reported; the best-trial component chose the best.
    resource = apis.tuning_jobs[next(iter(apis.tuning_jobs))]
    assert resource["state"] == "JOB_STATE_SUCCEEDED" and len(resource["trials"]) == 2
    measured = {t["id"]: t["finalMeasurement"]["metrics"][0]["value"]
                for t in resource["trials"] if t["state"] == "SUCCEEDED"}
    assert len(measured) == 2
    best_id = max(measured, key=measured.get)
    chosen = tasks["best-vertex-trial"].parameters
    assert chosen["record"]["best_trial"] == best_id
    best = {p["parameterId"]: p["value"] for p in next(
        t for t in resource["trials"] if t["id"] == best_id)["parameters"]}
    assert chosen["training"]["learning_rate"] == pytest.approx(best["learning_rate"])
    assert chosen["training"]["batch_size"] == int(best["batch_size"])
    # What the study cost: both trials billed, on the trials' two n1-standard-8 machines
    # with a T4 each, at the catalog's prices.
    cost = chosen["record"]["cost"]
    seconds = sum(t["seconds"] for t in chosen["record"]["trials"])
    assert (cost["billed_trials"], cost["unpriced"]) == (2, [])
    assert cost["usd"] == pytest.approx(2 * (N1_8 + T4_USD) * seconds / 3600, abs=1e-4)
    assert f"tuning cost: about {cost['usd']:.2f} USD for 2 billed trial(s) of 2" in \
        tasks["best-vertex-trial"].log.read_text()
    # The run's own cost.json finds the study by the run's label and itemises it as well.
    run_cost = json.loads(tuned["mount"].path(
        tasks["summarize-run"].artifacts["cost"]["uri"]).read_text())
    (study,) = [i for i in run_cost["items"] if i["kind"] == "tuning"]
    assert study["name"] == resource["name"] and study["basis"] == "2 billed trial(s) of 2"
    assert study["unpriced"] == [] and study["usd"] > 0

    # The final CustomJob trained with them, and the model's lineage says so.
    final = apis.recorded(r"/customJobs$")[-1]
    train_args = final.body["jobSpec"]["workerPoolSpecs"][0]["containerSpec"]["args"]
    assert float(train_args[train_args.index("--learning-rate") + 1]) == pytest.approx(
        best["learning_rate"])
    assert train_args[train_args.index("--batch-size") + 1] == str(int(best["batch_size"]))
    assert "--hypertune-metric" not in train_args
    trials_md = tasks["best-vertex-trial"].artifacts["trials"]
    storage = tuned["storage"]
    bucket, _, name = trials_md["uri"][len("gs://"):].partition("/")
    assert f"| {best_id} **best** |" in storage.bucket(bucket).blob(name).download_as_text()
    export = tasks["export-model"].parameters
    assert "tuned: best of 2 trials by val_accuracy" in export["description"]


def test_a_stock_out_and_a_queue_move_on_to_the_next_fallback_and_say_so(tuned_run):
    """The primary configuration's CustomJob fails without ever running ("Resources are
    insufficient in region"); the first fallback's stays QUEUED past the queue limit and is
    cancelled; the launcher creates the second fallback's, which trains with its own plan,
    and the training step, the report, the lineage and the model's description name the
    alternative that trained and why the others did not."""
    apis, tasks = tuned_run["apis"], tuned_run["tasks"]
    primary, queued, fallback = [aiplatform_v1.CustomJob.from_json(json.dumps(r.body))
                                 for r in apis.recorded(r"/customJobs$")[-3:]]
    assert primary.job_spec.worker_pool_specs[0].machine_spec.machine_type == "n1-standard-8"
    assert fallback.job_spec.worker_pool_specs[0].machine_spec.machine_type == "g2-standard-8"
    assert primary.display_name == queued.display_name == fallback.display_name  # one run's
    assert primary.job_spec.base_output_directory == fallback.job_spec.base_output_directory
    assert [dict(j.labels)["gpu-pipeline-alternative"] for j in (primary, queued, fallback)] \
        == ["0", "1", "2"]
    failed, cancelled, trained = list(apis.jobs.values())[-3:]
    assert (failed.state, failed.error_code, failed.replicas) == ("JOB_STATE_FAILED", 8, [])
    assert queued.job_spec.worker_pool_specs[0].machine_spec.machine_type == "n1-standard-16"
    assert (cancelled.name.split("/")[3], cancelled.settled(), cancelled.replicas) == (
        "us-central1", "JOB_STATE_CANCELLED", [])
    assert trained.state == "JOB_STATE_SUCCEEDED"
    # The fallback's replicas applied its own plan: L4 machines, bfloat16.
    assert {(r.training_plan["accelerator"], r.training_plan["mixed_precision"])
            for r in trained.replicas} == {("NVIDIA_L4", "bfloat16")}
    capacity = tasks["train-on-vertex-ai"].parameters["capacity"]
    assert capacity["trained_on"] == "fallbacks[1]"
    assert [(a["label"], a["outcome"]) for a in capacity["attempts"]] == \
        [("primary", "stock-out"), ("fallbacks[0]", "queued"), ("fallbacks[1]", "trained")]
    assert "Resources are insufficient in region: us-central1" in \
        capacity["attempts"][0]["reason"]
    # Every job the step created is named in gcp_resources, in the order created.
    named = json.loads(tasks["train-on-vertex-ai"].parameters["gcp_resources"])["resources"]
    assert [r["resourceUri"].split("/v1/")[1] for r in named] == [
        failed.name, cancelled.name, trained.name]
    log = tasks["train-on-vertex-ai"].log.read_text()
    assert "capacity: primary in us-central1: stock-out" in log
    assert "capacity: fallbacks[0] in us-central1: queued" in log
    assert "training: trained on fallbacks[1] (1 x g2-standard-8 + 1 x NVIDIA_L4" in log
    # Stage 1 validated and planned the fallbacks; the export names what trained.
    stage1 = tasks["validate-gpu-config"].parameters["alternatives"]
    assert [a["label"] for a in stage1] == ["primary", "fallbacks[0]", "fallbacks[1]"]
    export = tasks["export-model"]
    assert export.executor_input["inputs"]["parameterValues"]["worker_pool_specs"][0][
        "machine_spec"]["accelerator_type"] == "NVIDIA_L4"
    assert "trained on fallbacks[1]" in export.parameters["description"]
    assert "before it: primary in us-central1 stock-out; fallbacks[0] in us-central1 queued" \
        in export.parameters["description"]
    assert export.parameters["labels"]["trained-on"] == "fallbacks-1"
    # Submit held the configurations against the quotas Cloud Quotas reported.
    assert apis.recorded(r"/quotaInfos$", method="GET")


def test_the_beam_engine_prepares_the_dataset_as_a_dataflow_job(tuned_run):
    """`dataset.engine: beam`: the stage submits with Beam's own DataflowRunner (the fake
    Dataflow API runs the staged pipeline), for the run's project and region, on the CPU
    image the build stage made, as the run's service account, with temp and staging
    under the pipeline root; the workers write the shards to Cloud Storage, and the
    training that follows reads them."""
    from google.cloud import dataflow_v1beta3

    from components.dataset.dataflow import job_name_for

    tasks, fake = tuned_run["tasks"], tuned_run["dataflow"]
    cpu = tasks["build-images"].parameters["Output"][images.CPU.key]["reference"]
    assert cpu.startswith(f"{REPO}/{images.CPU.name}@sha256:")
    assert tasks["dataflow-launch"].parameters["Output"] == {
        "project_id": "my-proj", "region": "us-central1", "service_account": ACCOUNT,
        "sdk_image": cpu, "kms_key": KEY}
    assert fake.run_error is None
    (body,) = fake.created()
    (path,) = [p for method, p, _ in fake.requests if method == "POST"]
    assert path.split("?")[0] == "/v1b3/projects/my-proj/locations/us-central1/jobs"
    job = dataflow_v1beta3.Job.from_json(json.dumps(body), ignore_unknown_fields=True)
    dataset_uri = tasks["prepare-dataset"].artifacts["dataset"]["uri"]
    base = dataset_uri.rsplit("/", 1)[0]
    assert job.name == job_name_for(dataset_uri)
    environment = job.environment
    assert environment.service_account_email == ACCOUNT
    assert environment.temp_storage_prefix.startswith(
        f"storage.googleapis.com/{base[len('gs://'):]}/dataflow/temp")
    (pool,) = environment.worker_pools
    assert pool.worker_harness_container_image == cpu
    assert (pool.machine_type, pool.autoscaling_settings.max_num_workers) == \
        ("n2-standard-4", 10)
    assert body["environment"]["sdkPipelineOptions"]["options"]["staging_location"] \
        .startswith(f"{base}/dataflow/staging/{job.name}.")
    assert [j.state for j in fake.jobs.values()] == ["JOB_STATE_DONE"]
    log = tasks["prepare-dataset"].log.read_text()
    assert f"Dataflow job {job.name} (2026-job-1) in us-central1" in log
    assert "Dataflow job 2026-job-1: JOB_STATE_DONE" in log
    assert "prepared by the beam engine as a Dataflow job" in log
    # The shards are the workers' objects (the stage wrote only the report and the
    # manifest, through the mount), and training read them.
    storage = tuned_run["storage"]
    bucket, _, prefix = dataset_uri[len("gs://"):].partition("/")
    manifest = json.loads(storage.bucket(bucket).blob(f"{prefix}/manifest.json")
                          .download_as_bytes())
    assert manifest["examples"] > 0 and set(manifest["splits"]) == {"train", "validation",
                                                                    "test"}
    for entry in manifest["splits"].values():
        for shard in entry["shards"]:
            data = storage.bucket(bucket).blob(f"{prefix}/{shard['file']}").download_as_bytes()
            assert hashlib.sha256(data).hexdigest() == shard["sha256"]
    assert tasks["train-on-vertex-ai"].state == "SUCCEEDED"
    # What the job used, as its JobMetrics said when it ended: in the dataset's metadata,
    # which the run's cost.json reads through GetPipelineJob (no DATAFLOW: prices given).
    used = tasks["prepare-dataset"].artifacts["dataset"]["metadata"]["dataflow_job"]
    assert used["job"] == "2026-job-1" and used["vcpu_hours"] > 0
    assert "Dataflow job 2026-job-1 used " in log
    run_cost = json.loads(tuned_run["mount"].path(
        tasks["summarize-run"].artifacts["cost"]["uri"]).read_text())
    (item,) = [i for i in run_cost["items"] if i["kind"] == "dataflow"]
    assert item["name"] == "Dataflow job 2026-job-1 (us-central1)" and item["hours"] > 0
    assert (item["usd"], item["unpriced"]) == (0.0, [
        "DATAFLOW:VCPU", "DATAFLOW:MEMORY_GB", "DATAFLOW:DISK_GB"])
    assert f"{used['vcpu_hours']:.3f} vCPU-hours" in item["basis"]


def test_under_the_cmek_org_policy_the_study_dataflow_and_the_endpoint_carry_the_key(
        tuned_run):
    """The second run ran under the org policy too: the tuning job (gcpc's), the Dataflow
    job (Beam's DataflowRunner, from --dataflow_kms_key) and the endpoint the deploy stage
    created each carried the key, or the emulated services would have refused them."""
    apis, fake = tuned_run["apis"], tuned_run["dataflow"]
    assert tuned_run["request"].pipeline_job.encryption_spec.kms_key_name == KEY
    (study,) = [r.body for r in apis.recorded(r"/hyperparameterTuningJobs$")
                if r.method == "POST"]
    assert kms_key_name(study) == KEY
    (job,) = fake.created()
    assert job["environment"]["serviceKmsKeyName"] == KEY
    (endpoint,) = [r.body for r in apis.recorded(r"/endpoints$") if r.method == "POST"]
    assert (endpoint["displayName"], kms_key_name(endpoint)) == ("keyed", KEY)
    training = [r.body for r in apis.recorded(r"/customJobs$") if r.method == "POST"][-3:]
    assert all(kms_key_name(body) == KEY for body in training)
    assert tuned_run["tasks"]["train-on-vertex-ai"].state == "SUCCEEDED"
