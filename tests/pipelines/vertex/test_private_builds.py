"""Builds inside a perimeter: a Cloud Build private pool, the build's inputs from mirrors,
against Google's Cloud Build client and the fake APIs on loopback, where a pool without
public egress fails a build that reads anything from the internet."""

from __future__ import annotations

import pytest
from google.api_core import exceptions
from google.cloud import artifactregistry_v1
from google.cloud.devtools import cloudbuild_v1

from components import images
from components.build import cloud_build
from components.build.sources import BuildSources
from pipelines.cli import main
from pipelines.config_loading import ConfigError, load_config
from pipelines.vertex import iam
from pipelines.vertex.preflight import BuildPoolError, check_build_pool
from tests.support.google_fakes import iam_clients, rest_client

REPO = "us-central1-docker.pkg.dev/my-proj/ml-images"
POOL = "projects/net-prj/locations/us-central1/workerPools/private"
DIGEST = "sha256:" + "cd" * 32
MIRRORS = {"python_base_image": f"us-docker.pkg.dev/my-proj/hub/library/python@{DIGEST}",
           "beam_sdk_image": f"us-docker.pkg.dev/my-proj/hub/apache/beam_python3.11_sdk@{DIGEST}",
           "pip_index_url": "https://us-python.pkg.dev/my-proj/pypi/simple/",
           "apt_mirror_url": "https://apt-mirror.corp.example/google-apt"}


def config(**vertex):
    return load_config(overrides={"vertex": {
        "project": "my-proj", "region": "us-central1", "pipeline_root": "gs://pipelines/root",
        "image_repository": REPO, **vertex}})


def build(apis, settings):
    return cloud_build.ensure_images(
        REPO, "src-0123456789abcdef", "gs://b/ctx.tar.gz",
        build_client=rest_client(cloudbuild_v1.CloudBuildClient, apis),
        registry_client=rest_client(artifactregistry_v1.ArtifactRegistryClient, apis),
        settings=settings, log=lambda line: None, poll_seconds=0.1)


def test_a_build_in_a_closed_pool_reads_every_input_from_its_mirror(apis):
    apis.build_seconds = 0.1
    apis.closed_pool(POOL)
    settings = config(build_worker_pool=POOL, **MIRRORS).vertex.build_settings()
    request = cloud_build.build_request(cloud_build.Repository.parse(REPO), "src-1",
                                        "gs://b/ctx.tar.gz", settings=settings)
    # In the pool's region, in the repository's project; the pool's machines, logs in
    # Cloud Logging (a perimeter's build cannot write the default logs bucket).
    assert request.parent == "projects/my-proj/locations/us-central1"
    options = request.build.options
    assert options.pool.name == POOL
    assert options.machine_type == cloudbuild_v1.BuildOptions.MachineType.UNSPECIFIED
    assert options.logging == cloudbuild_v1.BuildOptions.LoggingMode.CLOUD_LOGGING_ONLY
    gpu, cpu = (list(step.args) for step in request.build.steps)
    index = ["--build-arg", f"PIP_INDEX={MIRRORS['pip_index_url']}"]
    # The Artifact Registry index is read with the build account's token, from the
    # metadata server the cloudbuild network reaches.
    assert gpu[:4] == ["build", "--file", images.GPU.dockerfile, "--network=cloudbuild"]
    assert gpu[4:-3] == [
        "--build-arg", f"PYTHON_BASE={MIRRORS['python_base_image']}",
        "--build-arg", "APT_KEY_FINGERPRINTS=" + ",".join(images.GOOGLE_APT_KEY_FINGERPRINTS),
        "--build-arg", f"APT_MIRROR={MIRRORS['apt_mirror_url']}", *index]
    assert cpu[4:-3] == ["--build-arg", f"PYTHON_BASE={MIRRORS['python_base_image']}",
                         "--build-arg", f"BEAM_SDK={MIRRORS['beam_sdk_image']}", *index]
    found = build(apis, settings)
    assert {k: v["built"] for k, v in found.items()} == {"gpu": True, "cpu": True}

    # Without the mirrors, the same pool fails the build: what the pre-flight prevents.
    apis.tags.clear()
    with pytest.raises(exceptions.GoogleAPICallError, match="Build failed"):
        build(apis, config(build_worker_pool=POOL).vertex.build_settings())
    assert list(apis.builds.values())[-1]["build"]["statusDetail"].startswith(
        "could not reach Docker Hub (python:3.11-slim-bookworm@sha256:")


def test_a_pool_is_found_only_in_its_own_region(apis):
    apis.closed_pool(POOL)
    builder = rest_client(cloudbuild_v1.CloudBuildClient, apis)
    settings = config(build_worker_pool=POOL, **MIRRORS).vertex.build_settings()
    # A multi-region repository builds in `global`, but a pool's build goes to its region.
    multi = cloud_build.Repository.parse("us-docker.pkg.dev/my-proj/ml-images")
    request = cloud_build.build_request(multi, "src-1", "gs://b/c.tar.gz", settings=settings)
    assert request.parent == "projects/my-proj/locations/us-central1"
    builder.create_build(request=request)
    request.parent = "projects/my-proj/locations/global"  # what the project sent before
    with pytest.raises(exceptions.NotFound, match="workerpool not found"):
        builder.create_build(request=request)


def test_the_preflight_refuses_a_closed_pool_without_mirrors_naming_each(apis):
    apis.closed_pool(POOL)
    lines = []
    with pytest.raises(BuildPoolError) as refused:
        check_build_pool(config(build_worker_pool=POOL, pip_index_url=MIRRORS["pip_index_url"]),
                         iam_clients(apis), dry_run=False, log=lines.append)
    message = str(refused.value)
    assert message.startswith("the images cannot be built (nothing was uploaded")
    for option in ("python_base_image", "beam_sdk_image", "apt_mirror_url"):
        assert f"vertex.{option} is not set" in message
    assert "vertex.pip_index_url" not in message
    assert message.count("\n  - ") == 3  # one line per input without a mirror
    assert f"the Cloud Build private pool {POOL} (no public egress)" in message
    # Every mirror given: the pool is read and the run goes on.
    check_build_pool(config(build_worker_pool=POOL, **MIRRORS), iam_clients(apis),
                     dry_run=False, log=lines.append)
    assert lines == [f"Cloud Build: the private pool {POOL} has no public egress; every "
                     "input of the build comes from a mirror"]
    # A pool with public egress needs no mirrors.
    apis.worker_pools[POOL]["privatePoolV1Config"]["networkConfig"]["egressOption"] = \
        "PUBLIC_EGRESS"
    check_build_pool(config(build_worker_pool=POOL), iam_clients(apis), dry_run=False,
                     log=lines.append)
    assert lines[-1].endswith("has public egress")


def test_whoever_submits_must_be_allowed_to_use_the_pool():
    checks = iam.checks(config(build_worker_pool=POOL))
    assert (checks[1].resource, checks[1].permissions) == (
        "projects/net-prj", ("cloudbuild.workerpools.use",))
    assert iam.ROLES["cloudbuild.workerpools.use"] == "roles/cloudbuild.workerPoolUser"
    # A pool in the build's own project: one request for both.
    same = iam.checks(config(build_worker_pool=POOL.replace("net-prj", "my-proj")))
    assert same[0].permissions[-1] == "cloudbuild.workerpools.use"


@pytest.mark.parametrize("field, value, expected", [
    ("build_worker_pool", "projects/p/regions/us-central1/workerPools/x",
     "projects/PROJECT/locations/REGION/workerPools/NAME"),
    ("python_base_image", "us-docker.pkg.dev/p/hub/library/python:3.11-slim",
     "expected an image by digest"),
    ("pip_index_url", "http://pypi.corp.example/simple", "an https:// URL"),
    ("apt_mirror_url", "https://user:secret@mirror.example/apt", "without credentials")])
def test_malformed_perimeter_options_are_refused_at_load(field, value, expected):
    with pytest.raises(ConfigError, match=expected):
        config(**{field: value})


def test_the_dry_run_shows_the_pool_the_mirrored_images_and_the_pip_index(tmp_path, capsys):
    file = tmp_path / "config.yaml"
    file.write_text("vertex:\n  project: my-proj\n  pipeline_root: gs://pipelines/root\n"
                    f"  image_repository: {REPO}\n  build_worker_pool: {POOL}\n"
                    + "".join(f"  {k}: {v}\n" for k, v in MIRRORS.items()))
    assert main(["submit", "--config", str(file), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert (f"Cloud Build: us-central1, in the private pool {POOL} (its machines), timeout "
            "3600 s, as its default account, logs: Cloud Logging only") in out
    assert f"  base image: {MIRRORS['python_base_image']}" in out
    assert f"  Beam SDK image: {MIRRORS['beam_sdk_image']}" in out
    assert (f"  pip index: {MIRRORS['pip_index_url']} (read as the build's account: docker "
            "build --network=cloudbuild)") in out
    assert f"  Reduction Server plugin from: {MIRRORS['apt_mirror_url']} (a mirror of " in out
    assert "from the internet" not in out
    assert (f"Cloud Build: submit would read the private pool {POOL} (GetWorkerPool): every "
            "input of the build has a mirror, so a pool without public egress builds it") in out
    # The build's account reads the mirrors in Artifact Registry.
    assert "roles/artifactregistry.reader on the repository of https://us-python.pkg.dev/" in out


def test_without_mirrors_the_dry_run_says_what_comes_from_the_internet():
    lines = BuildSources().lines()
    assert lines == [
        "from the internet: Debian's Python base image python:3.11-slim-bookworm from Docker "
        "Hub (no vertex.python_base_image)",
        f"from the internet: Beam's SDK image {images.BEAM_SDK_IMAGE} from Docker Hub (no "
        "vertex.beam_sdk_image)",
        "from the internet: the locks' Python packages from PyPI (no vertex.pip_index_url)",
        f"from the internet: Reduction Server's NCCL plugin (google-reduction-server) from "
        f"{images.GOOGLE_APT_REPOSITORY[0]} (no vertex.apt_mirror_url)"]
    # A company index that is not Artifact Registry is read as given, on the default network.
    other = BuildSources(pip_index_url="https://nexus.corp.example/pypi/simple/")
    assert not other.needs_build_network


def test_a_persistent_resource_must_have_the_run_s_key_and_network(apis):
    """A job on a persistent resource runs on its machines, made with the resource's own
    key and network: submit reads the resource and refuses a run that differs."""
    from google.cloud import aiplatform_v1

    from pipelines.vertex.clients import Clients
    from pipelines.vertex.preflight import PersistentResourceError, check_persistent_resource

    key = "projects/my-proj/locations/us-central1/keyRings/ml/cryptoKeys/pipelines"
    name = "projects/my-proj/locations/us-central1/persistentResources/fast-pool"
    apis.persistent_resources[name] = {"encryptionSpec": {"kmsKeyName": key},
                                       "network": "projects/123/global/networks/vpc"}
    clients = Clients(persistent=rest_client(aiplatform_v1.PersistentResourceServiceClient,
                                             apis))
    lines = []
    with pytest.raises(PersistentResourceError) as refused:
        check_persistent_resource(config(persistent_resource_id="fast-pool"), clients,
                                  dry_run=False, log=lines.append)
    assert str(refused.value).splitlines()[1:3] == [
        f"  - vertex.encryption_key is (empty) but {name} was created with {key}",
        f"  - vertex.network is (empty) but {name} was created with "
        "projects/123/global/networks/vpc"]
    check_persistent_resource(config(persistent_resource_id="fast-pool", encryption_key=key,
                                     network="projects/123/global/networks/vpc"), clients,
                              dry_run=False, log=lines.append)
    assert lines == [f"persistent resource: {name} has the run's key and network"]
    check_persistent_resource(config(), clients, dry_run=False, log=lines.append)  # none
    assert len(apis.recorded(r"/persistentResources/", method="GET")) == 2
