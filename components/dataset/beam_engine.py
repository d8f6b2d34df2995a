"""The Beam engine (`dataset.engine: beam`): the shard assignment carried out by an Apache Beam
pipeline, in this process or as a Dataflow job (`components.dataset.dataflow`).

The assignment (splits, shard counts, each example's shard) is made here, as for the local
engine, and written as JSON lines beside the job's temporary files; the pipeline reads it,
spreads the examples over the workers, encodes each with the local engine's own function
(`encode._encode`), groups them by shard and writes each shard with the project's TFRecord
writer, which counts and hashes it. What was written and what was skipped come back as JSON
lines; the stage then checks the skipped images and writes the report and the manifest, as
for the local engine.

Locally the pipeline runs on Beam's FnApiRunner, named explicitly: the DirectRunner hands
pipelines to the Prism runner since Beam 2.68 (apache/beam#34612), which downloads a binary
at run time and cannot work offline. One process runs it in memory; more run it on that
many SDK worker processes (`direct_running_mode=multi_processing`).
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import apache_beam as beam
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions

from components.dataset.dataflow import DataflowJob, run_on_dataflow
from components.dataset.encode import _encode
from components.dataset.sources import DatasetError, kind_named
from components.dataset.splits import ShardAssignment, shard_names
from components.dataset.written_shards import Shard, Written
from trainer.common import contract, tfrecord
from trainer.common.gcs import mounted_gcs_uri

#: Examples per assignment file: the pipeline's reads split there at least.
PLAN_LINES_PER_FILE = 50_000


def write_with_beam(assignment: ShardAssignment, out: Path, processes: int,
                    dataflow: DataflowJob | None = None) -> Written:
    """Writes the assignment's shards into `out` with a Beam pipeline.

    Args:
        assignment: The splits and shards.
        out: The output directory (exists, empty); with `dataflow`, on Vertex AI's Cloud
            Storage mount, which the workers write through its `gs://` URI.
        processes: Local SDK worker processes (without `dataflow`).
        dataflow: The Dataflow job to run the pipeline as; None runs it here.

    Raises:
        DatasetError: The source cannot be read by a pipeline.
        DataflowJobFailed: The Dataflow job failed or was cancelled.
    """
    kind = kind_named(assignment.listing.kind)
    if kind.one_stream:
        raise DatasetError(f"dataset.engine is 'beam', but a {kind.name} source is read in "
                           "one stream; expected engine 'local' for it")
    if dataflow is None:
        target, work = str(out), tempfile.mkdtemp(prefix="beam-assignment-")
        refs = {}
    else:
        target = mounted_gcs_uri(str(out))
        if target is None:
            raise DatasetError(f"a Dataflow job writes to Cloud Storage, but the output "
                               f"directory {str(out)!r} is not on the /gcs/ mount")
        refs = _worker_refs(assignment) if kind.reads_files else {}
        work = f"{dataflow.temp_location}/{dataflow.job_name}-{uuid.uuid4().hex[:8]}-assignment"
    names = {split: shard_names(split, n) for split, n in assignment.shards.items()}
    try:
        _write_assignment(assignment, work, refs)
        pipeline = beam.Pipeline(**_runner(processes, dataflow))
        _build(pipeline, work, target, assignment, names)
        if dataflow is None:
            pipeline.run().wait_until_finish()
            return _results(work)
        usage = run_on_dataflow(pipeline, dataflow)
        return dataclasses.replace(_results(work), dataflow=usage)
    except BaseException:
        _delete(target, [n for split_names in names.values() for n in split_names])
        raise
    finally:
        _delete_tree(work)


def _runner(processes: int, dataflow: DataflowJob | None) -> dict[str, Any]:
    """`beam.Pipeline`'s runner and options: Dataflow's, or FnApiRunner's here."""
    if dataflow is not None:
        return {"options": PipelineOptions(dataflow.pipeline_args())}
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner

    mode = "multi_processing" if processes > 1 else "in_memory"
    return {"runner": FnApiRunner(),
            "options": PipelineOptions([], direct_running_mode=mode,
                                       direct_num_workers=max(1, processes))}


def _worker_refs(assignment: ShardAssignment) -> dict[str, str]:
    """Where Dataflow's workers read each image: its `gs://` URI. Paths on Vertex AI's
    Cloud Storage mount, which the workers do not have, become their URIs.

    Raises:
        DatasetError: Some images are on no Cloud Storage.
    """
    refs, local = {}, []
    for example in assignment.listing.examples:
        uri = example.ref if example.ref.startswith("gs://") else mounted_gcs_uri(example.ref)
        if uri is None:
            local.append(example.ref)
        else:
            refs[example.ref] = uri
    if local:
        raise DatasetError(f"a Dataflow job reads images from Cloud Storage, but {len(local)} "
                           f"of {len(assignment.listing.examples)} images are paths on this "
                           f"machine (first: {local[0]!r}); expected gs:// URIs or /gcs/ "
                           "paths, or dataset.engine 'local'")
    return refs


def _write_assignment(assignment: ShardAssignment, work: str, refs: dict[str, str]) -> None:
    """Every example with its split and shard (and where to read it, `refs`, if not at
    its own ref), as JSON lines in files of the assignment."""
    lines = [json.dumps({"ref": refs.get(ex.ref, ex.ref), "identity": ex.identity,
                         "label": ex.label, "split": split, "shard": shard}).encode() + b"\n"
             for ex, split, shard in assignment.assignments()]
    for number, start in enumerate(range(0, len(lines), PLAN_LINES_PER_FILE)):
        with FileSystems.create(FileSystems.join(work, f"assignment-{number:05d}.jsonl")) as f:
            f.write(b"".join(lines[start:start + PLAN_LINES_PER_FILE]))


def _build(pipeline: Any, work: str, target: str, assignment: ShardAssignment,
           names: dict[str, list[str]]) -> None:
    """The pipeline's steps: read the assignment, encode, group by shard, write; results."""
    encoded = (
        pipeline
        | "Read assignment" >> beam.io.ReadFromText(f"{work}/assignment-*.jsonl")
        # The assignment is read in a few large pieces; decoding is what needs the workers.
        | "Spread" >> beam.Reshuffle()
        | "Encode" >> beam.ParDo(EncodeFn(assignment.image_size, assignment.image_format,
                                          assignment.listing.kind)).with_outputs(
            "skipped", main="examples"))
    shards = (encoded.examples
              | "Group by shard" >> beam.GroupByKey()
              | "Write shards" >> beam.ParDo(WriteShardFn(target, names,
                                                          len(assignment.listing.classes))))
    _ = ((shards, encoded.skipped)
         | "Results" >> beam.Flatten()
         | "Write results" >> beam.io.WriteToText(f"{work}/results",
                                                  file_name_suffix=".jsonl"))


class EncodeFn(beam.DoFn):
    """Reads, decodes, resizes and encodes one assigned example (the local engine's
    `_encode`); emits ((split, shard), (label, record, noted)), or a skipped image's JSON
    to the `skipped` output."""

    def __init__(self, image_size: int, image_format: str, kind: str):
        self.image_size, self.image_format, self.kind = image_size, image_format, kind

    def process(self, line: str) -> Iterator[Any]:
        item = json.loads(line)
        _, data, error, label, facts = _encode((0, item["ref"], self.image_size, self.image_format,
                                         kind_named(self.kind)))
        if data is None:
            yield beam.pvalue.TaggedOutput("skipped", json.dumps(
                {"skipped": {"file": item["ref"], "reason": error or "unreadable"}}))
            return
        label = item["label"] if label is None else label
        yield ((item["split"], item["shard"]),
               (label, contract.serialize_example(data, label, item["identity"]),
                [item["split"], item["identity"], label, *facts]))


class WriteShardFn(beam.DoFn):
    """Writes one shard's records into `target` and emits its `Shard` (and its images'
    facts) as JSON."""

    def __init__(self, target: str, names: dict[str, list[str]], classes: int):
        self.target, self.names, self.classes = target, names, classes

    def process(self, element: Any) -> Iterator[str]:
        (split, index), records = element
        name = self.names[split][index]
        per_class = [0] * self.classes
        noted = []
        # A retried bundle writes the shard again: Cloud Storage replaces the object
        # whole, and only the last attempt's result is kept.
        writer = tfrecord.Writer(FileSystems.create(
            FileSystems.join(self.target, name), compression_type=CompressionTypes.UNCOMPRESSED))
        try:
            for label, record, facts in records:
                writer.write(record)
                per_class[label] += 1
                noted.append(facts)
        finally:
            writer.close()
        yield json.dumps({"shard": Shard(split, name, writer.records, writer.bytes,
                                         writer.sha256(), tuple(per_class)).to_json(),
                          "facts": noted})


def _results(work: str) -> Written:
    """What the pipeline wrote and skipped, from its result files."""
    shards, skipped, noted = [], [], []
    for match in FileSystems.match([f"{work}/results*"])[0].metadata_list:
        with FileSystems.open(match.path) as f:
            for line in f.read().decode("utf-8").splitlines():
                item = json.loads(line)
                if "shard" in item:
                    shards.append(Shard.from_json(item["shard"]))
                    noted += [tuple(facts) for facts in item["facts"]]
                else:
                    skipped.append(item["skipped"])
    return Written(shards, skipped, facts=noted)


def _delete(target: str, names: list[str]) -> None:
    """Removes the shards a failed run may have written."""
    paths = [FileSystems.join(target, n) for n in names]
    existing = [p for p in paths if FileSystems.exists(p)]
    if existing:
        FileSystems.delete(existing)


def _delete_tree(work: str) -> None:
    """Removes the assignment and result files."""
    if "://" not in work:
        shutil.rmtree(work, ignore_errors=True)
        return
    matched = FileSystems.match([f"{work}/*"])[0].metadata_list
    if matched:
        FileSystems.delete([m.path for m in matched])
