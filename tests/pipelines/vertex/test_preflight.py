"""What would make a first real run on Vertex AI fail or waste its GPUs, each against Google's
own client libraries and the fake of the Google APIs on loopback (tests/support/vertex_emulator):
image references with a tag and a digest, builds abandoned too early, a Cloud Build
location that does not exist, missing IAM permissions, sources Vertex AI cannot read."""

from __future__ import annotations

import json

import pytest
from google.api_core import exceptions
from google.auth.credentials import AnonymousCredentials
from google.cloud import aiplatform_v1, artifactregistry_v1
from google.cloud.devtools import cloudbuild_v1
from google.iam.v1 import iam_policy_pb2

from components import images
from components.build import cloud_build
from pipelines.cli import main
from pipelines.config_loading import load_config
from pipelines.vertex import iam, runs
from tests.support.google_fakes import iam_clients, rest_client
from tests.support.vertex_emulator.pipelines import EmulatedPipelines, RequestRefused

REPO = "us-central1-docker.pkg.dev/my-proj/ml-images"
DIGEST = "sha256:" + "ab" * 32
ACCOUNT = "trainer@my-proj.iam.gserviceaccount.com"





def config(**vertex):
    return load_config(overrides={"vertex": {
        "project": "my-proj", "region": "us-central1", "pipeline_root": "gs://pipelines/root",
        "image_repository": REPO, "service_account": ACCOUNT, **vertex}})


# --- Image references: a digest alone ------------------------------------------------------


def test_vertex_refuses_a_reference_with_a_tag_and_a_digest_in_a_custom_job(apis):
    client = rest_client(aiplatform_v1.JobServiceClient, apis)

    def job(image):
        pool = aiplatform_v1.WorkerPoolSpec(
            machine_spec=aiplatform_v1.MachineSpec(machine_type="n1-standard-8"),
            replica_count=1, container_spec=aiplatform_v1.ContainerSpec(image_uri=image))
        return client.create_custom_job(
            parent="projects/my-proj/locations/us-central1",
            custom_job=aiplatform_v1.CustomJob(display_name="j", job_spec=aiplatform_v1.
                                               CustomJobSpec(worker_pool_specs=[pool])))

    # What the project sent before: the content tag and the digest (kubeflow/pipelines#8490).
    with pytest.raises(exceptions.BadRequest, match="Invalid image URI"):
        job(f"{REPO}/gpu-pipeline-gpu:src-0123456789abcdef@{DIGEST}")
    created = job(images.reference("us-docker.pkg.dev/other/repo", images.GPU, DIGEST))
    assert created.name.startswith("projects/my-proj/locations/us-central1/customJobs/")


def test_vertex_refuses_a_reference_with_a_tag_and_a_digest_in_a_model_upload(apis):
    client = rest_client(aiplatform_v1.ModelServiceClient, apis)

    def upload(image):
        return client.upload_model(
            parent="projects/my-proj/locations/us-central1",
            model=aiplatform_v1.Model(display_name="m", artifact_uri="gs://b/m",
                                      container_spec=aiplatform_v1.ModelContainerSpec(
                                          image_uri=image)))

    with pytest.raises(exceptions.BadRequest, match="both a tag and a digest"):
        upload(f"{REPO}/gpu-pipeline-cpu:src-0123456789abcdef@{DIGEST}")
    upload(images.reference(REPO, images.CPU, DIGEST))
    assert apis.models[-1]["request"]["model"]["containerSpec"]["imageUri"] == \
        images.reference(REPO, images.CPU, DIGEST)


@pytest.mark.slow
def test_vertex_refuses_a_pipeline_whose_components_name_a_tag_and_a_digest(apis, tmp_path,
                                                                            capsys):
    request = runs.submit(config(), dry_run=True)
    out = capsys.readouterr().out
    spec = request.pipeline_job.pipeline_spec
    ours = {e["container"]["image"] for e in spec["deploymentSpec"]["executors"].values()
            if "container" in e and "/ml-images/" in e["container"]["image"]}
    # The dry run prints digest-only references everywhere (the digest once built).
    assert ours == {images.reference(REPO, images.CPU, images.UNBUILT_DIGEST)}
    assert "GPU worker pools run " + images.reference(REPO, images.GPU, images.UNBUILT_DIGEST) \
        in out and "@sha256:" in out and ":src-" not in out.split("images, named")[1]
    emulated = EmulatedPipelines(tmp_path, mount=None, environment={},
                                 image_problem=apis.image_problem)
    text = json.dumps(aiplatform_v1.PipelineJob.to_dict(request.pipeline_job))
    old = text.replace(images.reference(REPO, images.CPU, images.UNBUILT_DIGEST),
                       f"{REPO}/gpu-pipeline-cpu:src-0123456789abcdef@{DIGEST}")
    request.pipeline_job = aiplatform_v1.PipelineJob.from_json(old)
    with pytest.raises(RequestRefused, match="400 INVALID_ARGUMENT: Invalid image URI"):
        emulated.run(request)


# --- Cloud Build: the wait, the machine, the location ---------------------------------------


class SlowBuild:
    """A Cloud Build operation that finishes after `minutes` of a simulated clock."""

    def __init__(self, clock, minutes):
        self.clock, self.done_at = clock, minutes * 60
        self.build = cloudbuild_v1.Build(id="b-1", log_url="https://console/b-1",
                                         status=cloudbuild_v1.Build.Status.WORKING)

    def done(self):
        return self.clock.now >= self.done_at

    @property
    def metadata(self):
        return cloudbuild_v1.BuildOperationMetadata(build=self.build)

    def result(self, timeout):
        return self.build


class Clock:
    now = 0.0

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


def test_a_build_is_waited_for_as_long_as_it_may_run_with_its_progress_printed():
    clock, lines = Clock(), []
    settings = cloud_build.BuildSettings(timeout_seconds=3600)
    # 40 minutes: google-api-core's default wait (900 s) would have given up.
    build = cloud_build.wait_for_build(SlowBuild(clock, 40), settings, log=lines.append,
                                       clock=clock, sleep=clock.sleep)
    assert build.id == "b-1" and clock.now >= 40 * 60 > 900
    assert len(lines) >= 30 and all("logs: https://console/b-1" in line for line in lines)
    assert "Cloud Build b-1: WORKING after 0 s (waiting up to 125 min)" in lines[0]
    # Past the build's queue time, timeout and margin, the client stops with the log URL.
    clock.now = 0.0
    with pytest.raises(cloud_build.CloudBuildError, match=r"has not finished after 125 min "
                       r"\(queue 60 min \+ timeout 60 min \+ margin\); it may still be "
                       r"running; logs: https://console/b-1"):
        cloud_build.wait_for_build(SlowBuild(clock, 600), settings, log=lines.append,
                                   clock=clock, sleep=clock.sleep)


@pytest.mark.slow
def test_real_client_polls_a_build_that_is_not_done_yet(apis):
    apis.build_seconds = 3.0
    registry = rest_client(artifactregistry_v1.ArtifactRegistryClient, apis)
    builder = rest_client(cloudbuild_v1.CloudBuildClient, apis)
    lines = []
    found = cloud_build.ensure_images(REPO, "src-0123456789abcdef", "gs://b/ctx.tar.gz",
                                      build_client=builder, registry_client=registry,
                                      log=lines.append)
    assert {k: v["built"] for k, v in found.items()} == {"gpu": True, "cpu": True}
    assert len(apis.recorded(r"/operations/build-1$", method="GET")) >= 3
    assert any("WORKING" in line and "logs: https://" in line for line in lines)
    assert all("@sha256:" in v["reference"] and ":src-" not in v["reference"]
               for v in found.values())


def test_a_multi_region_repository_builds_in_a_cloud_build_location_that_exists(apis):
    builder = rest_client(cloudbuild_v1.CloudBuildClient, apis)
    repository = cloud_build.Repository.parse("us-docker.pkg.dev/my-proj/ml-images")
    request = cloud_build.build_request(repository, "src-1", "gs://b/ctx.tar.gz")
    assert request.parent == "projects/my-proj/locations/global"
    builder.create_build(request=request)
    # What the project sent before: the repository's multi-region as the location.
    request.parent = "projects/my-proj/locations/us"
    with pytest.raises(exceptions.BadRequest, match="invalid location 'us'"):
        builder.create_build(request=request)
    regional = cloud_build.Repository.parse("europe-west4-docker.pkg.dev/my-proj/ml-images")
    assert cloud_build.build_location(regional) == "europe-west4"


def test_the_build_machine_and_timeout_come_from_the_config():
    settings = config(build_machine_type="E2_HIGHCPU_32", build_timeout="7200s") \
        .vertex.build_settings()
    request = cloud_build.build_request(cloud_build.Repository.parse(REPO), "src-1",
                                        "gs://b/ctx.tar.gz", settings=settings)
    assert request.build.options.machine_type == \
        cloudbuild_v1.BuildOptions.MachineType.E2_HIGHCPU_32
    assert request.build.timeout.seconds == 7200
    assert settings.wait_seconds == 3600 + 7200 + 300


# --- IAM, known before the run ----------------------------------------------------------------


def test_submit_reports_every_missing_permission_at_once_and_sends_nothing_else(apis):
    apis.denied = {"cloudbuild.builds.create", "storage.objects.create",
                   "iam.serviceAccounts.actAs"}
    with pytest.raises(iam.PermissionsError) as raised:
        runs.submit(config(), dry_run=False, clients=iam_clients(apis),
                    credentials=AnonymousCredentials())
    message = str(raised.value)
    assert "cloudbuild.builds.create on projects/my-proj (roles/cloudbuild.builds.editor)" \
        in message
    assert "storage.objects.create on gs://pipelines" in message
    assert f"iam.serviceAccounts.actAs on projects/-/serviceAccounts/{ACCOUNT}" in message
    assert "aiplatform.pipelineJobs.create" not in message
    # The requests, as their API types; nothing uploaded, built or submitted.
    project, repository, account = (iam_policy_pb2.TestIamPermissionsRequest(**r.body)
                                    for r in apis.recorded(r":testIamPermissions$"))
    assert list(project.permissions) == [*iam.PROJECT_PERMISSIONS, "cloudbuild.builds.create"]
    assert "cloudquotas.quotas.get" in iam.PROJECT_PERMISSIONS  # submit reads the quotas
    assert list(repository.permissions) == ["artifactregistry.tags.get"]
    assert apis.recorded(r":testIamPermissions$")[1].path == \
        "/v1/projects/my-proj/locations/us-central1/repositories/ml-images:testIamPermissions"
    assert list(account.permissions) == ["iam.serviceAccounts.actAs"]
    (bucket,) = apis.recorded(r"/iam/testPermissions$", method="GET")
    assert bucket.path == "/storage/v1/b/pipelines/iam/testPermissions"
    # (google-cloud-storage itself reads the bucket's metadata in the background.)
    assert [r.path for r in apis.requests if "testPermissions" not in r.path
            and "testIamPermissions" not in r.path and r.method != "GET"] == []


def test_submit_passes_the_iam_check_when_everything_is_granted(apis, capsys):
    checked = iam.check_permissions(config(), iam_clients(apis), dry_run=False,
                                    log=print)
    assert len(checked) == 4 and "the caller holds the 9 permissions" in capsys.readouterr().out
    # Without a run-as account, there is no actAs to check.
    assert [c.api for c in iam.checks(config(service_account=""))] == \
        ["Resource Manager", "Artifact Registry", "Cloud Storage"]
    # Images in another project: Cloud Build runs there, and is asked there.
    other = iam.checks(config(image_repository="europe-west4-docker.pkg.dev/images-prj/team"))
    assert [(c.resource, c.permissions) for c in other[:3]] == [
        ("projects/my-proj", iam.PROJECT_PERMISSIONS),
        ("projects/images-prj", ("cloudbuild.builds.create",)),
        ("projects/images-prj/locations/europe-west4/repositories/team",
         ("artifactregistry.tags.get",))]


REPOSITORY = "projects/my-proj/locations/us-central1/repositories/ml-images"
CALLER = {"projects/my-proj": {*iam.PROJECT_PERMISSIONS, "cloudbuild.builds.create"},
          "gs://pipelines": set(iam.BUCKET_PERMISSIONS),
          f"projects/-/serviceAccounts/{ACCOUNT}": {"iam.serviceAccounts.actAs"}}


def test_a_reader_granted_on_the_repository_passes_and_one_granted_nowhere_does_not(apis,
                                                                                   capsys):
    # What the README tells admins: roles/artifactregistry.reader on the repository. A
    # grant there is invisible on the project (IAM inherits downward), where the check
    # used to ask.
    apis.grants = {**CALLER, REPOSITORY: {"artifactregistry.tags.get"}}
    assert len(iam.check_permissions(config(), iam_clients(apis), dry_run=False,
                                     log=print)) == 4
    # Granted on the project, it reaches the repository too.
    apis.grants = {**CALLER, "projects/my-proj": CALLER["projects/my-proj"]
                   | {"artifactregistry.tags.get"}}
    iam.check_permissions(config(), iam_clients(apis), dry_run=False, log=print)
    apis.grants = dict(CALLER)
    with pytest.raises(iam.PermissionsError, match=r"artifactregistry\.tags\.get on "
                       f"{REPOSITORY} \\(roles/artifactregistry\\.reader\\)"):
        iam.check_permissions(config(), iam_clients(apis), dry_run=False, log=print)


def test_the_dry_run_prints_the_iam_requests_and_digest_only_images(capsys):
    args = ["submit", "--dry-run", "--project", "my-proj", "--pipeline-root",
            "gs://pipelines/root", "--image-repository", REPO, "--service-account", ACCOUNT]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "Resource Manager testIamPermissions on projects/my-proj: " \
           "aiplatform.pipelineJobs.create, cloudquotas.quotas.get, " \
           "aiplatform.customJobs.list, cloudbuild.builds.create" in out
    assert "Artifact Registry testIamPermissions on projects/my-proj/locations/us-central1/" \
           "repositories/ml-images: artifactregistry.tags.get" in out
    # What only the run's identities can hold is listed, as not checked.
    assert "IAM: not checked (testIamPermissions answers for the caller only)" in out
    assert f"  {ACCOUNT} (every step and the CustomJob): roles/aiplatform.user" in out
    assert f"  Cloud Build ({ACCOUNT}): roles/artifactregistry.writer on projects/my-proj/" \
           "locations/us-central1/repositories/ml-images" in out
    assert f"IAM testIamPermissions on projects/-/serviceAccounts/{ACCOUNT}: " \
           "iam.serviceAccounts.actAs" in out
    assert "Cloud Build: us-central1, E2_HIGHCPU_8, timeout 3600 s" in out
    # A Dockerfile per image, so each step builds only its own image's stages.
    assert "  step build-gpu: docker build --file docker/gpu.Dockerfile (only this image's " \
        "stages, whichever builder runs)" in out
    assert "  step build-cpu: docker build --file docker/cpu.Dockerfile" in out
    assert "the GPU image's Reduction Server plugin: " + (
        images.reduction_server_plugin_source()) in out
    if not images.reduction_server_plugin():  # resolved when the image is built
        assert "the newest google-reduction-server in https://packages.cloud.google.com/apt " \
               "google-fast-socket main, resolved when the GPU image is built" in out
    references = {line.split(" run ")[-1] for line in out.splitlines() if " run " in line
                  and "@sha256:" in line}
    assert references == {images.reference(REPO, i, images.UNBUILT_DIGEST)
                          for i in images.PROJECT_IMAGES}


# --- Sources Vertex AI cannot read ---------------------------------------------------------


def test_a_tfds_source_is_refused_before_a_vertex_run(capsys):
    from components.dataset.dataset_options import DatasetOptions
    from pipelines.config import Config
    from pipelines.vertex.preflight import VertexSettingsError, require_vertex_settings

    # Even a TFDS dataset prepared on this machine: the images Vertex AI runs have neither
    # TFDS nor the data.
    cfg = Config(dataset=DatasetOptions(source="tfds://mnist"), vertex=config().vertex)
    with pytest.raises(VertexSettingsError, match="dataset.source is 'tfds://mnist', a "
                       "TensorFlow Datasets dataset on this machine's disk, which the "
                       "pipeline on Vertex AI cannot read"):
        require_vertex_settings(cfg)
    # One that is not on disk is refused when the configuration is loaded, in one line.
    args = ["submit", "--dry-run", "--project", "my-proj", "--pipeline-root",
            "gs://pipelines/root", "--image-repository", REPO, "--dataset-source",
            "tfds://gp_not_on_disk"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "dataset.source is 'tfds://gp_not_on_disk'" in err
    assert len(err) < 2000 and "Traceback" not in err


def test_a_batch_source_on_this_machine_is_refused_before_a_vertex_run():
    from pipelines.vertex.preflight import VertexSettingsError, require_vertex_settings

    cfg = config(batch_predict={"source": "to-score/", "destination": "gs://b/scored",
                                "machine_type": "a2-highgpu-1g"})
    with pytest.raises(VertexSettingsError) as raised:
        require_vertex_settings(cfg)
    message = str(raised.value)
    assert "vertex.batch_predict.source is 'to-score/'; on Vertex AI expected a gs:// path" \
        in message and "destination" not in message
    # The machine under stage 1's rules: an A2 machine comes with its GPUs.
    assert "batch_predict (the prediction machine)" in message
    require_vertex_settings(config(batch_predict={"source": "gs://b/to-score/"}))


def test_vertex_ai_clients_are_made_once_per_region_at_its_endpoint(monkeypatch):
    """A region's resources are answered at its own endpoint: each region gets its client
    (the persistent-resource client once kept the first region's for every region)."""
    import google.auth

    from pipelines.vertex.clients import Clients

    monkeypatch.setattr(google.auth, "default",
                        lambda *a, **k: (AnonymousCredentials(), "my-proj"))
    clients = Clients()
    for get in (clients.get_jobs, clients.get_persistent):
        east, central = get("us-east1"), get("us-central1")
        assert east is get("us-east1") and east is not central
        assert east._transport._host.startswith("us-east1-aiplatform.googleapis.com")
        assert central._transport._host.startswith("us-central1-aiplatform.googleapis.com")
    given = Clients(persistent="recording client")
    assert given.get_persistent("us-east1") == "recording client"  # tests pass their own
