"""The order `make test` hands test files to its processes: the longest first.

`make test` runs the suite on three processes, each taking whole files (`--dist loadfile`),
in the order pytest collected them: alphabetical, which put the trainer's TensorFlow files
last, so that one process was still on one of them when the others had finished (on
38cb537 the files' seconds summed to 1,498 on three processes, 499 each, yet the run took
589). Handing out the longest files first leaves only short ones for the end (longest
processing time first). The figures are the files' seconds in a clean-clone run on fd0917b
(this 2-core machine; 1,388 file-seconds, 509.6 s of pytest); a file not listed keeps its
place after them, a stale figure costs only time.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

#: Seconds per file (setup, call and teardown of its tests), files over 20 s.
FILE_SECONDS = {
    "tests/pipelines/vertex/test_emulated_run.py": 314,
    "tests/pipelines/test_local_run.py": 148,
    "tests/pipelines/vertex/test_emulated_tuning.py": 94,
    "tests/components/training/test_local_cluster.py": 69,
    "tests/trainer/run/test_transfer_learning.py": 66,
    "tests/pipelines/vertex/test_emulated_layouts.py": 64,
    "tests/components/tuning/test_tuning.py": 59,
    "tests/pipelines/test_interrupt.py": 58,
    "tests/trainer/models/test_models.py": 52,
    "tests/pipelines/test_inputs.py": 39,
    "tests/pipelines/test_local_stages.py": 35,
    "tests/trainer/serving/test_app.py": 34,
    "tests/trainer/run/test_multiworker.py": 33,
    "tests/trainer/models/test_weights_mirror.py": 29,
    "tests/pipelines/vertex/test_runs.py": 26,
    "tests/pipelines/vertex/test_unreachable_network.py": 25,
    "tests/components/dataset/test_prepare.py": 22,
    "tests/test_gpu_benchmark.py": 22,
    "tests/pipelines/test_benchmark.py": 21,
}


def longest_first(items: Sequence[Any]) -> list[Any]:
    """`items` (pytest's collected tests) with the files in FILE_SECONDS first, longest
    first; within a file, and among the other files, the collected order."""
    def seconds(item: Any) -> int:
        return FILE_SECONDS.get(item.nodeid.split("::", 1)[0], 0)

    return sorted(items, key=lambda item: -seconds(item))
