"""The trainer's step on one GPU, as the project measures it on a lent GPU machine
(`benchmarks/gpu_on_device.sh`): `prepare` makes the TFRecords to carry there; `all`,
`check` and `case` are `python -m trainer.benchmark`'s (`trainer/benchmark/runner.py`: each
case in its own process, timed after a timed warm-up, the results file rewritten after each
case), here with the cases this project's Hopper runs rank first (`CASES`) and the results
file under benchmarks/results/.

Usage:
  python benchmarks/gpu.py prepare --out DIR [--images N]   (here: the TFRecords to carry)
  python benchmarks/gpu.py all --data DIR [--output FILE] [--budget S] [--cases A,B] ...
  python benchmarks/gpu.py check | case NAME --data DIR     (one part, as `all` runs them)
On a machine without a GPU, `--allow-cpu` runs the same code (tests, tiny sizes).
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import common

#: The cases `all` runs here, most important first: the plan's own, through the
#: TFRecords and profiled; steps per execution, a larger batch and prefetching on it;
#: bfloat16 with NVIDIA's environment and float32, side by side with it; float32 in NHWC
#: (its NCHW transposes were 11.2% of its step); XLA last, its GEMMs on cuBLAS (its warm-up
#: ran past 210 s on an H200 with Triton's GEMMs, and stopped in their autotuner at level 0).
CASES = ("plan+tfrecords+profile", "plan+spe4", "plan+b512", "plan+prefetch",
         "bfloat16-noxla+nvenv", "float32-noxla", "float32-noxla+nvenv+nhwc",
         "float16-xla+nvenv+notriton")


def prepare(out: Path, images: int, size: int) -> dict[str, Any]:
    """The dataset stage's TFRecords of photo-like JPEGs (10 classes), to carry along."""
    from components.dataset.prepare import prepare_source

    with tempfile.TemporaryDirectory() as work:
        source = common.photo_like_folder(Path(work) / "source", classes=10,
                                          per_class=max(1, images // 10), width=500,
                                          height=375)
        manifest = prepare_source(str(source), out, image_size=size, image_format="jpeg",
                                  validation_fraction=0.1, test_fraction=0.0, num_shards=4)
    return {"images": {k: v["count"] for k, v in manifest["splits"].items()},
            "bytes": sum(p.stat().st_size for p in out.rglob("*") if p.is_file())}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["prepare"]:
        import argparse

        parser = argparse.ArgumentParser(description="The TFRecords to carry to a GPU.")
        parser.add_argument("--out", type=Path, required=True)
        parser.add_argument("--images", type=int, default=400)
        parser.add_argument("--size", type=int, default=224)
        args = parser.parse_args(argv[1:])
        print(json.dumps(prepare(args.out, args.images, args.size)))
        return 0
    from trainer.benchmark.runner import main as run

    defaults = [] if any(a.startswith("--cases") for a in argv) or argv[:1] != ["all"] \
        else ["--cases", ",".join(CASES)]
    output = [] if any(a.startswith("--output") for a in argv) or argv[:1] != ["all"] \
        else ["--output", str(common.RESULTS / "gpu.json")]
    call = [] if any(a.startswith("--call") for a in argv) or argv[:1] != ["all"] \
        else ["--call", f"benchmarks/gpu.py at commit {common.machine()['commit']}"]
    return run([*argv, *defaults, *output, *call])


if __name__ == "__main__":
    sys.exit(main())
