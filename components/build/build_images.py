"""Stage 3: the images' build context, and on Vertex AI the images built from it.

Building and pushing needs a Docker engine or Cloud Build; a local run says so plainly and
uses the trainer installed in its own environment instead.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

from components import images
from components.build import cloud_build
from components.build.context import content_tag, write_build_context
from components.stage_messages import say
from trainer.common.cloud_calls import remote_call
from trainer.common.gcs import split_gcs_uri, storage_client


def run_build_stage(context_dir: str, context_uri: str, image_repository: str, *, push: bool,
                    trainer_source_uri: str = "", user_code: str = "",
                    settings: cloud_build.BuildSettings | None = None,
                    clients: tuple[Any, Any, Any] | None = None,
                    given: dict[str, dict[str, Any]] | None = None,
                    log: Callable[[str], None] = say) -> tuple[dict[str, Any], dict[str, Any]]:
    """Stage 3: the build context, and on Vertex the images built from it.

    Args:
        context_dir: Local (or /gcs/ FUSE) directory of the stage's build context artifact.
        context_uri: The same location as a URI (`gs://...` on Vertex).
        image_repository: Artifact Registry repository of the project's images.
        push: Build and push with Cloud Build (Vertex); False for local runs, which train
            with the trainer installed in their own environment.
        trainer_source_uri: A build context tarball uploaded by `gpu-pipeline submit`;
            empty to use the sources of the stage's own image.
        user_code: A local run's `training.user_code`, packed as `submit` packs it, so that
            the digest shown is the one Vertex AI would build (on Vertex AI the image's
            own sources already hold it).
        settings: Machine, timeout and service account of a Cloud Build (its defaults when
            None).
        clients: (storage, Cloud Build, Artifact Registry) clients; created when None.
        given: Images built elsewhere (`vertex.images`, as `GivenImages.found` gives them):
            on Vertex passed on as they are, nothing built or looked up.
        log: Where progress lines go.

    Returns:
        (per image key: `reference` by digest, `tag` and `built`, empty for local runs;
        metadata for the artifact, with `cloud_build`, the build made when one was).
    """
    context = write_build_context(context_dir, user_code=None if push else user_code or None)
    metadata: dict[str, Any] = {
        "digest": context.digest, "files": len(context.files), "tag": context.tag,
        "images": {i.key: images.tagged(image_repository, i, context.tag)
                   for i in images.PROJECT_IMAGES}}
    if not push:
        log(f"build context: {len(context.files)} files, {context.digest}")
        log(f"local run: images {', '.join(metadata['images'].values())} were not built or "
            "pushed (no Docker engine is used); training uses the trainer installed in this "
            "environment")
        return {}, {**metadata, "pushed": False}
    if given:
        log("images given by vertex.images (built elsewhere), nothing built: "
            + ", ".join(f"{key} {image['reference']}" for key, image in given.items()))
        return dict(given), {**metadata, "references": {k: v["reference"]
                                                        for k, v in given.items()},
                             "pushed": False, "given": True}

    with remote_call("connecting to Cloud Storage, Cloud Build and Artifact Registry"):
        storage, builder, registry = clients or cloud_clients()
    source_uri = f"{context_uri.rstrip('/')}/context.tar.gz"
    tag = context.tag
    if trainer_source_uri:  # sources uploaded by `gpu-pipeline submit`: build those
        bucket, name = split_gcs_uri(trainer_source_uri)
        with remote_call(f"reading the sources {trainer_source_uri}"):
            data = storage.bucket(bucket).blob(name).download_as_bytes()
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        tag, source_uri = content_tag(digest), trainer_source_uri
        metadata.update(digest=digest, tag=tag, images={
            i.key: images.tagged(image_repository, i, tag) for i in images.PROJECT_IMAGES})
    log(f"build context {source_uri} ({metadata['digest']})")
    with remote_call("building or finding the images"):
        builds: list[dict[str, str]] = []
        found = cloud_build.ensure_images(image_repository, tag, source_uri,
                                          build_client=builder, registry_client=registry,
                                          settings=settings or cloud_build.BuildSettings(),
                                          log=log, builds=builds)
    return found, {**metadata, "references": {k: v["reference"] for k, v in found.items()},
                   "pushed": True, "built": sorted(k for k, v in found.items() if v["built"]),
                   "source_uri": source_uri, **({"cloud_build": builds[0]} if builds else {})}


def cloud_clients() -> tuple[Any, Any, Any]:
    """(Cloud Storage, Cloud Build, Artifact Registry) clients with the default credentials."""
    from google.cloud import artifactregistry_v1
    from google.cloud.devtools import cloudbuild_v1

    return (storage_client(), cloudbuild_v1.CloudBuildClient(),
            artifactregistry_v1.ArtifactRegistryClient())
