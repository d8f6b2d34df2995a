"""The Vertex AI path, offline: requests as the client libraries' own types, Cloud Storage
on an emulator on loopback, the KFP registry upload against a server on loopback."""

# No `from __future__ import annotations`: a test defines a KFP component.
import dataclasses
import datetime
import hashlib
import http.server
import json
import re
import threading

import pytest
import yaml
from google.api_core import exceptions
from google.auth.credentials import AnonymousCredentials
from google.cloud import aiplatform_v1, artifactregistry_v1
from google.cloud.devtools import cloudbuild_v1
from google.iam.v1 import iam_policy_pb2

from components import images
from components.build.build_images import run_build_stage
from components.build.context import write_build_context
from pipelines.cli import main
from pipelines.config_loading import load_config
from pipelines.vertex import preflight, runs, schedules
from pipelines.vertex import publishing as publish
from pipelines.vertex.clients import Clients
from pipelines.vertex.dry_run import NOTHING_SENT
from tests.support.google_fakes import RecordingApi
from tests.support.paths import ROOT

SPEC = ROOT / "compiled" / "gpu_training_pipeline.yaml"
REPO = "us-central1-docker.pkg.dev/my-proj/ml-images"
DIGEST = "sha256:" + "ab" * 32


def config(**vertex_overrides):
    values = {"project": "my-proj", "region": "us-central1",
              "pipeline_root": "gs://pipelines/root", "image_repository": REPO,
              "service_account": "trainer@my-proj.iam.gserviceaccount.com",
              "network": "projects/123/global/networks/ml", "labels": {"team": "vision"},
              **vertex_overrides}
    return load_config(overrides={"vertex": values, "training": {"epochs": 3}})


def digest_of(image):
    """The digest the fake Cloud Build gives a pushed image (one per image)."""
    return "sha256:" + hashlib.sha256(image.encode()).hexdigest()


class FakeBuildOperation:
    """A Cloud Build operation that is done after `polls` calls of done()."""

    def __init__(self, build, polls=0):
        self.build, self.polls = build, polls

    def done(self):
        self.polls -= 1
        return self.polls < 0

    @property
    def metadata(self):
        return cloudbuild_v1.BuildOperationMetadata(build=self.build)

    def result(self, timeout=None):
        assert timeout is not None and timeout > 900  # never google-api-core's default
        return self.build


class FakeCloudBuild:
    """Records CreateBuildRequests; the build 'pushes' its images to the fake registry."""

    def __init__(self, registry):
        self.requests, self.registry = [], registry

    def create_build(self, request):
        assert isinstance(request, cloudbuild_v1.CreateBuildRequest)
        self.requests.append(request)
        for image in request.build.images:
            self.registry.push(image)
        built = [cloudbuild_v1.BuiltImage(name=i, digest=digest_of(i))
                 for i in request.build.images]
        return FakeBuildOperation(cloudbuild_v1.Build(
            id=f"build-{len(self.requests)}", status=cloudbuild_v1.Build.Status.SUCCESS,
            log_url="https://console.cloud.google.com/cloud-build/builds/1",
            start_time=datetime.datetime(2026, 11, 27, 10, 0, tzinfo=datetime.timezone.utc),
            finish_time=datetime.datetime(2026, 11, 27, 10, 7, tzinfo=datetime.timezone.utc),
            results=cloudbuild_v1.Results(images=built)))


class FakeArtifactRegistry:
    """Answers GetTagRequests for the tags it holds, NotFound otherwise; grants every
    permission asked of a repository."""

    def __init__(self):
        self.requests, self.tags = [], {}

    def push(self, image):
        repo, tag = image.rsplit(":", 1)
        parsed = repo.split("/")
        name = (f"projects/{parsed[1]}/locations/{parsed[0].split('-docker')[0]}/repositories/"
                f"{parsed[2]}/packages/{parsed[3]}/tags/{tag}")
        self.tags[name] = f"{name.split('/tags/')[0]}/versions/{digest_of(image)}"

    def get_tag(self, request):
        assert isinstance(request, artifactregistry_v1.GetTagRequest)
        self.requests.append(request)
        if request.name not in self.tags:
            raise exceptions.NotFound(request.name)
        return artifactregistry_v1.Tag(name=request.name, version=self.tags[request.name])

    def test_iam_permissions(self, request):
        assert isinstance(request, iam_policy_pb2.TestIamPermissionsRequest)
        return iam_policy_pb2.TestIamPermissionsResponse(permissions=request.permissions)


class FakeQuotas:
    """Cloud Quotas' ListQuotaInfos: the quotas given (metric -> QuotaInfo), recorded."""

    def __init__(self, infos=()):
        self.infos, self.requests = list(infos), []

    def list_quota_infos(self, request):
        from google.cloud import cloudquotas_v1

        assert isinstance(request, cloudquotas_v1.ListQuotaInfosRequest)
        self.requests.append(request)
        return list(self.infos)


class FakeJobs:
    """Vertex AI's ListCustomJobs: no active jobs; recorded."""

    def __init__(self):
        self.requests = []

    def list_custom_jobs(self, request):
        assert isinstance(request, aiplatform_v1.ListCustomJobsRequest)
        self.requests.append(request)
        return []


@pytest.fixture
def cloud(storage_emulator):
    from trainer.common.gcs import storage_client

    storage = storage_client()
    storage.create_bucket("pipelines")
    registry = FakeArtifactRegistry()
    return Clients(storage=storage, build=FakeCloudBuild(registry), registry=registry,
                   pipeline_api=RecordingApi(), schedule_api=RecordingApi(),
                   projects=GrantingIam(), iam=GrantingIam(), quotas=FakeQuotas(),
                   jobs=FakeJobs())


class GrantingIam:
    """Resource Manager and IAM testIamPermissions, granting everything; records requests."""

    def __init__(self):
        self.calls = []

    def test_iam_permissions(self, request):
        self.calls.append(request)
        return iam_policy_pb2.TestIamPermissionsResponse(permissions=request.permissions)

    def post(self, url, json, timeout):
        self.calls.append((url, json))

        class Answer:
            def raise_for_status(self):
                pass

            def json(self):
                return {"permissions": json["permissions"]}
        return Answer()


# --- The PipelineJob request -----------------------------------------------------------------


def test_compiled_spec_builds_a_pipeline_job_request():
    cfg = config()
    job = runs.pipeline_job(cfg, SPEC, "gs://pipelines/root/ctx.tar.gz", AnonymousCredentials())
    request = runs.create_request(job, cfg)
    assert isinstance(request, aiplatform_v1.CreatePipelineJobRequest)
    assert request.parent == "projects/my-proj/locations/us-central1"
    pj = request.pipeline_job
    assert pj.service_account == "trainer@my-proj.iam.gserviceaccount.com"
    assert pj.network == "projects/123/global/networks/ml"
    assert dict(pj.labels) == {"app": "gpu-pipeline", "team": "vision"}
    assert pj.runtime_config.gcs_output_directory == "gs://pipelines/root"
    params = aiplatform_v1.PipelineJob.to_dict(pj)["runtime_config"]["parameter_values"]
    assert params["training"]["epochs"] == 3 and params["project"] == "my-proj"
    assert params["trainer_source_uri"] == "gs://pipelines/root/ctx.tar.gz"
    assert params["vertex"]["scheduling_strategy"] == "STANDARD"
    assert set(params) == {"project", "dataset", "training", "vertex", "trainer_source_uri"}
    # Struct numbers arrive as doubles; the stages read the options back through their
    # models, and the validation stage normalises the pools, as on Vertex.
    from components.gpu.validation import validate_worker_pool_specs
    from components.vertex_options import VertexOptions
    from trainer.common.schema import validate
    from trainer.run.training_options import TrainingOptions

    # The plan's measurements and XLA's cache are under the pipeline root (no location
    # was set).
    assert validate(TrainingOptions, params["training"], strict=False) == \
        cfg.training_options().model_copy(update={
            "measurements": f"{cfg.vertex.pipeline_root}/measurements/",
            "xla_cache": f"{cfg.vertex.pipeline_root}/xla-cache/"})
    vertex_options = validate(VertexOptions, params["vertex"], strict=False)
    normalised = validate_worker_pool_specs(vertex_options.worker_pool_specs,
                                            "us-central1").specs
    pools = [aiplatform_v1.WorkerPoolSpec(p) for p in normalised]
    assert pools[0].machine_spec.accelerator_type == aiplatform_v1.AcceleratorType.NVIDIA_TESLA_T4
    assert pj.pipeline_spec["pipelineInfo"]["name"] == "gpu-training-pipeline"


def _task_caching(pipeline_spec):
    """Task name -> whether its cache may be used, over every DAG of a pipeline spec."""
    dags = [pipeline_spec["root"]["dag"]] + [c["dag"] for c in pipeline_spec["components"]
                                             .values() if "dag" in c]
    return {name: bool(task.get("cachingOptions", {}).get("enableCache"))
            for dag in dags for name, task in dag["tasks"].items()
            if "componentRef" in task and not name.startswith("condition")}


@pytest.mark.slow
def test_submit_with_images_built_elsewhere_uploads_and_builds_nothing(cloud, capsys):
    given = {"gpu": f"{REPO}/trainer@sha256:{'a' * 64}",
             "cpu": f"{REPO}/components@sha256:{'b' * 64}"}
    cfg = config(images=given)
    runs.submit(cfg, dry_run=True, clients=dataclasses.replace(cloud))
    out = capsys.readouterr().out
    assert "images, given by vertex.images (built elsewhere; no sources uploaded, no " \
        f"build):\n[gpu-pipeline]   GPU worker pools run {given['gpu']}" in out
    assert "Cloud Build" not in out.split("images, given by")[1]
    runs.submit(cfg, dry_run=False, clients=cloud, credentials=AnonymousCredentials())
    assert cloud.build.requests == [] and not list(cloud.storage.list_blobs("pipelines"))
    spec = cloud.pipeline_api.calls[-1].pipeline_job.pipeline_spec
    ours = {e["container"]["image"] for e in spec["deploymentSpec"]["executors"].values()
            if "container" in e and e["container"]["image"].startswith(REPO)}
    assert ours == {given["cpu"]}


@pytest.mark.parametrize("enable_caching", [True, False])
def test_only_the_dataset_preparation_may_be_served_from_cache(enable_caching):
    # aiplatform's enable_caching=True overrides every task's setting: a weekly run would
    # reuse the fingerprint, the training and the export, and never see new data.
    cfg = config(enable_caching=enable_caching)
    job = runs.pipeline_job(cfg, SPEC, "", AnonymousCredentials())
    sent = aiplatform_v1.PipelineJob.to_dict(runs.create_request(job, cfg).pipeline_job)
    caching = _task_caching(sent["pipeline_spec"])
    assert {"fingerprint-dataset-source", "train-on-vertex-ai", "export-model",
            "model-upload", "model-upload-2", "importer"} <= set(caching)
    assert {name for name, cached in caching.items() if cached} == (
        {"prepare-dataset"} if enable_caching else set())


@pytest.mark.slow
def test_submit_uploads_sources_builds_once_and_sends_the_dry_run_request(cloud, capsys,
                                                                        tmp_path):
    cfg = config()
    dry = runs.submit(cfg, dry_run=True, clients=dataclasses.replace(cloud))
    assert cloud.build.requests == [] and cloud.pipeline_api.calls == []  # nothing was sent
    out = capsys.readouterr().out
    assert "Vertex AI would receive this CreatePipelineJobRequest" in out

    job = runs.submit(cfg, dry_run=False, clients=cloud, credentials=AnonymousCredentials())
    sent = cloud.pipeline_api.calls[-1]
    # The SDK's own submit() sent what the dry run showed (job ids are per run).
    assert sent.pipeline_job.runtime_config == dry.pipeline_job.runtime_config
    assert sent.pipeline_job.service_account == dry.pipeline_job.service_account
    assert sent.pipeline_job.network == dry.pipeline_job.network
    assert sent.pipeline_job.labels == dry.pipeline_job.labels
    assert job.resource_name.startswith("projects/my-proj/locations/us-central1/pipelineJobs/")

    # The sources are in Cloud Storage, and both images were built from them in one build,
    # each with its own Dockerfile, on the configured machine.
    (build,) = cloud.build.requests
    source = build.build.source.storage_source
    blob = cloud.storage.bucket(source.bucket).blob(source.object_)
    context = write_build_context(tmp_path / "context")
    assert blob.download_as_bytes() == context.tarball.read_bytes()
    gpu, cpu = (images.tagged(REPO, i, context.tag) for i in (images.GPU, images.CPU))
    assert build.build.images == [gpu, cpu]
    base = ["--build-arg", f"PYTHON_BASE={images.PYTHON_BASE_IMAGE}"]
    assert [list(s.args) for s in build.build.steps] == [
        ["build", "--file", "docker/gpu.Dockerfile", *base, "--build-arg",
         "APT_KEY_FINGERPRINTS=" + ",".join(images.GOOGLE_APT_KEY_FINGERPRINTS), "--tag", gpu,
         "."],
        ["build", "--file", "docker/cpu.Dockerfile", *base,
         "--build-arg", f"BEAM_SDK={images.BEAM_SDK_IMAGE}", "--tag", cpu, "."]]
    assert [list(s.wait_for) for s in build.build.steps] == [["-"], ["-"]]  # side by side
    assert build.parent == "projects/my-proj/locations/us-central1"
    assert build.build.options.machine_type == \
        cloudbuild_v1.BuildOptions.MachineType.E2_HIGHCPU_8
    assert build.build.timeout.seconds == 3600 and build.build.queue_ttl.seconds == 3600
    # Run as the configured account, which Cloud Build takes as a resource name and only
    # with logs in Cloud Logging (or a user bucket).
    assert build.build.service_account == \
        "projects/my-proj/serviceAccounts/trainer@my-proj.iam.gserviceaccount.com"
    assert build.build.options.logging == \
        cloudbuild_v1.BuildOptions.LoggingMode.CLOUD_LOGGING_ONLY
    # Components run in the built CPU image, named by its digest alone.
    executors = sent.pipeline_job.pipeline_spec["deploymentSpec"]["executors"]
    ours = {e["container"]["image"] for e in executors.values()
            if "container" in e and "pipeline-components" not in e["container"]["image"]}
    assert ours == {f"{REPO}/gpu-pipeline-cpu@{digest_of(cpu)}"}
    # The dry run showed the same, with a placeholder digest.
    dry_images = {e["container"]["image"] for e in dry.pipeline_job.pipeline_spec[
        "deploymentSpec"]["executors"].values() if "container" in e
        and "pipeline-components" not in e["container"]["image"]}
    assert dry_images == {f"{REPO}/gpu-pipeline-cpu@{images.UNBUILT_DIGEST}"}

    # Unchanged sources: same tag, found in the registry, no second build.
    runs.submit(cfg, dry_run=False, clients=cloud, credentials=AnonymousCredentials())
    assert len(cloud.build.requests) == 1 and len(cloud.pipeline_api.calls) == 2


@pytest.mark.slow
def test_the_build_stage_on_vertex(cloud, tmp_path):
    context = write_build_context(tmp_path / "uploaded")
    uri = "gs://pipelines/root/build-contexts/ctx.tar.gz"
    cloud.storage.bucket("pipelines").blob("root/build-contexts/ctx.tar.gz") \
        .upload_from_string(context.tarball.read_bytes())
    lines = []
    found, meta = run_build_stage(str(tmp_path / "artifact"), "gs://pipelines/root/run/ctx",
                                  REPO, push=True, trainer_source_uri=uri,
                                  clients=(cloud.storage, cloud.build, cloud.registry),
                                  log=lines.append)
    gpu = images.tagged(REPO, images.GPU, context.tag)
    assert found["gpu"] == {"reference": f"{REPO}/gpu-pipeline-gpu@{digest_of(gpu)}",
                            "tag": context.tag, "built": True}
    assert found["cpu"]["reference"].startswith(f"{REPO}/gpu-pipeline-cpu@sha256:")
    assert meta["digest"] == context.digest and meta["built"] == ["cpu", "gpu"]
    assert meta["source_uri"] == uri and meta["images"]["gpu"] == gpu
    # The build, for the run's cost (`pipeline_job_cost.build_items`).
    assert meta["cloud_build"] == {"id": "build-1", "machine": "E2_HIGHCPU_8",
                                   "start_time": "2026-11-27T10:00:00.000000Z",
                                   "finish_time": "2026-11-27T10:07:00.000000Z"}
    assert cloud.build.requests[0].build.source.storage_source.object_ == \
        "root/build-contexts/ctx.tar.gz"
    # A second run of the stage finds the image: no build.
    again, meta = run_build_stage(str(tmp_path / "artifact2"), "gs://pipelines/root/run/ctx2",
                                  REPO, push=True, trainer_source_uri=uri,
                                  clients=(cloud.storage, cloud.build, cloud.registry),
                                  log=lines.append)
    assert {k: v["reference"] for k, v in again.items()} == \
        {k: v["reference"] for k, v in found.items()}
    assert not meta["built"] and len(cloud.build.requests) == 1
    assert sum("exists" in line and "not rebuilt" in line for line in lines) == 2
    # An image that went missing (the other one exists) is built alone.
    del cloud.registry.tags[next(t for t in cloud.registry.tags if "/gpu-pipeline-cpu/" in t)]
    third, meta = run_build_stage(str(tmp_path / "artifact3"), "gs://pipelines/root/run/ctx3",
                                  REPO, push=True, trainer_source_uri=uri,
                                  clients=(cloud.storage, cloud.build, cloud.registry),
                                  log=lines.append)
    assert list(cloud.build.requests[-1].build.images) == \
        [images.tagged(REPO, images.CPU, context.tag)]
    assert meta["built"] == ["cpu"] and not third["gpu"]["built"]


def test_buckets_vertex_writes_to_outside_its_regions_are_refused_data_is_a_warning(cloud):
    # The emulator reports every bucket in the US multi-region, which Vertex AI refuses for
    # a job's outputs (googleapis/python-aiplatform#885).
    with pytest.raises(preflight.BucketRegionError) as refused:
        preflight.check_bucket_locations(config(), cloud.storage)
    assert str(refused.value) == (
        "vertex.pipeline_root bucket 'pipelines' is in US but vertex.region is us-central1: "
        "Vertex AI refuses a job whose outputs go to a bucket outside its region; use a "
        "bucket in us-central1")
    regional = cloud.storage.lookup_bucket("pipelines")
    regional._patch_property("location", "US-CENTRAL1")
    regional.patch()
    assert preflight.check_bucket_locations(config(), cloud.storage) == []
    # A fallback in another region would write there too.
    with pytest.raises(preflight.BucketRegionError, match=(
            r"vertex.pipeline_root bucket 'pipelines' is in US-CENTRAL1 but "
            r"vertex.fallbacks\[0\].region is us-east1: ")):
        preflight.check_bucket_locations(config(fallbacks=[{"region": "us-east1"}]),
                                         cloud.storage)
    # The batch predictions' destination too: the batch prediction job writes there.
    cloud.storage.create_bucket("scores")
    with pytest.raises(preflight.BucketRegionError, match=(
            "vertex.batch_predict.destination bucket 'scores' is in US but vertex.region is "
            "us-central1: ")):
        preflight.check_bucket_locations(config(batch_predict={
            "source": "gs://pipelines/in/", "destination": "gs://scores/out/"}), cloud.storage)
    missing = preflight.check_bucket_locations(config(pipeline_root="gs://absent/x"),
                                               cloud.storage)
    assert "vertex.pipeline_root bucket 'absent' does not exist" in missing[0]
    cloud.storage.create_bucket("images")
    for source in ("gs://images/flowers", "/gcs/images/flowers"):  # data too, on Vertex's mount
        cfg = config().model_copy(update={"dataset": config().dataset.model_copy(
            update={"source": source})})
        (found,) = preflight.check_bucket_locations(cfg, cloud.storage)
        assert found.startswith("dataset.source bucket 'images' is in US, not in the job's "
                                "region us-central1: reading and writing data across regions "
                                "makes jobs slower")


def test_vertex_settings_are_required(capsys, tmp_path):
    for name in ("circle", "square"):  # a local dataset folder that passes the local checks
        (tmp_path / name).mkdir()
    assert main(["submit", "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "vertex.project, vertex.pipeline_root, vertex.image_repository must be set" in err
    assert main(["submit", "--dry-run", "--project", "my-proj", "--pipeline-root", "s3://x",
                 "--image-repository", REPO]) == 2
    assert "vertex.pipeline_root is 's3://x'; expected gs://BUCKET/PATH" in capsys.readouterr().err
    assert main(["submit", "--dry-run", "--project", "my-proj", "--pipeline-root", "gs://xyz/r",
                 "--image-repository", REPO, "--dataset-source", str(tmp_path)]) == 2
    assert "a path on this machine, which the pipeline on Vertex AI cannot read" \
        in capsys.readouterr().err


# --- Schedules ------------------------------------------------------------------------------


@pytest.mark.slow
def test_schedule_request_and_sdk_create(cloud):
    cfg = load_config(overrides={"vertex": config().vertex.model_dump(),
        "schedule": {"cron": "TZ=Europe/Paris 0 4 * * 1", "max_concurrent_run_count": 2}})
    dry = schedules.create_schedule(cfg, dry_run=True, clients=dataclasses.replace(cloud))
    assert isinstance(dry, aiplatform_v1.CreateScheduleRequest)
    assert dry.schedule.cron == "TZ=Europe/Paris 0 4 * * 1"
    assert dry.schedule.max_concurrent_run_count == 2
    assert dry.schedule.create_pipeline_job_request.pipeline_job.service_account == \
        "trainer@my-proj.iam.gserviceaccount.com"

    schedule = schedules.create_schedule(cfg, dry_run=False, clients=cloud,
                                      credentials=AnonymousCredentials())
    sent = cloud.schedule_api.calls[-1]
    assert isinstance(sent, aiplatform_v1.CreateScheduleRequest)
    assert sent.schedule.cron == dry.schedule.cron
    assert sent.schedule.max_concurrent_run_count == 2
    sent_job = sent.schedule.create_pipeline_job_request.pipeline_job
    assert sent_job.service_account == "trainer@my-proj.iam.gserviceaccount.com"
    assert sent_job.runtime_config == dry.schedule.create_pipeline_job_request.pipeline_job \
        .runtime_config
    assert schedule.resource_name.endswith("/schedules/42")


def test_list_pause_resume_and_delete_schedules(cloud):
    cfg = config()
    (found,) = schedules.list_schedules(cfg, cloud)
    assert found.display_name == "gpu-pipeline-weekly"
    assert cloud.schedule_api.calls[-1] == aiplatform_v1.ListSchedulesRequest(
        parent="projects/my-proj/locations/us-central1", order_by="create_time desc")
    name = "projects/my-proj/locations/us-central1/schedules/42"
    for action, request in (("pause", aiplatform_v1.PauseScheduleRequest),
                            ("resume", aiplatform_v1.ResumeScheduleRequest),
                            ("delete", aiplatform_v1.DeleteScheduleRequest)):
        assert schedules.change_schedule(cfg, action, "42", cloud) == name
        assert cloud.schedule_api.calls[-1] == request(name=name)
    assert "cron '0 3 * * 1'" in schedules.describe(found)
    with pytest.raises(schedules.VertexSettingsError, match="neither a schedule ID"):
        schedules.change_schedule(cfg, "pause", "../42", cloud)


# --- Publishing and sharing ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def pinned_spec(tmp_path_factory):
    """The spec of a run, as `submit` and `publish` make it: components pinned by digest."""
    from pipelines.vertex.spec import compile_for_vertex

    image = images.reference(REPO, images.CPU, DIGEST)
    return compile_for_vertex(config(), tmp_path_factory.mktemp("pinned") / "spec.yaml", image,
                              "gs://pipelines/root/build-contexts/context-x.tar.gz")


@pytest.mark.slow
def test_the_placeholder_image_of_compiled_is_replaced_for_every_component(pinned_spec):
    # compiled/ names the project image with a placeholder repository (for review and the
    # golden test); every run and every published spec replaces it with the built image.
    committed = SPEC.read_text()
    placeholder = images.pipeline_image()
    assert "PROJECT_ID" in placeholder and placeholder in committed
    assert publish.unpinned_images(SPEC) == [placeholder]
    text = pinned_spec.read_text()
    assert "PROJECT_ID" not in text and publish.unpinned_images(pinned_spec) == []
    executors = yaml.safe_load(text)["deploymentSpec"]["executors"]
    ours = {name for name, e in executors.items() if "container" in e
            and "pipeline-components" not in e["container"]["image"]}
    assert ours == {name for name, e in yaml.safe_load(committed)["deploymentSpec"]
                    ["executors"].items() if "container" in e
                    and e["container"]["image"] == placeholder}
    assert {executors[n]["container"]["image"] for n in ours} == \
        {images.reference(REPO, images.CPU, DIGEST)}
    # The configuration's values are the published spec's defaults.
    params = yaml.safe_load(text)["root"]["inputDefinitions"]["parameters"]
    assert params["project"]["defaultValue"] == "my-proj"
    assert params["training"]["defaultValue"]["epochs"] == 3


def test_the_serving_check_runs_in_the_configured_serving_image(tmp_path):
    """The export stage starts the model server on the new model: with
    `vertex.serving_image` set, in that image (the serving container's own server)."""
    from pipelines.vertex.spec import EXPORT_EXECUTOR, compile_for_vertex

    component = images.reference(REPO, images.CPU, DIGEST)
    serving = images.reference(REPO, images.GPU, "sha256:" + "b" * 64)
    spec = compile_for_vertex(config(serving_image=serving), tmp_path / "spec.yaml", component,
                              "gs://pipelines/root/build-contexts/context-x.tar.gz")
    executors = yaml.safe_load(spec.read_text())["deploymentSpec"]["executors"]
    assert executors[EXPORT_EXECUTOR]["container"]["image"] == serving
    assert executors["exec-report-training"]["container"]["image"] == component


def test_publish_to_cloud_storage(cloud, pinned_spec):
    written = publish.publish(pinned_spec, "gs://pipelines/shared/", ["v0.1.0", "latest"],
                              storage=cloud.storage)
    assert written == ["gs://pipelines/shared/gpu-training-pipeline/v0.1.0.yaml",
                       "gs://pipelines/shared/gpu-training-pipeline/latest.yaml"]
    blob = cloud.storage.bucket("pipelines").blob("shared/gpu-training-pipeline/latest.yaml")
    assert blob.download_as_bytes() == pinned_spec.read_bytes()


@pytest.mark.slow
def test_publish_builds_or_finds_the_image_first(cloud, capsys):
    cfg = config()
    assert publish.publish_run(cfg, "gs://pipelines/shared", ["v1"], dry_run=True,
                               clients=dataclasses.replace(cloud)) == []
    assert cloud.build.requests == [] and "nothing was uploaded" in capsys.readouterr().out
    (where,) = publish.publish_run(cfg, "gs://pipelines/shared", ["v1"], dry_run=False,
                                   clients=cloud, credentials=AnonymousCredentials())
    assert len(cloud.build.requests) == 1  # the images did not exist: built once
    name = where[len("gs://pipelines/"):]
    spec = yaml.safe_load(cloud.storage.bucket("pipelines").blob(name).download_as_bytes())
    images_used = {e["container"]["image"] for e in spec["deploymentSpec"]["executors"].values()
                   if "container" in e and "pipeline-components" not in e["container"]["image"]}
    (image,) = images_used
    assert image.startswith(f"{REPO}/gpu-pipeline-cpu@sha256:")
    assert not image.endswith(images.UNBUILT_DIGEST)
    source = spec["root"]["inputDefinitions"]["parameters"]["trainer_source_uri"]
    assert cloud.storage.bucket("pipelines").blob(
        source["defaultValue"][len("gs://pipelines/"):]).exists()


def test_publish_to_a_kfp_registry_with_the_real_client(pinned_spec):
    received = {}

    class Registry(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            body = self.rfile.read(int(self.headers["Content-Length"]))
            received.update(path=self.path, body=body, type=self.headers["Content-Type"])
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"gpu-training-pipeline/sha256:" + b"cd" * 32)

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Registry)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        host = f"http://127.0.0.1:{server.server_port}/my-proj/pipelines"
        (where,) = publish.publish(pinned_spec, host, ["v0.1.0", "latest"])
    finally:
        server.shutdown()
    assert where == f"{host}/gpu-training-pipeline/sha256:" + "cd" * 32
    assert received["path"] == "/my-proj/pipelines"
    assert received["type"].startswith("multipart/form-data")
    assert b'name="tags"\r\n\r\nv0.1.0,latest' in received["body"]
    assert pinned_spec.read_bytes() in received["body"]


def test_publish_errors(tmp_path, pinned_spec):
    with pytest.raises(publish.PublishError, match="neither an Artifact Registry"):
        publish.publish(pinned_spec, "s3://bucket", ["v1"])
    with pytest.raises(publish.PublishError, match="does not start with 'sha256'"):
        publish.publish(pinned_spec, "gs://b/x", ["sha256:abc"])
    with pytest.raises(publish.PublishError, match="not pinned by digest"):
        publish.publish(SPEC, "gs://b/x", ["v1"])
    with pytest.raises(publish.PublishError, match="gpu-pipeline compile` first"):
        publish.publish(tmp_path / "none.yaml", "gs://b/x", ["v1"])


@pytest.mark.slow
def test_another_team_uses_the_spec_as_a_step(tmp_path):
    from kfp import compiler, components, dsl

    training = components.load_component_from_file(str(SPEC))

    @dsl.component(base_image="python:3.11")
    def announce(message: str):
        print(message)

    @dsl.pipeline(name="vision-team-nightly")
    def nightly(project: str, source: str):
        # Partial option dicts: the stages fill in the declared defaults.
        run = training(project=project, dataset={"source": source}, training={"epochs": 20},
                       vertex={"worker_pool_specs": [{
                           "machine_spec": {"machine_type": "a2-highgpu-1g",
                                            "accelerator_type": "NVIDIA_TESLA_A100",
                                            "accelerator_count": 1},
                           "replica_count": 1}]})
        # The pipeline has no outputs (KFP allows none from inside its exit handler): a
        # step that follows it depends on it finishing.
        announce(message="retrained").after(run)

    out = tmp_path / "nightly.yaml"
    compiler.Compiler().compile(nightly, str(out))
    spec = yaml.safe_load(out.read_text())
    tasks = spec["root"]["dag"]["tasks"]
    assert {"gpu-training-pipeline", "announce"} <= set(tasks)
    assert tasks["announce"]["dependentTasks"] == ["gpu-training-pipeline"]
    assert "comp-train-on-vertex-ai" in json.dumps(spec["components"])


@pytest.mark.slow
def test_schedule_cli_dry_run(capsys):
    args = ["--project", "my-proj", "--pipeline-root", "gs://pipelines/root",
            "--image-repository", REPO, "--dry-run"]
    create = ["schedule", "create", "--cron", "TZ=Etc/UTC 0 5 * * *", "--max-concurrent-runs",
              "2", *args]
    assert main(create) == 0
    short = capsys.readouterr().out
    assert re.search(r"  CreateScheduleRequest to projects/my-proj/locations/us-central1: "
                     r"[\d,]+ bytes \(--verbose prints it\)", short)
    assert short.rstrip().endswith(f"{NOTHING_SENT} (--verbose prints the request body)")
    assert NOTHING_SENT == "dry run: nothing was uploaded, built or submitted"
    # When it would run: the cron, its time zone and the next three run times.
    runs = re.search(r"schedule gpu-pipeline-weekly: cron 'TZ=Etc/UTC 0 5 \* \* \*' in "
                     r"Etc/UTC; next runs (.*)", short)
    times = runs[1].split(", ")
    assert len(times) == 3 and all(re.fullmatch(r"\w{3} \d{4}-\d\d-\d\d 05:00 UTC", t)
                                   for t in times), times
    assert main([*create, "--verbose"]) == 0
    out = capsys.readouterr().out
    body, _ = json.JSONDecoder().raw_decode(
        out[out.index("CreateScheduleRequest:") + len("CreateScheduleRequest:"):].lstrip())
    # The dry run ends with what to check in the request.
    assert "cache: only prepare-dataset may be reused" in out
    assert f"the registered model is served by {REPO}/gpu-pipeline-cpu@sha256:" in out
    assert body["schedule"]["cron"] == "TZ=Etc/UTC 0 5 * * *"
    assert body["schedule"]["maxConcurrentRunCount"] == "2"
    assert body["schedule"]["createPipelineJobRequest"]["pipelineJob"]["runtimeConfig"][
        "gcsOutputDirectory"] == "gs://pipelines/root"
    with pytest.raises(SystemExit):
        main(["schedule", "pause"])
    assert "the following arguments are required: schedule_id" in capsys.readouterr().err


@pytest.mark.slow
def test_submit_dry_run_json_is_one_document_of_every_request(capsys):
    args = ["submit", "--dry-run", "--json", "--project", "my-proj", "--pipeline-root",
            "gs://pipelines/root", "--image-repository", REPO]
    assert main(args) == 0
    printed = capsys.readouterr()
    found = json.loads(printed.out)  # stdout holds the document alone
    assert [r["kind"] for r in found["requests"]] == [
        "ListQuotaInfosRequest", "ListCustomJobsRequest", "CreateBuildRequest",
        "CreatePipelineJobRequest"]
    job = found["requests"][-1]
    assert job["target"] == "projects/my-proj/locations/us-central1"
    assert job["body"]["pipelineJob"]["runtimeConfig"]["gcsOutputDirectory"] == \
        "gs://pipelines/root"
    assert found["sent"] is False and found["dataflow_pipeline_options"] is None
    # What the lines say besides the requests: the permissions submit would check, the
    # training plan every replica applies, and the cost estimate.
    assert {c["resource"] for c in found["iam_checks"]} >= {"projects/my-proj"}
    assert all(c["permissions"] for c in found["iam_checks"])
    assert found["training_plan"]["strategy"] == "multi_worker_mirrored"
    assert found["cost_estimate"][0].startswith("cost estimate (without tuning trials")
    assert found["cost_estimate"][1].startswith("  primary (us-central1): ")
    # The progress lines went to stderr, ending with the line that says nothing was sent.
    assert printed.err.rstrip().endswith(NOTHING_SENT)
