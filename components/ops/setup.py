"""Stages 1 to 3 as KFP components: the GPU configuration validated, the dataset
prepared (on this machine or as a Dataflow job), the images built."""

# No `from __future__ import annotations`: KFP reads the real annotation objects.

from typing import NamedTuple

from kfp import dsl
from kfp.dsl import Artifact, Dataset, Input, Markdown, Output

from components import images

_IMAGE = images.pipeline_image()


@dsl.component(base_image=_IMAGE, install_kfp_package=False)
def validate_gpu_config(vertex: dict, training: dict, local_cluster: dict) -> NamedTuple(
        "GpuConfig", [("worker_pool_specs", list), ("input_pipelines", int),
                      ("strategy", str), ("training_plan", dict), ("alternatives", list)]):
    """Stage 1: the Vertex worker pools checked against the GPU rules and the strategy's
    roles, normalised, and the training plan every replica applies; the same for every
    alternative of `vertex.fallbacks`.

    Returns the primary configuration's normalised pools, strategy and training plan
    (strategy, all-reduce, mixed precision, XLA, with reasons), the input pipelines (the
    processes that read the training data, a multiple of every alternative's: the
    dataset's shards come in multiples of it), and every alternative with its own pools
    and plan, in the order the training step tries them. `local_cluster` (workers,
    parameter servers, evaluators) is the layout of a local run, whose CPU processes
    train with a plan of their own; empty on Vertex AI.
    """
    from collections import namedtuple

    from components.gpu.configuration import check_configuration
    from components.stage_messages import say, stage_errors
    from components.vertex_options import VertexOptions
    from trainer.cluster.roles import Layout
    from trainer.common.schema import validate
    from trainer.run.training_options import TrainingOptions

    with stage_errors("GPU config"):
        options = validate(VertexOptions, vertex, prefix="vertex", strict=False)
        trainer = validate(TrainingOptions, training, prefix="training", strict=False)
        found = check_configuration(options, trainer,
                                    Layout.from_dict(local_cluster) if local_cluster else None)
        for warning in found.checked.warnings:
            say(f"warning: {warning}")
        found.checked.raise_for_errors()
    for line in found.lines(trainer, options.region):
        say(line)
    outputs = namedtuple("GpuConfig", ["worker_pool_specs", "input_pipelines", "strategy",
                                       "training_plan", "alternatives"])
    return outputs(found.checked.primary.specs, found.input_pipelines, found.plan.strategy,
                   found.plan.to_dict(), [a.to_dict() for a in found.checked.alternatives])


@dsl.component(base_image=_IMAGE, install_kfp_package=False)
def fingerprint_dataset_source(options: dict) -> str:
    """Stage 2, first part: a cheap key of the source's state (never cached itself)."""
    from components.dataset.dataset_options import DatasetOptions
    from components.dataset.sources import source_fingerprint
    from components.stage_messages import say, stage_errors
    from trainer.common.schema import validate

    with stage_errors("dataset"):
        dataset = validate(DatasetOptions, options, prefix="dataset", strict=False)
        fingerprint = source_fingerprint(dataset.source, dataset.image_size)
    say(f"dataset source {dataset.source}: fingerprint {fingerprint}")
    return fingerprint


@dsl.component(base_image=_IMAGE, install_kfp_package=False)
def dataflow_launch(project: str, vertex: dict, images: dict) -> dict:
    """Stage 2 on Vertex AI with `dataset.engine: beam`, after stage 3: what the dataset
    stage needs to start its Dataflow job (the run's project, region and service account,
    and the CPU image by digest, which the Dataflow workers run)."""
    from components.dataset.dataflow import launch_settings
    from components.stage_messages import say, stage_errors
    from components.vertex_options import VertexOptions
    from trainer.common.schema import validate

    with stage_errors("dataset"):
        options = validate(VertexOptions, vertex, prefix="vertex", strict=False)
        settings = launch_settings(project, options.region, options.service_account, images,
                                   options.encryption_key)
    say(f"the dataset is prepared by a Dataflow job in {settings['region']} whose workers run "
        f"{settings['sdk_image']}")
    return settings


@dsl.component(base_image=_IMAGE, install_kfp_package=False)
def prepare_dataset(options: dict, source_fingerprint: str, input_pipelines: int,
                    dataset: Output[Dataset], report: Output[Markdown], dataflow: dict = None):
    """Stage 2: image sources -> sharded TFRecords per split, manifest and report.

    `source_fingerprint` is not used here: it is an input so that KFP's cache key changes
    exactly when the source does. `input_pipelines` is stage 1's `input_pipelines`,
    the processes that read the training data (a multiple of every alternative's).
    `dataflow` (`dataflow_launch`'s output), with `dataset.engine: beam`, runs the Beam
    pipeline as a Dataflow job; empty, it runs here.
    """
    from components.dataset.dataflow import dataflow_job
    from components.dataset.dataset_options import DatasetOptions
    from components.dataset.prepare import prepare_dataset as prepare
    from components.stage_messages import say, stage_errors
    from trainer.common.schema import validate

    with stage_errors("dataset"):
        settings = validate(DatasetOptions, options, prefix="dataset", strict=False)
        job = dataflow_job(settings, output_uri=dataset.uri, **dataflow) \
            if dataflow and settings.engine == "beam" else None
        manifest = prepare(settings, dataset.path, input_pipelines=input_pipelines,
                           report_path=report.path, dataflow=job)
    dataset.metadata.update({
        "classes": manifest["classes"],
        "image_size": manifest["image_size"],
        "source_fingerprint": manifest["source_fingerprint"],
        "skipped": len(manifest["skipped"]),
        **{f"{split}_examples": info["count"] for split, info in manifest["splits"].items()},
        # What the run's end prices (`run_cost`): the Dataflow job and what it used.
        **({"dataflow_job": manifest["dataflow_job"]} if "dataflow_job" in manifest else {}),
    })
    counts = ", ".join(f"{s} {i['count']} in {len(i['shards'])} shards"
                       for s, i in manifest["splits"].items())
    say(f"dataset: {len(manifest['classes'])} classes ({', '.join(manifest['classes'])}); "
        f"{counts}; {len(manifest['skipped'])} skipped; prepared by the {settings.engine} "
        + ("engine as a Dataflow job" if job else "engine"))


@dsl.component(base_image=_IMAGE, install_kfp_package=False)
def check_data(dataset: Input[Dataset], options: dict, vertex: dict, registry_root: str,
               report: Output[Markdown]) -> int:
    """Stage 2's data checks, before training: test images duplicated in training, and
    the data's drift from the champion's (the local registry's default version under
    `registry_root`, else `vertex.parent_model`'s). Returns the warnings; under
    `dataset.drift: fail`, a warning fails the step and nothing trains.
    """
    from components.dataset.data_checks import check_data as check
    from components.dataset.dataset_options import DatasetOptions
    from components.export.export_model import champion_location
    from components.stage_messages import say, stage_errors
    from components.vertex_options import VertexOptions
    from trainer.common.schema import validate

    with stage_errors("dataset"):
        settings = validate(DatasetOptions, options, prefix="dataset", strict=False)
        champion = champion_location(validate(VertexOptions, vertex, prefix="vertex",
                                              strict=False), registry_root)
        found = check(dataset.path, settings, champion, report_path=report.path, log=say)
    return sum(f.warning for f in found)


@dsl.component(base_image=_IMAGE, install_kfp_package=False)
def build_images(vertex: dict, training: dict, push: bool, trainer_source_uri: str,
                 build_context: Output[Artifact]) -> dict:
    """Stage 3: the images' build context and digest; on Vertex, the images built from it.

    Returns, per image (`gpu`: the trainer on GPU machines, `cpu`: components, CPU-only
    pools and serving), its `reference` by digest alone (`REPO/NAME@sha256:...`, the form
    Vertex AI accepts), its content `tag` and whether it was `built` now (Cloud Build runs
    only for missing tags); an empty dict locally, where training uses the trainer installed
    in the environment.
    """
    from components.build.build_images import run_build_stage
    from components.stage_messages import stage_errors
    from components.vertex_options import VertexOptions
    from trainer.common.schema import validate

    with stage_errors("build"):
        options = validate(VertexOptions, vertex, prefix="vertex", strict=False)
        found, metadata = run_build_stage(
            build_context.path, build_context.uri, options.image_repository, push=push,
            trainer_source_uri=trainer_source_uri, user_code=training.get("user_code", ""),
            settings=options.build_settings(),
            given=options.images.found() if options.images.given else None)
    build_context.metadata.update(metadata)
    return found
