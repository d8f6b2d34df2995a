"""Pre-flight: what must hold before anything is uploaded, built or submitted."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from components import images
from components.dataset.sources import kind_of
from components.tuning.tuning_options import vertex_problems
from pipelines.config import Config
from pipelines.config_loading import is_local_file
from trainer.common.cloud_calls import remote_call
from trainer.common.errors import InputError
from trainer.common.gcs import mounted_gcs_uri, split_gcs_uri
from trainer.models.user_model import is_reference


class VertexSettingsError(InputError):
    """The configuration lacks what a run on Vertex AI needs."""


def require_vertex_settings(config: Config) -> None:
    """Raises VertexSettingsError unless project, pipeline root and image repository are set,
    the dataset source is one the pipeline can read on Vertex AI, and the study is one
    Vertex AI can run."""
    missing = [name for name, value in (("vertex.project", config.vertex.project),
                                        ("vertex.pipeline_root", config.vertex.pipeline_root))
               if not value]
    if config.vertex.image_repository == images.DEFAULT_IMAGE_REPOSITORY:
        missing.append("vertex.image_repository")
    problems = [f"{', '.join(missing)} must be set for Vertex AI (in the config file or with "
                "--project/--pipeline-root/--image-repository)"] if missing else []
    source = config.dataset.source
    unreadable = kind_of(source).vertex_problem(source)
    if unreadable:
        problems.append(f"dataset.source is {source!r}, {unreadable}")
    problems += _training_problems(config) + vertex_problems(config.tuning)
    problems += [f"vertex.{p}" if p.startswith("batch_predict.") else p
                 for p in config.vertex.batch_predict.on_vertex(config.vertex.region)]
    if problems:
        raise VertexSettingsError("; ".join(problems))


def _training_problems(config: Config) -> list[str]:
    """Files the trainer on Vertex AI could not reach: a weights file on this machine, a
    model module that only this machine has."""
    training, problems = config.training, []
    if training.weights and is_local_file(training.weights):
        problems.append(f"training.weights is {training.weights!r}, a file on this machine, "
                        "which Vertex AI's machines cannot read; copy it to Cloud Storage and "
                        "give its gs:// path")
    if is_reference(training.model) and not training.user_code:
        problems.append(f"training.model is {training.model!r}: set training.user_code to the "
                        "directory of its package, which `submit` packs into the image (the "
                        "image holds only the project's locked packages)")
    return problems


class BucketRegionError(InputError):
    """A bucket Vertex AI writes to (the pipeline root's, the batch predictions') is not in
    the region of the jobs that write there."""


def check_bucket_locations(config: Config, storage: Any) -> list[str]:
    """The pipeline root's bucket must be in `vertex.region` and in each fallback's region:
    every job writes its outputs under it, and Vertex AI refuses a job or an upload whose
    bucket is elsewhere, a multi-region included ("FailedPrecondition: 400 The Cloud Storage
    bucket of `gs://...` is in location `us`. It must be in the same regional location as
    the service location": googleapis/python-aiplatform#885, GoogleCloudPlatform/
    vertex-ai-samples#19); so must the batch predictions' destination, which the batch
    prediction job writes to (neo4j-partners/hands-on-lab-neo4j-and-google#2: not into a
    multi-region bucket). The dataset's bucket should be (data in another region makes
    jobs slower and costs egress, as the training concepts document warns): a warning.

    Returns:
        The warnings.

    Raises:
        BucketRegionError: The pipeline root's or the batch destination's bucket is
            elsewhere (each one named).
    """
    # (field, gs:// URI, the regions whose jobs write there; empty: only read, a warning)
    region = [("region", config.vertex.region)]
    places = [("vertex.pipeline_root", config.vertex.pipeline_root, region + [
        (f"fallbacks[{i}].region", f.region)
        for i, f in enumerate(config.vertex.fallbacks) if f.region])]
    if config.vertex.batch_predict.destination.startswith("gs://"):
        places.append(("vertex.batch_predict.destination",
                       config.vertex.batch_predict.destination, region))
    source = mounted_gcs_uri(config.dataset.source) or config.dataset.source
    if source.startswith("gs://"):
        places.append(("dataset.source", source, []))
    warnings, refused = [], []
    for field, uri, writers in places:
        bucket_name, _ = split_gcs_uri(uri)
        with remote_call(f"looking up the bucket {bucket_name}"):
            bucket = storage.lookup_bucket(bucket_name)
        if bucket is None:
            warnings.append(f"{field} bucket {bucket_name!r} does not exist (or is not visible "
                            "to these credentials)")
            continue
        location = (bucket.location or "").lower()
        refused += [f"{field} bucket {bucket_name!r} is in {location.upper() or '?'} but "
                    f"vertex.{name} is {where}: Vertex AI refuses a job whose outputs go to "
                    f"a bucket outside its region; use a bucket in {where}"
                    for name, where in writers if location != where]
        if not writers and location != config.vertex.region:
            warnings.append(f"{field} bucket {bucket_name!r} is in {location.upper() or '?'}, "
                            f"not in the job's region {config.vertex.region}: reading and "
                            "writing data across regions makes jobs slower; use a bucket in "
                            f"{config.vertex.region}")
    if refused:
        raise BucketRegionError("; ".join(refused))
    return warnings


class BuildPoolError(InputError):
    """The private pool would not build the images (no public egress, no mirrors)."""


def check_build_pool(config: Config, clients: Any, *, dry_run: bool,
                     log: Callable[[str], None]) -> None:
    """Reads `vertex.build_worker_pool` (Cloud Build `GetWorkerPool`): in a pool without
    public egress, each input of the build must come from a mirror, or the build would
    fail after its queue time; refused before anything is uploaded.

    Raises:
        BuildPoolError: The pool has no public egress and an input has no mirror.
    """
    from google.cloud.devtools import cloudbuild_v1

    from components.build.sources import perimeter_problems

    pool = config.vertex.build_worker_pool
    if not pool:
        return
    sources = config.vertex.build_settings().sources
    if dry_run:
        public = ", ".join(option for option, _ in sources.public())
        log(f"Cloud Build: submit would read the private pool {pool} (GetWorkerPool): "
            + (f"without public egress, the run is refused for want of {public}" if public
               else "every input of the build has a mirror, so a pool without public egress "
                    "builds it"))
        return
    builder, _ = clients.get_builders()
    with remote_call(f"reading the Cloud Build private pool {pool}"):
        found = builder.get_worker_pool(name=pool)
    egress = found.private_pool_v1_config.network_config.egress_option
    closed = egress == cloudbuild_v1.PrivatePoolV1Config.NetworkConfig.EgressOption \
        .NO_PUBLIC_EGRESS
    problems = perimeter_problems(pool, sources) if closed else []
    if problems:
        raise BuildPoolError("the images cannot be built (nothing was uploaded, built or "
                             "submitted):\n" + "\n".join(f"  - {p}" for p in problems))
    log(f"Cloud Build: the private pool {pool} "
        + ("has no public egress; every input of the build comes from a mirror" if closed
           else "has public egress"))


class PersistentResourceError(InputError):
    """The persistent resource's key or network is not the run's."""


def check_persistent_resource(config: Config, clients: Any, *, dry_run: bool,
                              log: Callable[[str], None]) -> None:
    """A job on `vertex.persistent_resource_id` runs on that resource's machines, which
    were made with its own key and network: reads it (Vertex AI `GetPersistentResource`)
    and refuses a run whose key, network or network attachment differs.

    Raises:
        PersistentResourceError: Naming each setting that differs.
    """
    vertex = config.vertex
    if not vertex.persistent_resource_id:
        return
    name = (f"projects/{vertex.project}/locations/{vertex.region}/persistentResources/"
            f"{vertex.persistent_resource_id}")
    if dry_run:
        log(f"persistent resource: submit would read {name} (GetPersistentResource): its "
            "key, network and network attachment must be the run's")
        return
    with remote_call(f"reading the persistent resource {name}"):
        found = clients.get_persistent(vertex.region).get_persistent_resource(name=name)
    settings = (("vertex.encryption_key", vertex.encryption_key,
                 found.encryption_spec.kms_key_name, "Google-managed keys"),
                ("vertex.network", vertex.network, found.network, "no VPC peering"),
                ("vertex.psc_network_attachment", vertex.psc_network_attachment,
                 found.psc_interface_config.network_attachment, "no network attachment"))
    differ = [f"{option} is {ours or '(empty)'} but {name} was created with "
              f"{theirs or none}" for option, ours, theirs, none in settings if ours != theirs]
    if differ:
        raise PersistentResourceError(
            "a job on a persistent resource runs on its machines, with the key and network "
            "it was created with (nothing was uploaded, built or submitted):\n"
            + "\n".join(f"  - {line}" for line in differ)
            + "\nset them as the resource has them, or use a resource created with the run's")
    log(f"persistent resource: {name} has the run's key and network")
