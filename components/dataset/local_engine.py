"""The local engine (`dataset.engine: local`): this machine's cores decode, one process
writes the shards as the results arrive (`components.dataset.encode`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from components.dataset.encode import results
from components.dataset.splits import ShardAssignment, shard_names
from components.dataset.written_shards import Noted, Shard, Written
from components.progress import Progress
from trainer.common import contract, tfrecord


def write_locally(assignment: ShardAssignment, out: Path, processes: int) -> Written:
    """Encodes every example in one ordered stream over the splits and writes each into
    its assigned shard; a shard whose images were all skipped is removed.

    Args:
        assignment: The splits and shards.
        out: The output directory (exists, empty).
        processes: Decoding processes (1: in this process).
    """
    assigned = list(assignment.assignments())
    classes = len(assignment.listing.classes)
    names = {split: shard_names(split, n) for split, n in assignment.shards.items()}
    writers: dict[tuple[str, int], Any] = {}
    per_class = {key: [0] * classes for key in
                 ((split, i) for split, n in assignment.shards.items() for i in range(n))}
    skipped: list[dict[str, str]] = []
    noted: list[Noted] = []
    progress = Progress("dataset: images encoded", len(assigned))
    try:
        for split, split_names in names.items():
            for i, name in enumerate(split_names):
                writers[split, i] = tfrecord.Writer(out / name)
        for index, data, error, label, facts in results(
                assignment.listing, [a[0] for a in assigned], assignment.image_size,
                processes, assignment.image_format):
            ex, split, shard = assigned[index]
            progress.advance()
            if data is None:
                skipped.append({"file": ex.ref, "reason": error or "unreadable"})
                continue
            label = ex.label if label is None else label
            writers[split, shard].write(contract.serialize_example(data, label, ex.identity))
            per_class[split, shard][label] += 1
            noted.append((split, ex.identity, label, *facts))
    finally:
        for writer in writers.values():
            writer.close()
    shards = []
    for (split, i), writer in writers.items():
        if writer.records:
            shards.append(Shard(split, names[split][i], writer.records, writer.bytes,
                                writer.sha256(), tuple(per_class[split, i])))
        else:
            (out / names[split][i]).unlink()
    return Written(shards, skipped, facts=noted)
