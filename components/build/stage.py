"""Stage 3: the trainer's build context, and on Vertex AI the image built from it.

Building and pushing needs a Docker engine or Cloud Build; a local run says so plainly and
uses the trainer installed in its own environment instead.
"""

from __future__ import annotations

import hashlib
from typing import Any, Callable

from components import images
from components.build import cloud_build
from components.build.context import content_tag, trainer_image_uri, write_build_context
from components.stage import say
from trainer.gcs import split_gcs_uri, storage_client


def run_build_stage(context_dir: str, context_uri: str, image_repository: str, *, push: bool,
                    trainer_source_uri: str = "", service_account: str = "",
                    clients: tuple[Any, Any, Any] | None = None,
                    log: Callable[[str], None] = say) -> tuple[str, dict[str, Any]]:
    """Stage 3: the trainer's build context, and on Vertex the image built from it.

    Args:
        context_dir: Local (or /gcs/ FUSE) directory of the stage's build context artifact.
        context_uri: The same location as a URI (`gs://...` on Vertex).
        image_repository: Artifact Registry repository of the project image.
        push: Build and push with Cloud Build (Vertex); False for local runs, which train
            with the trainer installed in their own environment.
        trainer_source_uri: A build context tarball uploaded by `gpu-pipeline submit`;
            empty to use the sources of the stage's own image.
        service_account: Service account Cloud Build runs as.
        clients: (storage, Cloud Build, Artifact Registry) clients; created when None.
        log: Where progress lines go.

    Returns:
        (image to train with, "" for local runs; metadata for the artifact).
    """
    context = write_build_context(context_dir)
    metadata: dict[str, Any] = {"digest": context.digest, "files": len(context.files),
                                "image_uri": trainer_image_uri(image_repository, context)}
    if not push:
        log(f"build context: {len(context.files)} files, {context.digest}")
        log(f"local run: image {metadata['image_uri']} was not built or pushed "
            "(no Docker engine is used); training uses the trainer installed in this "
            "environment")
        return "", {**metadata, "pushed": False}

    storage, builder, registry = clients or cloud_clients()
    source_uri = f"{context_uri.rstrip('/')}/context.tar.gz"
    tag = context.tag
    if trainer_source_uri:  # sources uploaded by `gpu-pipeline submit`: build those
        bucket, name = split_gcs_uri(trainer_source_uri)
        data = storage.bucket(bucket).blob(name).download_as_bytes()
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        tag, source_uri = content_tag(digest), trainer_source_uri
        metadata.update(digest=digest, image_uri=images.image_uri(image_repository, tag))
    log(f"build context {source_uri} ({metadata['digest']})")
    image, built = cloud_build.ensure_image(image_repository, tag, source_uri,
                                            build_client=builder, registry_client=registry,
                                            service_account=service_account, log=log)
    return image, {**metadata, "image_uri": image, "pushed": True, "built": built,
                   "source_uri": source_uri}


def cloud_clients() -> tuple[Any, Any, Any]:
    """(Cloud Storage, Cloud Build, Artifact Registry) clients with the default credentials."""
    from google.cloud import artifactregistry_v1
    from google.cloud.devtools import cloudbuild_v1

    return (storage_client(), cloudbuild_v1.CloudBuildClient(),
            artifactregistry_v1.ArtifactRegistryClient())
