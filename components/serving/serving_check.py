"""The model checked in its serving container before it may serve.

A model that loads in TensorFlow can still fail behind the server (a signature the route
does not call, a dtype, memory, a slow first request). As TFX's InfraValidator starts the
real serving binary before Pusher may push, this starts the real model server on the
exported model (`components.serving.model_server`), sends it the held-out split's first
images one request each, as a client would (`{"instances": [{"b64": ...}]}`), and
requires HTTP 200, the documented response (`trainer.serving.app`: one prediction per
instance with `class_name`, `class_index` and a probability per class), a p95 latency
under the bound, and top-1 classes equal to the ones the trainer's own evaluation
predicted for the same images through the SavedModel's signature
(`trainer.serving.measure.reference`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from components.serving.model_server import ServerError, model_server, post
from trainer.common.contract import FEATURE_IMAGE, load_manifest, shard_paths
from trainer.common.tfrecord import parse_example, read_records
from trainer.serving import measure
from trainer.serving.container import encoded_instance


@dataclasses.dataclass(frozen=True)
class ServingCheck:
    """What the model server did with the held-out images.

    Attributes:
        ok: Every requirement held.
        problems: Each requirement that did not, in words.
        requests: Requests sent (one image each, after one to warm the server up).
        statuses: HTTP status -> how many.
        first_seconds: The first (warm-up) request's time.
        p95_seconds: The 95th percentile of the others' times.
        bound_seconds: The bound on it.
        agreed: Answers whose top-1 class is the reference's.
        compared: Answers compared with a reference.
    """

    ok: bool
    problems: list[str]
    requests: int
    statuses: dict[str, int]
    first_seconds: float
    p95_seconds: float
    bound_seconds: float
    agreed: int
    compared: int

    def describe(self) -> str:
        """The check in one line."""
        statuses = ", ".join(f"{n} x HTTP {s}" for s, n in sorted(self.statuses.items()))
        text = (f"{self.requests} held-out image(s) through the model server, one request "
                f"each: {statuses}; p95 latency {self.p95_seconds:.3f} s (bound "
                f"{self.bound_seconds:g} s; first request {self.first_seconds:.2f} s); top-1 "
                f"agrees with the SavedModel's own on {self.agreed}/{self.compared}")
        return text if self.ok else f"{text}; failed: {'; '.join(self.problems)}"

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def held_out_images(dataset_dir: str | Path, split: str, count: int) -> list[bytes]:
    """The first `count` encoded images of a split, in file order (the order the
    reference was predicted in)."""
    manifest = load_manifest(dataset_dir)
    found: list[bytes] = []
    for path in shard_paths(dataset_dir, manifest, split):
        for record in read_records(path):
            found.append(parse_example(record)[FEATURE_IMAGE][0])
            if len(found) == count:
                return found
    return found


def percentile(values: list[float], share: float) -> float:
    """The nearest-rank percentile (`share` in 0..1) of `values`."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(share * len(ordered)) - 1)] if ordered else 0.0


def check_in_server(model_dir: str, dataset_dir: str | Path, *, images: int,
                    p95_seconds: float, log: Callable[[str], None]) -> ServingCheck:
    """Starts the model server on `model_dir` and checks its answers (module docstring).

    Args:
        model_dir: The SavedModel directory (with the serving metadata and evaluation).
        dataset_dir: The prepared dataset the reference was predicted on.
        images: How many held-out images to send (at most the reference's).
        p95_seconds: The bound on the 95th percentile of one request's time.
        log: Where progress goes.

    Returns:
        The check; a server that does not start is a failed check, not an error.
    """
    manifest = load_manifest(dataset_dir)
    reference = measure.reference(model_dir, manifest) or {}
    expected = list(reference.get("class_index", []))
    split = reference.get("split") or measure.reference_split(manifest)
    sent = held_out_images(dataset_dir, split, min(images, len(expected)) if expected
                           else images)
    classes = len(manifest["classes"])
    problems: list[str] = [] if expected else [
        "no reference predictions beside the model (it was not measured on this dataset)"]
    statuses: dict[str, int] = {}
    times: list[float] = []
    first, agreed = 0.0, 0
    log(f"serving check: starting the model server on {model_dir} ({len(sent)} "
        f"{split} image(s) to send)")
    try:
        with model_server(model_dir) as base:
            for number, image in enumerate([sent[0], *sent] if sent else []):
                body = {"instances": [encoded_instance(image)]}
                status, answer, seconds = post(base, body)
                if number == 0:  # the warm-up: the first request pays for tracing
                    first = seconds
                    continue
                statuses[str(status)] = statuses.get(str(status), 0) + 1
                times.append(seconds)
                shape = _shape_problem(answer, classes) if status == 200 else \
                    f"HTTP {status}: {str(answer)[:200]}"
                if shape:
                    problems.append(f"image {number - 1}: {shape}")
                elif number - 1 < len(expected) and \
                        answer["predictions"][0]["class_index"] == expected[number - 1]:
                    agreed += 1
    except ServerError as exc:
        problems.append(str(exc))
    p95 = percentile(times, 0.95)
    if times and p95 > p95_seconds:
        problems.append(f"p95 latency {p95:.3f} s is above the bound {p95_seconds:g} s")
    compared = min(len(expected), len(times))
    if compared and agreed < compared:
        problems.append(f"the server's top-1 class differs from the SavedModel's own on "
                        f"{compared - agreed} of {compared} image(s)")
    return ServingCheck(not problems, problems[:5], len(times), statuses, first, p95,
                        p95_seconds, agreed, compared)


def _shape_problem(answer: Any, classes: int) -> str:
    """What the answer lacks of the documented response, or ""."""
    predictions = answer.get("predictions") if isinstance(answer, dict) else None
    if not isinstance(predictions, list) or len(predictions) != 1:
        return f"expected {{\"predictions\": [one]}}, got {str(answer)[:200]}"
    one = predictions[0]
    if not isinstance(one, dict) or not isinstance(one.get("class_name"), str) or \
            not isinstance(one.get("class_index"), int) or \
            len(one.get("probabilities") or []) != classes:
        return (f"a prediction needs class_name, class_index and {classes} probabilities; "
                f"got {str(one)[:200]}")
    return ""
