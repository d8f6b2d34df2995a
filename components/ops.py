"""The pipeline's KFP components: thin interfaces over the plain stage modules.

Each component body only imports its stage module and calls it, so all behaviour is
tested without KFP. The bodies run in the project image (on Vertex) or in this
environment (kfp.local's SubprocessRunner), where the project is installed; that is
why `install_kfp_package=False` and why imports sit inside the functions (lightweight
components are shipped as their source).
"""

# No `from __future__ import annotations`: KFP reads the real annotation objects.

from typing import NamedTuple

from kfp import dsl
from kfp.dsl import HTML, Artifact, Dataset, Input, Markdown, Metrics, Model, Output

from components import images

_IMAGE = images.pipeline_image()


@dsl.component(base_image=_IMAGE, install_kfp_package=False)
def fingerprint_dataset_source(source: str, image_size: int) -> str:
    """Stage 1, first part: a cheap key of the source's state (never cached itself)."""
    from components.dataset import source_fingerprint
    from components.errors import stage_input_errors

    with stage_input_errors("dataset"):
        fingerprint = source_fingerprint(source, image_size)
    print(f"[gpu-pipeline] dataset source {source}: fingerprint {fingerprint}")
    return fingerprint


@dsl.component(base_image=_IMAGE, install_kfp_package=False)
def prepare_dataset(source: str, source_fingerprint: str, image_size: int,
                    validation_fraction: float, test_fraction: float, num_shards: int,
                    min_shards: int, max_bad_fraction: float, dataset: Output[Dataset],
                    report: Output[Markdown]):
    """Stage 1: image sources -> sharded TFRecords per split, manifest and report.

    `source_fingerprint` is not used here: it is an input so that KFP's cache key changes
    exactly when the source does.
    """
    from components.dataset import prepare_dataset as prepare
    from components.errors import stage_input_errors

    with stage_input_errors("dataset"):
        manifest = prepare(source, dataset.path, image_size=image_size,
                           validation_fraction=validation_fraction, test_fraction=test_fraction,
                           num_shards=num_shards, min_shards=min_shards,
                           max_bad_fraction=max_bad_fraction, report_path=report.path)
    dataset.metadata.update({
        "classes": manifest["classes"],
        "image_size": manifest["image_size"],
        "source_fingerprint": manifest["source_fingerprint"],
        "skipped": len(manifest["skipped"]),
        **{f"{split}_examples": info["count"] for split, info in manifest["splits"].items()},
    })
    counts = ", ".join(f"{s} {i['count']} in {len(i['shards'])} shards"
                       for s, i in manifest["splits"].items())
    print(f"[gpu-pipeline] dataset: {len(manifest['classes'])} classes "
          f"({', '.join(manifest['classes'])}); {counts}; {len(manifest['skipped'])} skipped")


@dsl.component(base_image=_IMAGE, install_kfp_package=False)
def validate_gpu_config(worker_pool_specs: list, region: str) -> list:
    """Stage 2: checks the Vertex worker pools against the GPU rules; returns them normalised."""
    from components.errors import stage_input_errors
    from components.gpu_validation import validate_worker_pool_specs

    result = validate_worker_pool_specs(worker_pool_specs, region=region)
    for warning in result.warnings:
        print(f"[gpu-pipeline] warning: {warning}")
    with stage_input_errors("GPU config"):
        result.raise_for_errors()
    pools = [p for p in result.specs if p]
    print(f"[gpu-pipeline] GPU configuration valid for {region}: " + "; ".join(
        f"{p['replica_count']} x {p['machine_spec']['machine_type']}"
        + (f" + {p['machine_spec']['accelerator_count']} x {p['machine_spec']['accelerator_type']}"
           if p['machine_spec'].get('accelerator_type') else "") for p in pools))
    return result.specs


@dsl.component(base_image=_IMAGE, install_kfp_package=False)
def build_trainer_image(image_repository: str, push: bool, trainer_source_uri: str,
                        service_account: str, build_context: Output[Artifact]) -> str:
    """Stage 3: the trainer's build context and digest; on Vertex, the image built from it.

    Returns the image to train with: on Vertex `REPO/gpu-pipeline:src-DIGEST@sha256:...`
    (built with Cloud Build only when that tag is missing); "" locally, where training
    uses the trainer installed in the environment.
    """
    from components.build_image import run_build_stage

    image, metadata = run_build_stage(build_context.path, build_context.uri, image_repository,
                                      push=push, trainer_source_uri=trainer_source_uri,
                                      service_account=service_account)
    build_context.metadata.update(metadata)
    return image


@dsl.component(base_image=_IMAGE, install_kfp_package=False)
def train_on_local_workers(dataset: Input[Dataset], num_workers: int, epochs: int,
                           batch_size: int, learning_rate: float, model_name: str,
                           mixed_precision: str, xla: str, model: Output[Model],
                           training_job: Output[Artifact]):
    """Stage 4 (local): the trainer as `num_workers` processes on localhost."""
    from components.local_training import run_local_cluster
    from components.training_report import trainer_arguments

    print(f"[gpu-pipeline] training: {num_workers} worker processes on localhost "
          "(MultiWorkerMirroredStrategy, TF_CONFIG as Vertex AI sets it)")
    run_local_cluster(num_workers, [
        "--job-dir", training_job.path, "--data-dir", dataset.path, "--model-dir", model.path,
        *trainer_arguments(epochs=epochs, batch_size=batch_size, learning_rate=learning_rate,
                           model=model_name, mixed_precision=mixed_precision, xla=xla)])
    model.metadata["framework"] = "tensorflow"


@dsl.component(base_image=_IMAGE, install_kfp_package=False)
def vertex_training_spec(worker_pool_specs: list, image_uri: str, dataset: Input[Dataset],
                         epochs: int, batch_size: int, learning_rate: float, model_name: str,
                         mixed_precision: str, xla: str, job_name: str,
                         training_job: Output[Artifact]) -> NamedTuple(
                             "VertexTrainingSpec", [("worker_pool_specs", list),
                                                    ("base_output_directory", str),
                                                    ("model_uri", str), ("display_name", str)]):
    """Stage 4 (Vertex), part 1: the CustomJob's worker pools for the validated machines."""
    from collections import namedtuple

    from components.errors import stage_input_errors
    from components.training_report import trainer_arguments
    from components.vertex_training import custom_job_spec

    args = trainer_arguments(epochs=epochs, batch_size=batch_size, learning_rate=learning_rate,
                             model=model_name, mixed_precision=mixed_precision, xla=xla)
    with stage_input_errors("training"):
        spec = custom_job_spec(worker_pool_specs, image_uri, dataset_path=dataset.path,
                               output_uri=training_job.uri, output_path=training_job.path,
                               trainer_args=args, job_name=job_name)
    fields = ["worker_pool_specs", "base_output_directory", "model_uri", "display_name"]
    return namedtuple("VertexTrainingSpec", fields)(*(spec[f] for f in fields))


@dsl.component(base_image=_IMAGE, install_kfp_package=False)
def report_training(training_job: Input[Artifact], metrics: Output[Metrics],
                    curves: Output[HTML]):
    """Stage 4 (both targets), last part: the trainer's curves and final metrics."""
    from components.training_report import publish_training_report

    summary = publish_training_report(training_job.path, curves.path)
    for name, value in summary["metrics"].items():
        metrics.log_metric(name, value)
    print(f"[gpu-pipeline] training: {summary['epochs']} epochs on {summary['num_workers']} "
          f"worker(s), {summary['examples_per_second']:.0f} examples/s; final "
          + ", ".join(f"{k} {v:.4f}" for k, v in summary["metrics"].items()
                      if k != "epochs_completed"))


@dsl.component(base_image=_IMAGE, install_kfp_package=False)
def export_model(dataset: Input[Dataset], trained_model: Input[Model],
                 exported_model: Output[Model], metrics: Output[Metrics]) -> NamedTuple(
                     "ExportOutputs", [("accuracy", float), ("model_uri", str)]):
    """Stage 5: loads the SavedModel back, evaluates it, and exports it with its metrics."""
    import json
    from collections import namedtuple

    from components.export_model import evaluate_saved_model, publish_model

    from components.dataset import load_manifest

    results = evaluate_saved_model(trained_model.path, dataset.path)
    if "test" in load_manifest(dataset.path)["splits"]:
        test = evaluate_saved_model(trained_model.path, dataset.path, split="test")
        results.update(test_accuracy=test["accuracy"], test_examples=test["examples"])
    publish_model(trained_model.path, exported_model.path, results)
    for name, value in results.items():
        metrics.log_metric(name, value)
    exported_model.metadata.update({"framework": "tensorflow", "accuracy": results["accuracy"],
                                    "trained_model": trained_model.uri, "dataset": dataset.uri})
    test = (f"; test accuracy {results['test_accuracy']:.4f} on {results['test_examples']}"
            if "test_accuracy" in results else "")
    print(f"[gpu-pipeline] exported model evaluated on {results['examples']} validation "
          f"examples: accuracy {results['accuracy']:.4f}{test}; " + json.dumps(
              {k: round(v, 4) for k, v in results.items() if k.startswith("accuracy_")}))
    return namedtuple("ExportOutputs", ["accuracy", "model_uri"])(results["accuracy"],
                                                                  exported_model.uri)
