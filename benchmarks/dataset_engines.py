"""The dataset stage's two engines side by side: local (process pool) and Beam (FnApiRunner).

Generates photo-like JPEGs (500x375, the typical ImageNet photo; not timed) and, in
interleaved rounds, prepares them at 224x224 JPEG with each engine on 1 process and on
every core. Reports images/s, the Beam/local ratio per core count, the measured cost per
image (core-seconds), and a projection of wall time for 1.28 million (ImageNet) and 10
million images on one 8-core component machine vs N Dataflow workers.

What is measured: images/s per engine and core count here. What is assumed (stated in the
output): a Dataflow worker's vCPU encodes at the per-core rate measured here with the Beam
engine at 1 process, scaling is linear in vCPUs (no network bound), and a Dataflow job
spends a fixed start-up and shut-down time (`--startup-minutes`).

Usage: python benchmarks/dataset_engines.py [--photos N] [--rounds N] [--output FILE]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import common

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

SIZES = {"ImageNet (1.28 M)": 1_281_167, "10 M images": 10_000_000}
COMPONENT_CORES = 8
WORKERS = (10, 50)
WORKER_VCPUS = 4  # n2-standard-4, the dataflow_machine_type default


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--photos", type=int, default=600, help="Photo-like images.")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--startup-minutes", type=float, default=5.0,
                        help="Assumed Dataflow start-up plus shut-down time.")
    parser.add_argument("--output", type=Path)
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from components.dataset.prepare import prepare_source

    info = common.machine()
    cores = info["cores"]
    print(f"machine: {common.describe_machine(info)}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        photos = common.photo_like_folder(work / "photos", 3, args.photos // 3, 500, 375)

        def prepare(engine: str, processes: int) -> float:
            out = work / "out"
            shutil.rmtree(out, ignore_errors=True)
            started = time.perf_counter()
            manifest = prepare_source(str(photos), out, image_size=224, image_format="jpeg",
                                      engine=engine, processes=processes)
            return manifest["examples"] / (time.perf_counter() - started)

        cases = {f"{engine}, {n} proc": (lambda e=engine, n=n: prepare(e, n))
                 for n in sorted({1, cores}) for engine in ("local", "beam")}
        samples = common.interleaved(cases, args.rounds, unit=" img/s")
    med = common.medians(samples)
    results = {"machine": info, "photos": args.photos, "images_per_second": med,
               "samples": samples,
               "beam_over_local": {n: common.ratio(samples, f"beam, {n} proc",
                                                   f"local, {n} proc")
                                   for n in sorted({1, cores})}}
    per_core = med["beam, 1 proc"]
    local_per_core = med[f"local, {cores} proc"] / cores
    results["assumed"] = {"worker_vcpus": WORKER_VCPUS, "startup_minutes": args.startup_minutes,
                          "component_cores": COMPONENT_CORES,
                          "per_vcpu_images_per_second": round(per_core, 1)}
    projection = {}
    for label, images in SIZES.items():
        one = images / (local_per_core * COMPONENT_CORES) / 3600
        row = {f"one {COMPONENT_CORES}-core machine, local engine (h)": round(one, 2)}
        for workers in WORKERS:
            hours = images / (per_core * WORKER_VCPUS * workers) / 3600 + \
                args.startup_minutes / 60
            row[f"Dataflow, {workers} x {WORKER_VCPUS} vCPU (h)"] = round(hours, 2)
        projection[label] = row
    results["projection"] = projection
    for n in sorted({1, cores}):
        print(f"{n} proc: local {med[f'local, {n} proc']:,.1f} img/s, beam "
              f"{med[f'beam, {n} proc']:,.1f} img/s, beam/local "
              f"{results['beam_over_local'][n]['median']:.2f}")
    for label, row in projection.items():
        print(f"{label}: " + "; ".join(f"{k} {v}" for k, v in row.items()))
    print(f"results: {common.save('dataset_engines', results, args.output)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
