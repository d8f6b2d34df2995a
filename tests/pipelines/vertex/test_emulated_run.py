"""The compiled Vertex AI spec, run end to end against an emulated Vertex AI on loopback.

`gpu-pipeline submit`'s own code uploads the sources (Cloud Storage emulator), builds the
image (Cloud Build and Artifact Registry clients against the fake APIs) and sends the
CreatePipelineJobRequest; the emulation then runs that request's spec task by task, with
Google's own launchers for the CustomJob and the model upload. Every request is checked
as the aiplatform_v1 type it is, and the registered model is served by the real serving
container. The run with a study is `test_emulated_tuning`'s, the parameter-server layout
`test_emulated_layouts`'s: each module has its emulation, and `make test`'s processes
run them side by side.
"""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import sys
import time
import urllib.request

import pytest
from google.auth.credentials import AnonymousCredentials
from google.cloud import aiplatform_v1
from google.cloud.devtools import cloudbuild_v1

from components import images
from components.capacity.budget import BudgetError
from components.ops import names
from pipelines.config_loading import load_config
from pipelines.vertex import runs
from tests.support.facts import figures as numbers
from tests.support.paths import ROOT
from tests.support.vertex_emulator.apis import kms_key_name
from tests.support.vertex_emulator.emulated_runs import (
    ACCOUNT,
    BIN,
    CATALOG_PRICES,
    E2_4,
    KEY,
    LABELS,
    N1_8,
    PREDICTION_N1_4,
    REPO,
    STORE,
    TENSORBOARD,
    allow_key,
    built,
    emulated_vertex,
    in_region,
)
from tests.support.vertex_emulator.endpoints import Behaviour
from tests.support.vertex_emulator.pipelines import TaskFailed

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def emulated_run(tmp_path_factory):
    """The default layout (a chief and a worker, MultiWorkerMirroredStrategy), a new model;
    while it trains, three looks at its CustomJob meet 503s and one a dropped connection.
    `run` submits more runs to the same emulated Vertex AI."""
    with emulated_vertex(tmp_path_factory.mktemp("vertex")) as run:
        bucket = run.storage.bucket("pipelines")
        for name, data in _batch_images().items():
            bucket.blob(f"to-score/{name}").upload_from_string(data)
        # Under the org policy that requires a customer-managed key on every create, with
        # the key usable by Vertex AI's service agent.
        allow_key(run.apis)
        # The persistent resource the first run trains on, made with the run's key.
        run.apis.persistent_resources[
            "projects/my-proj/locations/us-central1/persistentResources/fast-pool"] = {
            "encryptionSpec": {"kmsKeyName": KEY}}
        run.apis.metadata.tensorboards.add(TENSORBOARD)
        first = run({"labels": LABELS, "persistent_resource_id": "fast-pool",
                     "tensorboard": TENSORBOARD,
                     "batch_predict": {"source": "gs://pipelines/to-score/"},
                     "prices": {"NVIDIA_TESLA_T4": 0.35}, "encryption_key": KEY},
                    {"epochs": 3, "batch_size": 32}, faults=("503", "503", "503", "drop"),
                    cmek=True)
        yield {**first, "run": run}


def test_under_the_cmek_org_policy_every_create_carries_the_key(emulated_run):
    """The first run ran under constraints/gcp.restrictNonCmekServices (the emulator
    refuses any create without a key): the PipelineJob, the CustomJob, the model upload
    (gcpc's launcher) and the batch prediction job (gcpc's) each named the key."""
    apis = emulated_run["apis"]
    assert emulated_run["request"].pipeline_job.encryption_spec.kms_key_name == KEY
    creates = {pattern: [r for r in apis.recorded(pattern)]
               for pattern in (r"/customJobs$", r"/models:upload$", r"/batchPredictionJobs$")}
    first = {pattern: found[0].body for pattern, found in creates.items()}
    assert first[r"/customJobs$"]["encryptionSpec"] == {"kmsKeyName": KEY}  # ours, REST
    # gcpc's launchers send the proto field names, which Vertex AI's JSON parser reads too.
    assert kms_key_name(first[r"/models:upload$"]["model"]) == KEY
    assert kms_key_name(first[r"/batchPredictionJobs$"]) == KEY


def _batch_images() -> dict[str, bytes]:
    """What the first run's batch step scores: three PNGs and a file that is no image."""
    import numpy as np
    import tensorflow as tf

    pixels = np.random.default_rng(7).integers(0, 256, (3, 32, 32, 3), dtype=np.uint8)
    found = {f"{n}.png": tf.io.encode_png(image).numpy() for n, image in enumerate(pixels)}
    return {**found, "more/broken.png": b"not an image"}


def test_every_stage_ran_from_the_compiled_spec(emulated_run):
    tasks = emulated_run["tasks"]
    ran = {name for name, task in tasks.items() if task.state == "SUCCEEDED"}
    assert {"validate-gpu-config", "fingerprint-dataset-source", "prepare-dataset",
            "build-images", "train-on-vertex-ai", "importer",
            "report-training", "export-model", names.DECIDE_REGISTRATION, "importer-2",
            "model-upload", "exit-handler-1", "summarize-run"} <= ran
    # A new model (no parent_model): the new-version branch did not run.
    branches = {t.display_name: t.state for t in tasks.values() if t.name.startswith("condition")}
    # No endpoint configured: no deploy stage in either branch; the new default scores
    # the batch source.
    assert branches == {"gate-registers": "SUCCEEDED", "condition-branches-3": "SUCCEEDED",
                        "new-model": "SUCCEEDED", "new-version": "SKIPPED",
                        "gate-deploys": "SKIPPED", "no-endpoint": "SUCCEEDED",
                        "gate-promotes": "SUCCEEDED", "batch-source-set": "SUCCEEDED",
                        "batch-configured": "SUCCEEDED"}
    # The exit handler's task got the run's final status as Vertex AI passes it.
    status = tasks["summarize-run"].executor_input["inputs"]["parameterValues"]["status"]
    assert status["state"] == "SUCCEEDED" and status["pipelineJobResourceName"] == \
        emulated_run["request"].parent + "/pipelineJobs/" + emulated_run["request"].pipeline_job_id
    summary = tasks["summarize-run"].log.read_text()
    assert "[gpu-pipeline] run state: SUCCEEDED" in summary
    # aiplatform's submit asked Resource Manager who owns the pipeline root's bucket.
    assert emulated_run["apis"].recorded(r"^/v3/projects/my-proj$", method="GET")
    assert "model-upload-2" not in tasks
    # Parameters reached the stages through protobuf Struct: numbers are doubles.
    executor_input = tasks["validate-gpu-config"].executor_input
    assert executor_input["inputs"]["parameterValues"]["vertex"]["worker_pool_specs"][0][
        "replica_count"] == 1
    prepared = tasks["prepare-dataset"].artifacts["dataset"]
    assert prepared["uri"].startswith("gs://pipelines/root/") and \
        prepared["uri"].endswith("/prepare-dataset/dataset")
    assert tasks["prepare-dataset"].executor_input["inputs"]["parameterValues"][
        "input_pipelines"] == 2  # from the validation stage's output, at run time


def test_the_promoted_model_scores_the_batch_source_as_a_batch_prediction_job(emulated_run):
    """A new model is the default at once (no endpoint): the batch step writes the
    source's images as keyed JSONL instances, and gcpc's ModelBatchPredictOp runs them as
    a BatchPredictionJob of the registered version."""
    tasks, apis = emulated_run["tasks"], emulated_run["apis"]
    (sent,) = apis.recorded(r"/batchPredictionJobs$")
    job = sent.body
    upload = tasks["model-upload"].artifacts["model"]["metadata"]["resourceName"]
    assert job["model"] == upload and job["displayName"] == "batch of the champion"
    ran = {t.display_name: t for t in tasks.values() if t.state == "SUCCEEDED"}
    instances = ran["7a batch instances"].artifacts["instances"]["uri"]
    assert job["inputConfig"] == {"instancesFormat": "jsonl",
                                  "gcsSource": {"uris": [instances]}}
    assert job["instanceConfig"] == {"instanceType": "object", "keyField": "key"}
    assert job["outputConfig"] == {"predictionsFormat": "jsonl", "gcsDestination": {
        "outputUriPrefix": instances.rsplit("/", 1)[0] + "/predictions"}}
    assert job["dedicatedResources"]["machineSpec"] == {"machineType": "n1-standard-4"}
    assert job["manualBatchTuningParameters"] == {"batchSize": 16}
    assert job["serviceAccount"] == ACCOUNT
    lines = emulated_run["mount"].path(instances).read_text().splitlines()
    assert [json.loads(line)["key"] for line in lines] == [
        f"gs://pipelines/to-score/{name}" for name in ("0.png", "1.png", "2.png",
                                                      "more/broken.png")]
    scored = ran["7b batch predict"]
    directory = scored.artifacts["gcs_output_directory"]["uri"]
    results = [json.loads(line) for line in emulated_run["mount"].path(
        f"{directory}/prediction.results-00000-of-00001").read_text().splitlines()]
    assert [r["key"] for r in results] == [f"gs://pipelines/to-score/{n}.png" for n in range(3)]
    assert all(len(r["prediction"]["probabilities"]) == 4 for r in results)
    (refused,) = [json.loads(line) for line in emulated_run["mount"].path(
        f"{directory}/prediction.errors_stats-00000-of-00001").read_text().splitlines()]
    assert refused["key"] == "gs://pipelines/to-score/more/broken.png"


def test_the_run_says_where_its_gpu_time_and_money_went(emulated_run):
    """Every replica's series on the Cloud Storage mount, merged by the report step; the
    training step's cost estimate from the job Vertex AI ran, checked by hand."""
    from datetime import datetime

    tasks, apis = emulated_run["tasks"], emulated_run["apis"]
    job_dir = emulated_run["mount"].path(
        tasks["train-on-vertex-ai"].artifacts["training_job"]["uri"])
    figures = json.loads((job_dir / "efficiency.json").read_text())
    assert set(figures["replicas"]) == {"chief-0", "worker-0"}
    assert figures["cluster"]["missing_replicas"] == []
    for replica in figures["replicas"].values():
        assert [e["epoch"] for e in replica["epochs"]] == [1, 2, 3]
        assert replica["input_share"] is not None and replica["images_per_second"] > 0
        assert replica["gpu"]["unavailable"].startswith("NVML cannot start")  # no driver
    (job,) = apis.jobs.values()

    def at(field):
        return datetime.fromisoformat(job.resource[field].replace("Z", "+00:00")).timestamp()

    hours = (at("endTime") - at("startTime")) / 3600
    # Two n1-standard-8 machines (at the catalog's price) with a T4 (0.35 from the
    # configuration) each.
    usd = 2 * (N1_8 + 0.35) * hours
    estimate = json.loads((job_dir / "cost.json").read_text())
    assert estimate["usd"] == pytest.approx(usd, abs=1e-4)
    assert estimate["per_epoch_usd"] == pytest.approx(usd / 3, abs=1e-4)
    assert estimate["unpriced"] == [] and estimate["jobs"][0]["job"] == job.name
    assert f"cost: about {estimate['usd']:.2f} USD for 1 job(s)" in \
        tasks["train-on-vertex-ai"].log.read_text()
    report = tasks["report-training"].log.read_text()
    assert "efficiency: chief-0: " in report and "efficiency: worker-0: " in report
    assert "efficiency: cost: about" in report
    metrics = tasks["report-training"].artifacts["metrics"]["metadata"]
    assert metrics["images_per_second"] > 0 and "input_share" in metrics
    # Cloud Monitoring's accelerator series of the job, one sample a minute from its start
    # (every other one 0.1 lower in the emulation), beside the replicas' own figures.
    samples = len(range(int(at("startTime")), int(at("endTime")) + 1, 60))
    busy = (87 * ((samples + 1) // 2) + 77 * (samples // 2)) / samples
    monitored = figures["cloud_monitoring"]
    assert set(monitored["replicas"]) == {"chief-0", "worker-0"}
    for replica in monitored["replicas"].values():
        assert replica["utilization"] == {"mean_percent": round(busy, 1),
                                          "max_percent": 87.0, "samples": samples}
    assert metrics["cloud_monitoring_gpu_percent"] == round(busy, 1)
    assert f"efficiency: Cloud Monitoring: worker-0: GPU busy {busy:.0f}% (highest 87%" \
        in report
    (query,) = [r.query for r in apis.recorded(r"^/v3/projects/[^/]+/timeSeries$", method="GET")
                if "training/accelerator/utilization" in r.query["filter"][0]]
    assert f'resource.labels.job_id="{job.name.rsplit("/", 1)[-1]}"' in query["filter"][0]


def _priced_config(training: dict):
    """A configuration of the emulated project whose T4 costs 0.35 USD an hour."""
    return load_config(overrides={
        "vertex": {"project": "my-proj", "region": "us-central1",
                   "pipeline_root": "gs://pipelines/root", "image_repository": REPO,
                   "service_account": ACCOUNT, "job_name": "emulated",
                   "prices": {"NVIDIA_TESLA_T4": 0.35}},
        "training": training})


def test_a_dry_run_estimates_the_cost_from_the_newest_model_s_measured_speed(emulated_run):
    """`submit --dry-run` reads the newest registered model's efficiency.json and
    lineage.json (beside it in Cloud Storage) and prices the configured epochs on the
    primary configuration, the machines that trained it."""
    lines: list[str] = []
    config = _priced_config({"epochs": 4})
    runs.submit(config, dry_run=True, clients=emulated_run["clients"],
                credentials=AnonymousCredentials(), log=lines.append)
    rate = 2 * (N1_8 + 0.35)  # two n1-standard-8 machines with a T4 each
    head = next(i for i, line in enumerate(lines) if line.startswith("cost estimate ("))
    assert lines[head] == "cost estimate (without tuning trials, queueing and provisioning):"
    found = re.fullmatch(rf"  primary \(us-central1\): {rate:.2f} USD an hour, about "
                         r"([0-9.]+) [hs] \(4 epoch\(s\) at (\d+) s, as (\S+) measured on these "
                         r"machines\): "
                         rf"([0-9.]+) USD \({CATALOG_PRICES}( \(cached\))?; vertex\.prices over "
                         r"them\)", lines[head + 1])
    assert found, lines[head + 1]
    model, _, version = found[3].partition("@")
    uploaded = next(m for m in emulated_run["apis"].models
                    if (m["model"], m["version"]) == (model, version))
    uri = uploaded["request"]["model"]["artifact_uri"]
    bucket, _, path = uri[len("gs://"):].partition("/")
    figures = json.loads(emulated_run["storage"].bucket(bucket).blob(
        f"{path}/efficiency.json").download_as_text())
    per_epoch = figures["cluster"]["train_seconds"] / 3  # the first run's 3 epochs
    assert int(found[2]) == round(per_epoch)
    estimate = float(found[4])
    assert estimate == pytest.approx(rate * 4 * per_epoch / 3600, abs=0.006)
    # A budget under that estimate: refused before anything is created (no request
    # reaches the emulated APIs but the registry's reads), one line naming both.
    before = len(emulated_run["apis"].requests)
    over = config.model_copy(update={"vertex": config.vertex.model_copy(
        update={"budget_usd": 0.0001})})
    with pytest.raises(BudgetError) as refused:
        runs.submit(over, dry_run=False, clients=emulated_run["clients"],
                    credentials=AnonymousCredentials(), log=lines.append)
    first, primary, _ = str(refused.value).splitlines()
    assert first == "vertex.budget_usd is 0.0001 USD and no configuration fits it:"
    assert primary.startswith("  - primary (us-central1): about ") and \
        f"({rate:.2f} USD an hour" in primary
    assert all(r.method == "GET" for r in emulated_run["apis"].requests[before:])


def test_the_custom_job_request_and_the_environment_of_its_replicas(emulated_run):
    apis = emulated_run["apis"]
    (sent,) = apis.recorded(r"/customJobs$")
    assert sent.host == "us-central1-aiplatform.googleapis.com"
    assert sent.path == "/v1/projects/my-proj/locations/us-central1/customJobs"
    job = aiplatform_v1.CustomJob.from_json(json.dumps(sent.body))
    assert re.fullmatch(r"emulated_\d{8}_\d{6}", job.display_name)
    spec = job.job_spec
    assert spec.service_account == ACCOUNT
    assert spec.scheduling.strategy == aiplatform_v1.Scheduling.Strategy.STANDARD
    assert spec.scheduling.restart_job_on_worker_restart
    # Cost tracking and fast starts: the job carries the labels, on the persistent resource;
    # the run's (as Vertex AI Pipelines passes them) and the step's besides the user's.
    assert dict(job.labels) == {**LABELS, **emulated_run["pipelines"].run_labels,
                                "gpu-pipeline-step": "training",
                                "gpu-pipeline-alternative": "0"}
    assert spec.persistent_resource_id == "fast-pool"
    assert dict(emulated_run["request"].pipeline_job.labels) == {"app": "gpu-pipeline",
                                                                 **LABELS}
    gpu_image = built(apis, images.GPU)
    assert [p.replica_count for p in spec.worker_pool_specs] == [1, 1]
    for pool in spec.worker_pool_specs:
        assert pool.machine_spec.machine_type == "n1-standard-8"
        assert pool.machine_spec.accelerator_type == \
            aiplatform_v1.AcceleratorType.NVIDIA_TESLA_T4
        # The built GPU image, by its digest alone (Vertex AI refuses tag and digest).
        assert pool.container_spec.image_uri == gpu_image
        assert list(pool.container_spec.command) == list(images.TRAINER_COMMAND)
        args = list(pool.container_spec.args)
        assert args[args.index("--epochs") + 1] == "3"
        assert args[args.index("--job-dir") + 1].startswith(emulated_run["mount"].prefix)
        assert args[args.index("--expected-gpus") + 1] == "1"
        # XLA's cache is kept per GPU type and image: each replica is told the image, and
        # where the runs' cache is (under the pipeline root, no location being set).
        assert {e.name: e.value for e in pool.container_spec.env} == \
            {"GPU_PIPELINE_IMAGE": gpu_image}
        assert args[args.index("--xla-cache") + 1] == "gs://pipelines/root/xla-cache/"
    base = spec.base_output_directory.output_uri_prefix
    assert base.startswith("gs://pipelines/root/")
    job_record = next(iter(apis.jobs.values()))
    assert job_record.state == "JOB_STATE_SUCCEEDED"
    chief, worker = job_record.replicas
    assert chief.expected_gpus == worker.expected_gpus == 1
    # Stage 1's training plan reached every replica of the pools: two T4 machines (XLA
    # not measured on a T4: off).
    for replica in (chief, worker):
        plan = replica.training_plan
        assert (plan["strategy"], plan["all_reduce"], plan["mixed_precision"], plan["xla"],
                plan["accelerator"], plan["gpus_per_machine"]) == (
            "multi_worker_mirrored", "nccl", "float16", False, "NVIDIA_TESLA_T4", 1)
    config = json.loads(chief.env["TF_CONFIG"])
    assert config["task"] == {"type": "chief", "index": 0, "trial": ""}
    assert set(config["cluster"]) == {"chief", "worker"} and config["environment"] == "cloud"
    assert json.loads(worker.env["TF_CONFIG"])["task"]["type"] == "worker"
    assert json.loads(chief.env["CLUSTER_SPEC"])["task"] == {"type": "workerpool0", "index": 0}
    assert chief.env["AIP_MODEL_DIR"] == f"{base}/model/"
    assert chief.env["AIP_CHECKPOINT_DIR"] == f"{base}/checkpoints/"
    assert chief.env["AIP_TENSORBOARD_LOG_DIR"] == f"{base}/logs/"
    log = chief.log.read_text()
    assert "model written to" in log and "cluster: task chief:0" in log


def test_a_replica_that_sees_fewer_gpus_than_its_pool_has_stops_before_training(emulated_run):
    """The CustomJob request's own command and arguments, on a machine whose GPUs TensorFlow
    cannot see (hidden here; on Vertex AI, an image whose CUDA libraries do not load): the
    replica exits with an error within seconds instead of training on the CPUs."""
    apis = emulated_run["apis"]
    (sent,) = apis.recorded(r"/customJobs$")
    pool = sent.body["jobSpec"]["workerPoolSpecs"][0]["containerSpec"]
    command = apis._command(pool["imageUri"]) + pool["args"]
    assert command[command.index("--expected-gpus") + 1] == "1"
    env = {**emulated_run["env"], "CUDA_VISIBLE_DEVICES": "",
           "TF_CONFIG": json.dumps({"cluster": {"chief": ["localhost:1"]},
                                    "task": {"type": "chief", "index": 0}})}
    started = time.monotonic()
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120,
                            cwd=emulated_run["work"])
    assert result.returncode == 1, result.stdout[-2000:] + result.stderr[-2000:]
    assert time.monotonic() - started < 120
    message = result.stderr.strip().splitlines()[-1]
    assert message.startswith("trainer: this machine should have 1 GPU(s) (--expected-gpus 1) "
                              "but TensorFlow sees 0: training would run on its CPUs.")
    assert "built for CUDA 12.5.1 and cuDNN 9" in message and "libcuda.so.1" in message
    assert "epoch" not in result.stdout.lower()


def test_the_training_step_follows_its_job_through_passing_errors(emulated_run):
    """Three 503s and a dropped connection while the job trained: the step looked again
    (with back-off) and the job ended SUCCEEDED, created once."""
    apis, task = emulated_run["apis"], emulated_run["tasks"]["train-on-vertex-ai"]
    assert len(apis.recorded(r"/customJobs$")) == 1 and apis.get_faults == []
    log = task.log.read_text()
    failures = re.findall(r"training: looking at \S+ failed \((\w+):", log)
    assert failures == ["ServiceUnavailable"] * 3 + ["ConnectionError"]
    assert next(iter(apis.jobs.values())).state == "JOB_STATE_SUCCEEDED"
    # gcp_resources names the job (gcpc's form), written as soon as it existed.
    (job,) = json.loads(task.parameters["gcp_resources"])["resources"]
    assert job == {"resourceType": "CustomJob", "resourceUri": "https://us-central1-aiplatform"
                   ".googleapis.com/v1/projects/my-proj/locations/us-central1/customJobs/1"}


def test_the_training_step_run_again_trains_nothing_twice(emulated_run):
    """The step runs again in a new pod (a retry, a resumed run): it finds the run's job by
    Vertex AI Pipelines' run labels, sees it trained, and returns its outputs."""
    apis = emulated_run["apis"]
    before = len(apis.recorded(r"/customJobs$"))
    again = emulated_run["pipelines"].rerun("train-on-vertex-ai")
    assert len(apis.recorded(r"/customJobs$")) == before  # no second job
    first = emulated_run["tasks"]["train-on-vertex-ai"].parameters
    assert again.parameters["model_uri"] == first["model_uri"]
    assert again.parameters["gcp_resources"] == first["gcp_resources"]
    listed = apis.recorded(r"/customJobs$", method="GET")[-1]
    billing = emulated_run["pipelines"].run_labels["vertex-ai-pipelines-run-billing-id"]
    assert listed.query["filter"] == [f'labels.vertex-ai-pipelines-run-billing-id="{billing}" '
                                      'AND labels.gpu-pipeline-step="training"']
    assert "the job an earlier run of this step created" in again.log.read_text()


def test_a_job_that_succeeds_having_written_nothing_leaves_its_step_green(emulated_run):
    """Another run's training step whose CustomJob ends SUCCEEDED having written nothing
    (its container wrote elsewhere): no job directory exists on the mount, and the step
    still writes its records there and exits 0 with the job's outputs."""
    apis, pipelines, mount = emulated_run["apis"], emulated_run["pipelines"], \
        emulated_run["mount"]
    under = f"{pipelines.job_root}-nothing-written/train-on-vertex-ai"
    apis.replica_command = ["true"]  # ends at once, writing nothing
    try:
        again = pipelines.rerun("train-on-vertex-ai", artifacts_under=under, run_labels={
            "vertex-ai-pipelines-run-billing-id": "4242"})  # finds no earlier job
    finally:
        apis.replica_command = None
    (resource,) = json.loads(again.parameters["gcp_resources"])["resources"]
    job = apis.jobs[resource["resourceUri"].split("/v1/", 1)[1]]
    assert job.state == "JOB_STATE_SUCCEEDED" and job.resource["jobSpec"][
        "baseOutputDirectory"]["outputUriPrefix"] == f"{under}/training_job"
    assert again.parameters["model_uri"] == f"{under}/training_job/model"
    cost = json.loads((mount.path(f"{under}/training_job") / "cost.json").read_text())
    assert [j["state"] for j in cost["jobs"]] == ["JOB_STATE_SUCCEEDED"]
    log = again.log.read_text()
    assert "not written" not in log and "Traceback" not in log


def test_the_build_stage_found_the_images_submit_built(emulated_run):
    apis = emulated_run["apis"]
    (build,) = apis.recorded(r"/builds$")  # once, by submit; the stage did not rebuild
    # In the job's region: Google's client names it in the routing header.
    assert build.path == "/v1/projects/my-proj/builds" and build.routing == \
        "location=us-central1"
    request = cloudbuild_v1.Build.from_json(json.dumps(build.body))
    assert request.service_account == f"projects/my-proj/serviceAccounts/{ACCOUNT}"
    assert request.options.logging == cloudbuild_v1.BuildOptions.LoggingMode.CLOUD_LOGGING_ONLY
    assert request.options.machine_type == cloudbuild_v1.BuildOptions.MachineType.E2_HIGHCPU_8
    assert [s.args[1:3] for s in request.steps] == [
        ["--file", "docker/gpu.Dockerfile"], ["--file", "docker/cpu.Dockerfile"]]
    # Whichever builder the step's image runs, each image's build runs only its own
    # installs: the legacy builder builds every stage of the file it is given.
    gpu, cpu = apis.built["build-gpu"], apis.built["build-cpu"]
    assert any("requirements/gpu.lock" in run for run in gpu) and \
        not any("cpu.lock" in run for run in gpu)
    assert any("requirements/cpu.lock" in run for run in cpu) and \
        not any("gpu.lock" in run or "apt_lock" in run for run in cpu)
    # The build stayed "not done" for a while: the client polled its operation until done.
    polls = apis.recorded(r"/operations/build-1$", method="GET")
    assert len(polls) >= 2
    lookups = apis.recorded(r"/tags/", method="GET")
    assert len(lookups) == 4  # submit's (both missing), then the stage's (both found)
    log = emulated_run["tasks"]["build-images"].log.read_text()
    assert log.count("not rebuilt") == 2
    # Every request the run sent named the project's images by digest alone.
    for image in images.PROJECT_IMAGES:
        assert apis.image_problem(built(apis, image)) is None


def test_the_model_upload_registers_a_complete_saved_model_with_the_project_image(emulated_run):
    apis = emulated_run["apis"]
    (upload,) = apis.recorded(r"/models:upload$")
    assert upload.host == "us-central1-aiplatform.googleapis.com"
    request = aiplatform_v1.UploadModelRequest.from_json(json.dumps(upload.body),
                                                         ignore_unknown_fields=True)
    model = request.model
    # Served by the CPU image, by digest alone.
    assert model.container_spec.image_uri == built(apis, images.CPU)
    assert list(model.container_spec.command) == [
        "python", "-m", "google.cloud.aiplatform.prediction.model_server"]
    env = {e.name: e.value for e in model.container_spec.env}
    assert env["PREDICTOR_MODULE"] == "trainer.serving.app"
    # The artifact URI is a committed, complete SavedModel, visible through gs://.
    storage = emulated_run["storage"]
    bucket, _, prefix = model.artifact_uri[len("gs://"):].partition("/")
    names = {b.name[len(prefix) + 1:] for b in storage.list_blobs(bucket, prefix=prefix + "/")}
    assert {"saved_model.pb", "variables/variables.index", "evaluation.json"} <= names
    marker = storage.bucket(bucket).blob(prefix.rsplit("/", 1)[0] + "/COMMITTED.json")
    assert json.loads(marker.download_as_bytes())["directory"] == prefix.rsplit("/", 1)[1]
    registered = emulated_run["tasks"]["model-upload"].artifacts["model"]
    assert registered["metadata"]["resourceName"].startswith(
        "projects/my-proj/locations/us-central1/models/")
    # Lineage as Model Registry labels (within the label rules) and in the description.
    labels = dict(model.labels)
    trainer_image = built(apis, images.GPU)
    assert labels["trainer-image"] == trainer_image.rsplit("@sha256:", 1)[1][:16]
    assert re.fullmatch(r"src-[0-9a-f]{16}", labels["image-tag"])
    assert labels["strategy"] == "multi_worker_mirrored" and labels["promoted"] == "true"
    assert labels["compared-metric"] == "test_accuracy" and labels["model"] == "cnn"
    assert re.fullmatch(r"[0-9a-z_-]{1,63}", labels["dataset-fingerprint"])
    assert all(re.fullmatch(r"[a-z][a-z0-9_-]{0,62}", k) and re.fullmatch(r"[a-z0-9_-]{0,63}", v)
               for k, v in labels.items())
    assert model.description.startswith("no champion yet; test_accuracy")
    assert "multi_worker_mirrored" in model.description
    lineage = json.loads(storage.bucket(bucket).blob(prefix + "/lineage.json")
                         .download_as_bytes())
    assert lineage["trainer_image"] == trainer_image
    assert lineage["images"]["cpu"]["reference"] == model.container_spec.image_uri
    assert lineage["image_tag"] == labels["image-tag"]
    assert lineage["cluster"]["strategy"] == "multi_worker_mirrored"


def test_directory_renames_fail_on_the_stand_in_mount(emulated_run):
    mount = emulated_run["mount"]
    (mount.root / "pipelines" / "probe").mkdir(parents=True, exist_ok=True)
    probe = ("import os; os.rename(os.environ['EMULATED_GCS_MOUNT'] + 'pipelines/probe', "
             "os.environ['EMULATED_GCS_MOUNT'] + 'pipelines/moved')")
    result = subprocess.run([sys.executable, "-c", probe], env=emulated_run["env"],
                            capture_output=True, text=True)
    assert result.returncode != 0 and "does not rename directories" in result.stderr
    # ...and the whole run, which writes every output there, succeeded all the same.
    assert emulated_run["tasks"]["export-model"].state == "SUCCEEDED"


def test_a_job_whose_outputs_go_to_a_bucket_outside_its_region_is_refused(emulated_run):
    """As Vertex AI refuses it (googleapis/python-aiplatform#885), through Google's client:
    the rule `submit` checks before a run (`preflight.check_bucket_locations`). The run of
    this module wrote every job's outputs to its bucket in us-central1, and was not."""
    from google.api_core import exceptions

    storage, url = emulated_run["storage"], emulated_run["apis"].url
    in_region(storage.create_bucket("elsewhere"), "europe-west4")
    jobs = aiplatform_v1.JobServiceClient(transport="rest", client_options={
        "api_endpoint": url}, credentials=AnonymousCredentials())
    pool = {"machine_spec": {"machine_type": "n1-standard-4"}, "replica_count": 1,
            "container_spec": {"image_uri": "us-docker.pkg.dev/p/r/trainer:1"}}
    for bucket, where in (("elsewhere", "europe-west4"), ("uploads", "us")):
        if where == "us":
            storage.create_bucket(bucket)  # the emulator's default: the US multi-region
        job = aiplatform_v1.CustomJob(display_name="probe", job_spec={
            "worker_pool_specs": [pool],
            "base_output_directory": {"output_uri_prefix": f"gs://{bucket}/job"}})
        with pytest.raises(exceptions.BadRequest) as refused:  # 400 over REST
            jobs.create_custom_job(parent="projects/my-proj/locations/us-central1",
                                   custom_job=job)
        assert (f"The Cloud Storage bucket of `gs://{bucket}/job` is in location `{where}`. "
                "It must be in the same regional location as the service location "
                "`us-central1`.") in str(refused.value)
    assert emulated_run["tasks"]["train-on-vertex-ai"].state == "SUCCEEDED"


def test_the_serving_container_answers_from_the_registered_model(emulated_run):
    from tests.support.serving import free_port, held_out_images

    apis = emulated_run["apis"]
    upload = apis.recorded(r"/models:upload$")[0]  # the first run's
    model = upload.body["model"]
    spec = model["container_spec"]
    port = free_port()
    env = {**emulated_run["env"], **{e["name"]: e["value"] for e in spec["env"]},
           "AIP_HTTP_PORT": str(port), "AIP_PREDICT_ROUTE": spec["predict_route"],
           "AIP_HEALTH_ROUTE": spec["health_route"], "AIP_STORAGE_URI": model["artifact_uri"]}
    server = subprocess.Popen([sys.executable, *spec["command"][1:]], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 120
        while True:
            try:
                urllib.request.urlopen(base + spec["health_route"], timeout=2)
                break
            except OSError:
                assert server.poll() is None and time.monotonic() < deadline, \
                    server.stdout.read()[-3000:]
                time.sleep(0.5)
        dataset = emulated_run["mount"].path(
            emulated_run["tasks"]["prepare-dataset"].artifacts["dataset"]["uri"])
        images_ = held_out_images(dataset, count=16)
        body = json.dumps({"instances": [{"b64": base64.b64encode(png).decode()}
                                         for png, _ in images_]}).encode()
        answer = urllib.request.urlopen(urllib.request.Request(
            base + spec["predict_route"], data=body,
            headers={"Content-Type": "application/json"}), timeout=60)
        predictions = json.loads(answer.read())["predictions"]
        correct = sum(p["class_index"] == label
                      for p, (_, label) in zip(predictions, images_, strict=True))
        assert len(predictions) == 16 and correct >= 8  # 3 epochs: far above chance (4)
    finally:
        server.terminate()
        server.wait(timeout=30)


def _uploads(apis) -> list:
    return [aiplatform_v1.UploadModelRequest.from_json(json.dumps(r.body),
                                                       ignore_unknown_fields=True)
            for r in apis.recorded(r"/models:upload$")]


def test_each_promotion_mode_registers_as_the_gate_decided(emulated_run):
    """Retraining against the first run's model, the champion: the upload request (or
    its absence) for each `vertex.promotion`, as Google's launcher sends it. After the
    tests that read the first run's records: it adds runs to the module's emulated
    Vertex AI."""
    run, apis = emulated_run["run"], emulated_run["apis"]
    champion = _uploads(apis)[0]
    parent = "projects/my-proj/locations/us-central1/models/1"
    retrain = {"parent_model": parent, "accuracy_threshold": 0.0}
    shorter = {"epochs": 1, "batch_size": 32}

    # default: a shorter training loses to the champion; a version that does not serve.
    lost = run({**retrain, "promotion": "default"}, shorter)
    export = lost["tasks"]["export-model"].parameters
    assert not export["default"] and export["register"]
    assert "is not significantly better than the champion's" in export["decision"]
    upload = _uploads(apis)[-1]
    assert upload.parent_model == parent and list(upload.model.version_aliases) == []
    assert upload.model.labels["promoted"] == "false"
    # The champion is imported as gcpc's VertexModel artifacts are: its API URL as the URI,
    # its resource name in the metadata.
    (imported,) = [t for t in lost["tasks"].values() if t.display_name == "5c parent model"]
    artifact = imported.artifacts["artifact"]
    assert artifact["uri"] == f"https://us-central1-aiplatform.googleapis.com/v1/{parent}"
    assert artifact["metadata"] == {"resourceName": parent}
    assert artifact["type"]["schemaTitle"] == "google.VertexModel"
    assert apis.defaults[parent] == "1"
    metrics = lost["tasks"]["export-model"].artifacts["metrics"]["metadata"]
    assert metrics["champion_test_accuracy"] > metrics["test_accuracy"]
    assert upload.model.artifact_uri != champion.model.artifact_uri

    # Against a weaker champion (version 2, made the default as a user would roll back,
    # and serving on the team's endpoint), the new model wins: registered without the
    # alias, deployed as a canary beside version 2. With 30 % of its requests failing it
    # is rolled back and version 2 stays the default; run again on a healthy canary, the
    # same step promotes it and undeploys version 2.
    apis.set_default(parent, "2")
    endpoint = apis.endpoints.add("projects/my-proj/locations/us-central1", "serving")
    champion_id = apis.endpoints.serve(endpoint, f"{parent}@2")
    apis.endpoints.behaviour[f"{parent}@3"] = Behaviour(6000, 0.3, 40.0)
    deploy = {"endpoint": "serving", "canary_percent": 20, "watch_window": "4s",
              "check_interval": "2s", "min_requests": 50, "grace_period": "0s"}
    won = run({**retrain, "promotion": "default", "deploy": deploy},
              {"epochs": 2, "batch_size": 32})
    export = won["tasks"]["export-model"].parameters
    assert export["register"] and export["default"] and export["deploy"]
    assert "is significantly better than the champion's" in export["decision"]
    upload = _uploads(apis)[-1]
    assert upload.parent_model == parent and list(upload.model.version_aliases) == []
    assert upload.model.labels["promoted"] == "true"
    (deployed,) = [t for t in won["tasks"].values() if t.display_name == "6 deploy"]
    # No batch source: no batch pod at all.
    assert {t.display_name: t.state for t in won["tasks"].values()}["batch-source-set"] == \
        "SKIPPED"
    assert not any(t.display_name.startswith("7") for t in won["tasks"].values())
    log = deployed.log.read_text()
    # 30 % of a count of requests that depends on the seconds it ran: 60 of 201 is 29.9 %.
    assert deployed.state == "SUCCEEDED" and re.search(
        r"deploy: rolled back, the canary's error rate (29\.[5-9]|30\.[0-4])%", log), \
        log[-3000:]
    canary = apis.recorded(r":deployModel$")[-1].body
    assert canary["trafficSplit"] == {"0": 20, champion_id: 80}
    assert canary["deployedModel"]["model"] == f"{parent}@3"
    # Named for the run, so that the exit handler finds a canary a killed step left.
    job = won["tasks"]["summarize-run"].executor_input["inputs"]["parameterValues"]["job_name"]
    assert canary["deployedModel"]["displayName"] == f"canary of {job}"
    served = apis.endpoints.endpoints[endpoint]
    assert served["trafficSplit"] == {champion_id: 100} and apis.defaults[parent] == "2"
    assert [d["id"] for d in served["deployedModels"]] == [champion_id]
    # The run's cost.json has the canary's nodes for the seconds it served, found through
    # the run's version of the parent model (never the default: it was rolled back).
    cost = json.loads(won["mount"].path(
        won["tasks"]["summarize-run"].artifacts["cost"]["uri"]).read_text())
    (canary_cost,) = [i for i in cost["items"] if i["kind"] == "canary"]
    assert canary_cost["name"] == f"{parent}@3's canary"
    assert canary_cost["basis"] == "1 x n1-standard-4 node(s) from its deployment until " \
        "rolled back" and 0 < canary_cost["hours"] < 0.01
    # At the catalog's prediction price for the node.
    assert canary_cost["unpriced"] == [] and canary_cost["usd"] == pytest.approx(
        PREDICTION_N1_4 * canary_cost["hours"], abs=1e-4)

    # Under a budget, the canary's window is what the run leaves, the run's own steps so
    # far counted (read from its PipelineJob): at a price of 1 USD a second for their
    # e2-standard-4 machines they have spent the 1 USD budget, so no canary is deployed
    # (without them the run would have cost well under 1 USD and the canary would fit).
    vertex = deployed.executor_input["inputs"]["parameterValues"]["vertex"]
    assert deployed.executor_input["inputs"]["parameterValues"]["pipeline_job"] == \
        f"projects/my-proj/locations/us-central1/pipelineJobs/{job}"
    deployed_before = len(apis.recorded(r":deployModel$"))
    held = won["pipelines"].rerun(deployed.name, parameters={"vertex": {
        **vertex, "budget_usd": 1.0, "prices": {
            **vertex.get("prices", {}), "e2-standard-4": 3600.0,
            "PREDICTION:n1-standard-4": 0.25}}})
    log = held.log.read_text()
    assert held.state == "SUCCEEDED" and re.search(
        r"budget: no canary: vertex\.budget_usd 1\.00 USD leaves 0\.00 USD \(the run has "
        r"cost about [0-9.]+ USD\)", log), log[-3000:]
    assert apis.recorded(rf"/pipelineJobs/{job}$", method="GET")
    assert len(apis.recorded(r":deployModel$")) == deployed_before

    apis.endpoints.behaviour[f"{parent}@3"] = Behaviour(6000, 0.0, 40.0)
    again = won["pipelines"].rerun(deployed.name)
    log = again.log.read_text()
    assert again.state == "SUCCEEDED" and "deploy: promoted" in log, log[-3000:]
    (canary_id,) = [d["id"] for d in served["deployedModels"]]
    assert canary_id != champion_id and served["trafficSplit"] == {canary_id: 100}
    assert apis.defaults[parent] == "3"  # the alias moved only with the promotion
    assert apis.recorded(r":undeployModel$")[-1].body == {
        "deployedModelId": champion_id, "trafficSplit": {canary_id: 100}}
    rollout = json.loads((won["mount"].path(export["model_uri"])
                          / "decision.json").read_text())["rollout"]
    assert rollout["outcome"] == "promoted"
    assert [s["step"] for s in rollout["steps"]][:2] == ["canary", "check"]

    # `gpu-pipeline predict --config` asks the endpoint, found by its display name; the
    # promoted version answers from its artifacts.
    from tests.support.serving import held_out_images

    work = won["work"] / "predict"
    work.mkdir()
    (work / "config.yaml").write_text("vertex:\n  project: my-proj\n  region: us-central1\n"
                                      "  deploy:\n    endpoint: serving\n")
    dataset = won["mount"].path(won["tasks"]["prepare-dataset"].artifacts["dataset"]["uri"])
    for number, (png, _) in enumerate(held_out_images(dataset, count=2)):
        (work / f"image{number}.png").write_bytes(png)
    asked = subprocess.run(
        [sys.executable, "-m", "pipelines.cli", "predict", "image0.png", "image1.png",
         "--config", "config.yaml", "--top", "2"], cwd=work, env={**won["env"],
         "PYTHONPATH": os.pathsep.join([won["env"]["PYTHONPATH"], str(ROOT)])},
        capture_output=True, text=True, timeout=120)
    assert asked.returncode == 0, asked.stderr[-3000:]
    lines = asked.stdout.splitlines()
    assert lines[0] == f"{endpoint}: deployed model {canary_id} ({parent}@3)", asked.stdout
    assert re.fullmatch(r"image0\.png: \w+ [01]\.\d{3}, \w+ [01]\.\d{3}", lines[1]), lines
    assert apis.recorded(r":predict$")[-1].body == {"instances": [
        {"b64": base64.b64encode((work / f"image{n}.png").read_bytes()).decode()}
        for n in range(2)]}
    # never: the parameter-server run below.


def test_a_run_killed_mid_canary_with_emails_set_gives_the_champion_its_traffic_back(
        emulated_run):
    """With `vertex.notification_emails`, the exit task is Vertex AI's email and the
    summary runs beside it. A run whose deploy step is killed while its canary serves (its
    pod evicted, the run cancelled: nothing of the step's own runs) fails; the team is
    emailed and the champion gets all the traffic back. The first run's model serves on a
    second endpoint; the run registers a new model, which that endpoint gets as a canary
    beside it."""
    run, apis = emulated_run["run"], emulated_run["apis"]
    parent = "projects/my-proj/locations/us-central1/models/1"
    endpoint = apis.endpoints.add("projects/my-proj/locations/us-central1", "guarded")
    champion_id = apis.endpoints.serve(endpoint, f"{parent}@1")
    served = apis.endpoints.endpoints[endpoint]

    def canary_serves() -> bool:
        return any(d.get("displayName", "").startswith("canary of ")
                   for d in served["deployedModels"])

    emails = ["ml-team@example.com"]
    deploy = {"endpoint": "guarded", "canary_percent": 20, "watch_window": "600s",
              "check_interval": "2s", "min_requests": 50, "grace_period": "0s"}
    killed = run({"accuracy_threshold": 0.0, "deploy": deploy, "notification_emails": emails},
                 {"epochs": 1, "batch_size": 32}, kill_when={"6 deploy": canary_serves},
                 fails=True)
    tasks = killed["tasks"]
    (deployed,) = [t for t in tasks.values() if t.display_name == "6 deploy"]
    assert deployed.state == "FAILED" and "exited with killed" in killed["failure"]
    assert tasks["exit-handler-1"].state == "FAILED"
    assert tasks["vertex-pipelines-notification-email"].state == "SUCCEEDED"
    assert [(n["recipients"], n["state"]) for n in killed["pipelines"].notifications] == [
        (emails, "FAILED")]
    summary = tasks["summarize-run"]
    assert summary.state == "SUCCEEDED"
    assert summary.executor_input["inputs"]["parameterValues"]["status"]["state"] == "FAILED"
    assert "has all the traffic again" in summary.log.read_text(), summary.log.read_text()
    assert served["trafficSplit"] == {champion_id: 100}
    assert [d["id"] for d in served["deployedModels"]] == [champion_id]
    # Its Experiments run, made by the export stage, ended FAILED by the exit handler.
    recorded = apis.metadata.resources[
        f"{STORE}/contexts/gpu-pipeline-model-{killed['pipelines'].job_id}"]
    assert recorded["metadata"]["_state"] == "FAILED"
    assert recorded["metadata"]["_metrics"]["decision"] == "promoted"


def test_the_run_ends_with_what_it_cost_resource_by_resource(emulated_run):
    """The exit handler lists what the run created by its billing label (ListCustomJobs,
    ListHyperparameterTuningJobs, ListBatchPredictionJobs in the run's regions) and writes
    the run's `cost.json`: each training job and the batch prediction job with its time,
    the pipeline's own steps (GetPipelineJob of the run) for the time they ran, the
    pipeline run's own fee, and what it cannot price or see, named."""
    tasks, apis = emulated_run["tasks"], emulated_run["apis"]
    summary = tasks["summarize-run"]
    cost = json.loads(emulated_run["mount"].path(summary.artifacts["cost"]["uri"]).read_text())
    kinds = [item["kind"] for item in cost["items"]]
    assert kinds == ["training", "batch prediction", "pipeline steps", "pipeline"], \
        cost["items"]
    training, batch, steps, fee = cost["items"]
    # Every container task but the summary itself had ended when it read the run.
    run = emulated_run["pipelines"]
    ran = [t for t in tasks.values() if t.started and t.name != "summarize-run"]
    assert len(ran) >= 10 and steps["name"] == run.resource_name
    assert apis.recorded(f"/v1/{re.escape(run.resource_name)}$", method="GET")
    # Each step on the machine of the CustomJob it ran as (GetCustomJob of its mainJob):
    # the steps given vertex.component_cpu 8 and component_memory 32G on e2-standard-8s.
    assert re.fullmatch(rf"{len(ran)} step\(s\) on e2-standard-(4, e2-standard-8|8, "
                        r"e2-standard-4) machines, each from its start to its end; 1 still "
                        r"running \(the step reading the run among them\), not counted",
                        steps["basis"]), steps["basis"]
    assert len(apis.recorded(r"/customJobs/step-\d+$", method="GET")) >= len(ran)
    assert 0 < steps["hours"] < emulated_run["seconds"] / 3600
    # At the catalog's E2 prices, between the e2-standard-4's and the e2-standard-8's.
    assert E2_4 * steps["hours"] < steps["usd"] < 2 * E2_4 * steps["hours"]
    assert steps["unpriced"] == []
    (job,) = [j for j in apis.jobs.values() if j.name == training["name"]]
    assert job.resource["labels"]["vertex-ai-pipelines-run-billing-id"]
    assert training["hours"] > 0 and training["usd"] > 0 and training["basis"] == "succeeded"
    assert batch["name"].split("/")[-2] == "batchPredictionJobs" and batch["hours"] > 0
    # Prediction at the catalog's prediction SKUs (Vertex AI's Online/Batch Prediction).
    assert batch["usd"] == pytest.approx(PREDICTION_N1_4 * batch["hours"], abs=1e-4)
    assert batch["unpriced"] == []
    assert batch["basis"] == "1 x n1-standard-4 node(s), the most it may have run"
    assert fee["usd"] == 0.03 and cost["usd"] == pytest.approx(
        training["usd"] + batch["usd"] + steps["usd"] + 0.03, abs=1e-3)
    assert any("Cloud Build builds `submit` makes" in why for why in cost["not_counted"])
    # The listings asked for the run's resources only.
    billing = job.resource["labels"]["vertex-ai-pipelines-run-billing-id"]
    assert [f'labels.vertex-ai-pipelines-run-billing-id="{billing}"'] in [
        r.query["filter"] for r in apis.recorded(r"/batchPredictionJobs$", method="GET")]
    said = summary.log.read_text()
    assert re.search(r"\[gpu-pipeline\] run cost: about [0-9.]+ USD \(training [0-9.]+, batch "
                     r"prediction [0-9.]+, pipeline steps [0-9.]+, pipeline 0\.03; "
                     rf"{CATALOG_PRICES}( \(cached\))?; vertex\.prices over them\); not "
                     r"counted: ", said), said[-2000:]


def test_each_vertex_run_is_a_vertex_ai_experiments_run(emulated_run, tmp_path):
    """The export stage records the run in Vertex AI Experiments with Google's client
    (experiment: the model's display name; run: the pipeline job's ID): its parameters,
    its metrics with the gate's decision, its curves as TensorBoard time series
    (`vertex.tensorboard`), the pipeline run as its child; the exit handler adds the cost
    and the duration and ends it; `gpu-pipeline runs --config` lines the runs up."""
    apis, run, tasks = emulated_run["apis"], emulated_run["pipelines"], emulated_run["tasks"]
    experiment = f"{STORE}/contexts/gpu-pipeline-model"
    assert apis.metadata.resources[experiment]["schemaTitle"] == "system.Experiment"
    name = f"{STORE}/contexts/gpu-pipeline-model-{run.job_id}"
    (created,) = [r for r in apis.recorded(r"/metadataStores/default/contexts$")
                  if r.query.get("contextId") == [name.rsplit("/", 1)[-1]]]
    assert created.body == {"displayName": run.job_id, "schemaTitle": "system.ExperimentRun",
                            "schemaVersion": "0.0.1", "metadata": {
                                "_params": {}, "_metrics": {}, "_state": "RUNNING"}}
    recorded = apis.metadata.resources[name]
    assert recorded["parentContexts"] == [experiment]
    state, values, results = (recorded["metadata"][k] for k in ("_state", "_params",
                                                                  "_metrics"))
    assert state == "COMPLETE"
    assert {k: values[k] for k in ("model", "epochs", "batch_size", "data_source", "strategy",
                                   "machines", "machine_type", "accelerator", "xla")} == {
        "model": "cnn", "epochs": 3, "batch_size": 32,
        "data_source": "builtin://shapes", "strategy": "multi_worker_mirrored",
        "machines": 2, "machine_type": "n1-standard-8", "accelerator": "NVIDIA_TESLA_T4",
        "xla": "off"}
    assert values["data_fingerprint"].startswith("builtin://shapes?")
    assert values["trainer_image"].startswith(f"{REPO}/gpu-pipeline-gpu@sha256:")
    exported = tasks["export-model"].artifacts["metrics"]["metadata"]
    assert results["test_accuracy"] == exported["test_accuracy"]
    assert results["decision"] == "promoted" and "gate_p_value" not in results  # no champion
    summary = tasks["summarize-run"]
    cost = json.loads(emulated_run["mount"].path(summary.artifacts["cost"]["uri"]).read_text())
    assert results["cost_usd"] == round(cost["usd"], 4)
    assert 0 < results["duration_s"] < emulated_run["seconds"] + 60
    assert re.search(rf"run experiments: run {run.job_id} of experiment gpu-pipeline-model "
                     r"ended COMPLETE, cost [0-9.]+ USD", summary.log.read_text())
    # The pipeline run is the Experiments run's child (the console links the two).
    assert name in apis.metadata.resources[run.run_context]["parentContexts"]
    # Each epoch's figures, as the training report has them, in the run's TensorBoard run.
    job = emulated_run["mount"].path(tasks["train-on-vertex-ai"].artifacts["training_job"]["uri"])
    history = json.loads((job / "training_report.json").read_text())["history"]
    board = f"{TENSORBOARD}/experiments/gpu-pipeline-model/runs/{run.job_id}"
    for metric in ("loss", "val_accuracy", "val_examples"):
        assert apis.metadata.points[board, metric] == [
            (epoch["epoch"] + 1, pytest.approx(epoch[metric])) for epoch in history]
    # The runs side by side, read back from Vertex AI Experiments.
    config = tmp_path / "vertex.yaml"
    config.write_text("vertex:\n  project: my-proj\n  region: us-central1\n")
    listing = subprocess.run([str(BIN), "runs", "--config", str(config)], capture_output=True,
                             text=True, timeout=120, env=emulated_run["env"])
    assert listing.returncode == 0, listing.stderr[-2000:]
    header, *rows = listing.stdout.splitlines()
    assert header.split() == ["ended", "state", "data", "model", "accuracy", "decision", "cost",
                              "duration"]
    (first,) = [row for row in rows if f"test_accuracy {results['test_accuracy']:.4f}" in row
                and f"{results['cost_usd']:.2f} USD" in row]
    assert "SUCCEEDED" in first and "promoted" in first
    assert re.search(r"builtin://shapes, 1,600 images, 32 px +cnn ", first), first


def _budgeted_rerun(emulated_run, budget_usd, name, start_up_seconds=0.0):
    """The first run's training step run again as a run of its own under `budget_usd`,
    with the T4 at 36 USD an hour (its two machines: 73.05 USD an hour). Before its
    training the run has cost its 0.03 USD (`run_cost.PIPELINE_RUN_USD`): a run of its own
    has none of the first run's jobs, and its steps are not read (no PipelineJob). Its
    batch is a quarter of the first run's; its job's machines ran `start_up_seconds`
    before its containers started (billed)."""
    emulated_run["apis"].start_up_seconds = start_up_seconds
    first = emulated_run["pipelines"]
    task = emulated_run["tasks"]["train-on-vertex-ai"]
    given = task.executor_input["inputs"]["parameterValues"]
    vertex = {**given["vertex"], "budget_usd": budget_usd,
              "prices": {"NVIDIA_TESLA_T4": 36.0}}
    training = {**given["training"], "batch_size": given["training"]["batch_size"] // 4}
    try:
        with pytest.raises(TaskFailed) as failed:
            first.rerun("train-on-vertex-ai", artifacts_under=f"gs://pipelines/root/{name}",
                        run_labels={"vertex-ai-pipelines-run-billing-id": name},
                        parameters={"vertex": vertex, "training": training,
                                    "pipeline_job": ""})
    finally:
        emulated_run["apis"].start_up_seconds = 0.0
    return str(failed.value)


def _estimated_usd(emulated_run, usd_per_hour):
    """What the training step estimates the first run's 3 epochs cost at `usd_per_hour`."""
    return usd_per_hour * 3 * _measured_epoch_seconds(emulated_run) / 3600


def _measured_epoch_seconds(emulated_run):
    """The seconds per epoch of the newest registered model that measured them on the
    same machines, read as the step reads it (`measured_speed.newest_measured`, against
    the emulated registry and Cloud Storage)."""
    from components.capacity.measured_speed import newest_measured
    from components.vertex_options import VertexOptions
    from trainer.common.schema import validate

    task = emulated_run["tasks"]["train-on-vertex-ai"]
    values = task.executor_input["inputs"]["parameterValues"]
    vertex = validate(VertexOptions, values["vertex"], prefix="vertex", strict=False)
    found = newest_measured(vertex, values["project"], emulated_run["clients"].model_api,
                            emulated_run["storage"])
    assert found.worker_pool_specs and found.images_per_epoch  # its lineage says where
    return found.seconds_per_epoch


def test_a_run_whose_estimate_passes_its_budget_is_refused_before_its_first_job(emulated_run):
    """`vertex.budget_usd` in the training step itself, before it creates a job (as every
    scheduled run's does): at the speed the newest registered model measured, the primary
    would cost more than the budget, so the step fails naming both and creates nothing."""
    apis = emulated_run["apis"]
    jobs = len(apis.jobs)
    # The step is given the run's resource name: what the run's steps cost counts too.
    task = emulated_run["tasks"]["train-on-vertex-ai"]
    assert task.executor_input["inputs"]["parameterValues"]["pipeline_job"] == \
        emulated_run["request"].parent + "/pipelineJobs/" + emulated_run["request"].pipeline_job_id
    estimate = _estimated_usd(emulated_run, 73.05)
    message = _budgeted_rerun(emulated_run, round(estimate / 2, 4), "refused-run")
    assert re.search(r"training failed: vertex\.budget_usd is [0-9.]+ USD \([0-9.]+ USD left: "
                     r"the run has cost about 0\.03 USD before training\) and no configuration "
                     r"fits it:\n\[gpu-pipeline\] training:   - primary \(us-central1\): about "
                     r"[0-9.]+ USD, [0-9.]+ USD over "
                     r"the [0-9.]+ USD the budget leaves \(73\.05 USD an hour, about [0-9.]+ h: "
                     r"3 epoch\(s\) at \d+ s, as projects/.+ measured on these machines\)",
                     message), message[-3000:]
    assert "Traceback" not in message
    assert len(apis.jobs) == jobs  # nothing was created


def test_a_job_that_would_pass_its_budget_is_cancelled_and_the_step_says_why(emulated_run):
    """`vertex.budget_usd` while the job runs (the pre-flight's share is
    `test_cost_estimate`): the first run's training step run again as a run with a budget
    of the run's own 0.03 USD plus 1.25 times what the step estimates from the measured
    speed (so its hold lets it start), and the T4 at 36 USD an hour. Its job's machines
    ran 2.5 measured epochs before its containers started (billed), and the projection
    counts that start-up in every epoch, so what it has cost plus what its remaining
    epochs would passes the budget however fast its epochs are: the step cancels it,
    records what it cost, and fails saying why, not as a crash."""
    from components.capacity.run_cost import PIPELINE_RUN_USD

    apis = emulated_run["apis"]
    # 1.25 x the estimate: the hold lets the job start; a projection that counts the
    # start-up (s) in each of the 3 epochs (e each) passes it once s + e > 1.25 times the
    # measured epoch m: s = 2.5 m does, whatever e (no timing decides it).
    measured = _measured_epoch_seconds(emulated_run)
    left = round(1.25 * 73.05 * 3 * measured / 3600, 4)
    budget_usd = left + PIPELINE_RUN_USD  # the run's own 0.03 USD is spent before training
    message = _budgeted_rerun(emulated_run, budget_usd, "budgeted-run",
                              start_up_seconds=2.5 * measured)
    held = (f"vertex.budget_usd is {budget_usd:.2f} USD ({budget_usd - 0.03:.2f} USD left: "
            "the run has cost about 0.03 USD before training)")
    assert f"training failed: budget: {held}; the job has cost about " in message, \
        message[-3000:]
    assert f"within {held.replace(' is ', ' ')}" in message  # the hold let it start
    assert "was cancelled" in message and "Traceback" not in message
    job = list(apis.jobs.values())[-1]
    assert job.settled() == "JOB_STATE_CANCELLED"
    assert apis.recorded(r":cancel$")[-1].path == f"/v1/{job.name}:cancel"
    # What it cost is on record, as for any job.
    job_dir = emulated_run["mount"].path(
        job.resource["jobSpec"]["baseOutputDirectory"]["outputUriPrefix"])
    cost = json.loads((job_dir / "cost.json").read_text())
    assert cost["jobs"][-1]["job"] == job.name and cost["usd"] > 0


def test_under_the_cmek_org_policy_a_run_without_a_key_is_refused(emulated_run, tmp_path):
    from trainer.common.errors import ProjectError

    # Last in this module: its submit reads the registry and the images' tags, which the
    # tests above count.
    run = emulated_run["run"]
    with pytest.raises(ProjectError) as refused:
        run({}, {"epochs": 1}, cmek=True)
    assert "Constraint `constraints/gcp.restrictNonCmekServices` violated for " \
        "`projects/my-proj` attempting to create a resource without specifying a KMS " \
        "CryptoKey." in str(refused.value)


def test_images_built_elsewhere_are_passed_on_and_nothing_is_built(emulated_run, tmp_path):
    """`vertex.images` (a team's CI built them): `compile --image` writes a spec whose
    components run the CPU image by digest and that names no placeholder; the run's build
    step, run again by the real executor with them, passes them on and asks Cloud Build and
    Artifact Registry nothing."""
    import yaml

    from pipelines.cli import main

    apis, pipelines = emulated_run["apis"], emulated_run["pipelines"]
    repository = "europe-west4-docker.pkg.dev/team-proj/ci-images"
    given = {"gpu": f"{repository}/trainer@sha256:{'a' * 64}",
             "cpu": f"{repository}/components@sha256:{'b' * 64}"}
    spec = tmp_path / "pipeline.yaml"
    assert main(["compile", "--output", str(spec), "--image", f"trainer={given['gpu']}",
                 "--image", f"cpu={given['cpu']}"]) == 0
    text = spec.read_text()
    assert "PROJECT_ID" not in text and "gpu-pipeline-cpu:" not in text
    executors = yaml.safe_load(text)["deploymentSpec"]["executors"]
    assert {e["container"]["image"] for e in executors.values() if "container" in e
            and e["container"]["image"].startswith(repository)} == {given["cpu"]}
    builds, lookups = len(apis.recorded(r"/builds$")), len(apis.recorded(r"/tags/"))
    task = emulated_run["tasks"]["build-images"]
    vertex = task.executor_input["inputs"]["parameterValues"]["vertex"]
    again = pipelines.rerun("build-images", artifacts_under="gs://pipelines/root/given",
                            parameters={"vertex": {**vertex, "images": given}})
    assert again.parameters["Output"] == {
        key: {"reference": reference, "tag": "", "built": False}
        for key, reference in given.items()}
    assert (len(apis.recorded(r"/builds$")), len(apis.recorded(r"/tags/"))) == \
        (builds, lookups)
    assert "images given by vertex.images (built elsewhere), nothing built" in \
        again.log.read_text()


def test_the_benchmark_runs_as_a_custom_job_and_the_next_dry_run_cites_its_file(emulated_run):
    """(Last in this module: it adds a job to the shared emulation.) `gpu-pipeline
    benchmark`'s Vertex path: the images submit built (found by their content tag), one
    CustomJob of the benchmark's real command on one T4 (the emulator
    runs it on the CPUs: tiny sizes), its results file in the measurements location in
    Cloud Storage, and the next `submit --dry-run` plans with it and names it."""
    from pipelines.benchmark import benchmark_of
    from pipelines.vertex.benchmark_job import BENCHMARK_COMMAND, run_on_vertex

    lines: list[str] = []
    config = _priced_config({"batch_size": 4})
    benchmark = benchmark_of(config, classes=3,
                             cases="float32-noxla,float16-noxla,float32-xla+cache",
                             budget=300, warmup=1, steps=2)
    before = len(emulated_run["apis"].recorded(r"/customJobs$"))
    results, output, cost = run_on_vertex(
        config, benchmark, data="", folder=config.measurements_location(), dry_run=False,
        clients=emulated_run["clients"], log=lines.append, poll_seconds=0.2)
    (created,) = emulated_run["apis"].recorded(r"/customJobs$")[before:]
    job = aiplatform_v1.CustomJob.from_json(json.dumps(created.body))
    (pool,) = job.job_spec.worker_pool_specs
    assert (pool.machine_spec.machine_type, pool.machine_spec.accelerator_type.name,
            pool.machine_spec.accelerator_count) == ("n1-standard-8", "NVIDIA_TESLA_T4", 1)
    assert re.fullmatch(rf"{REPO}/gpu-pipeline-gpu@sha256:[0-9a-f]{{64}}",
                        pool.container_spec.image_uri)
    assert list(pool.container_spec.command) == list(BENCHMARK_COMMAND)
    args = list(pool.container_spec.args)
    assert args[:5] == ["all", "--accelerator", "NVIDIA_TESLA_T4", "--model", "cnn"]
    assert args[-2:] == ["--expected-gpus", "1"] and output in args
    assert job.job_spec.service_account == ACCOUNT
    assert job.job_spec.scheduling.timeout.total_seconds() == 300 + 1200
    assert job.labels["gpu-pipeline-job"] == "benchmark"
    assert output.startswith("gs://pipelines/root/measurements/NVIDIA_TESLA_T4/cnn/")
    # The results file landed in the bucket; its figures are the CPUs', said so.
    assert emulated_run["storage"].bucket("pipelines").blob(
        output[len("gs://pipelines/"):]).exists()
    assert (results["schema"], results["accelerator"], results["device"]) == (
        2, "NVIDIA_TESLA_T4", "cpu")
    timed = [c for c in results["runs"][0]["cases"] if c.get("phase") == "timed"]
    assert [c["case"] for c in timed] == ["float32-noxla", "float16-noxla",
                                          "float32-xla+cache", "float32-xla+cache"]
    # XLA's cache round-tripped through the bucket: the cold start filled the runs' cache
    # of this GPU and image, the warm start read it back.
    cold, warm = (c["xla_cache"] for c in results["runs"][0]["cases"]
                  if c["case"] == "float32-xla+cache" and c.get("phase") == "warmup")
    assert (cold["start"], cold["restored"], warm["start"]) == ("cold", 0, "warm")
    assert cold["saved"] >= 1 and warm["restored"] == cold["saved"] and warm["saved"] == 0
    digest = pool.container_spec.image_uri.rsplit(":", 1)[1][:16]
    cached = [b.name for b in emulated_run["storage"].list_blobs(
        "pipelines", prefix=f"root/xla-cache/NVIDIA_TESLA_T4/{digest}/")]
    assert len(cached) == cold["saved"] and all("XLA_CPU_JIT" in n for n in cached)
    assert cost[0].startswith("cost: about ") and "n1-standard-8 with its GPU" in cost[0]
    # The next dry run reads the measurements location and cites the file.
    lines.clear()
    runs.submit(config, dry_run=True, clients=emulated_run["clients"],
                credentials=AnonymousCredentials(), log=lines.append)
    # A file the benchmark ran on CPUs decides nothing for the T4: the plan cites none,
    # and the dry run says it was read and why it counts for nothing.
    plan = [line for line in lines if line.startswith(("  mixed_precision: ", "  xla: "))]
    assert len(plan) == 2 and not any(output in line for line in plan), plan
    (cpus,) = [line for line in lines if line.startswith("measurements: ") and "CPUs" in line]
    assert numbers(cpus)[0] == 1 and cpus.endswith(output)
    assert any(line.startswith("measurements: the training plan read 1 results file(s) "
                               "under gs://pipelines/root/measurements/") for line in lines)


def test_three_runs_that_keep_the_champion_on_vertex_warn_registered_or_not(emulated_run):
    """`promotion: never` registers nothing, so no registry label could count it: the
    export stage's count reads every run's decision back from Vertex AI Experiments (the
    emulated Metadata API, Google's client), and the third such run warns."""
    script = """
import json
from components.export.experiments import metrics, record_run
from components.export.export_model import kept_count
from components.export.gate import decide
from components.export.paired_test import Paired
from components.vertex_options import VertexOptions

vertex = VertexOptions(region="us-central1", promotion="never", champion_kept_warning=3,
                       model_display_name="kept-model")
found = []
for number in range(3):
    made = decide({"test_accuracy": 0.9}, {"test_accuracy": 0.9}, threshold=0.5,
                  promotion="never", paired=Paired(100, 1, 1, 0))
    made = kept_count(made, vertex, None, print, "my-proj")
    record_run("my-proj", vertex, f"kept-run-{number}", "", values={"model": "cnn"},
               results=metrics({"test_accuracy": 0.9}, made), log=lambda line: None)
    found.append([made.register, (made.champion_kept or {}).get("runs"), made.warning])
print(json.dumps(found))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=180, env=emulated_run["env"], cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.splitlines()[-1])
    assert [(registered, runs) for registered, runs, _ in found] == [
        (False, 1), (False, 2), (False, 3)]
    assert [bool(warning) for *_, warning in found] == [False, False, True]
    assert numbers(found[2][2])[0] == 3 and "vertex.promotion never" in found[2][2]
