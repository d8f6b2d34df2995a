"""The trainer's step on one GPU, case by case: `python -m trainer.benchmark all` (what
`benchmarks/gpu.py`, `gpu-pipeline benchmark --local` and the benchmark's Vertex AI
CustomJob run). The model that `trainer.models.factory.build_model` builds and compiles
(ResNet-50 at 224x224 with 1,000 classes unless told otherwise), under the training plan the
project makes for that GPU (`trainer.cluster.training_plan.plan_training`) and variants of
it (`trainer.cluster.case_names`), on synthetic batches and through the trainer's input
pipeline over a prepared dataset's TFRecords, with a profile where a case asks for one.

Each case runs in its own process (Keras's precision policy is global, XLA's compilation is
per process), in order, as long as `--budget` allows. A case is timed over `--steps` steps
after `--warmup` steps (XLA's compilation and cuDNN's autotuning fall in the warm-up, timed
apart): images/s, step time, peak GPU memory and the GPU's utilisation sampled every 0.25 s
through NVML. XLA's cases keep XLA's log of its compiler choice. Before the cases, `check`
(`trainer.benchmark.probe`). The results file (schema 2, `trainer.cluster.measurements`) is
rewritten after every case, locally or as a `gs://` object, so a run stopped midway keeps
what ended. On a machine without a GPU, `--allow-cpu` runs the same code; its file says
`"device": "cpu"`.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from trainer.benchmark.cases import RESULT
from trainer.cluster.accelerators import accelerator_of_device
from trainer.cluster.case_names import parse
from trainer.cluster.measurements import SCHEMA

#: The cases `all` runs by default, most important first: the plan's own through the
#: TFRecords; each precision without XLA; NVIDIA's environment, NHWC and prefetching each
#: beside the case it changes (so every choice of the plan is compared in this one file);
#: XLA last (its warm-up ran past 200 s on Hopper).
CASES = ("plan+tfrecords", "float32-noxla", "float16-noxla", "bfloat16-noxla",
         "float32-noxla+nvenv", "float16-noxla+nvenv", "float32-noxla+nhwc",
         "float16-noxla+prefetch", "float16-xla")
#: What XLA's and TensorFlow's logs say of the PTX compiler (kept with each case).
COMPILER_LOG = re.compile(r"assemble_compilation_provider|ptx_compiler_helpers|"
                          r"nvjitlink|ptxas|Please upgrade to CUDA", re.I)


def header(args: argparse.Namespace, check: dict[str, Any]) -> dict[str, Any]:
    """The results file's top (schema 2): what ran, on what, when."""
    gpu = str(check.get("device") or "") if check.get("gpus") else ""
    accelerator = accelerator_of_device(gpu) if gpu else args.accelerator
    return {"schema": SCHEMA, "measured_at": datetime.datetime.now(datetime.timezone.utc)
            .isoformat(timespec="seconds"), "accelerator": accelerator,
            "gpu": gpu or (f"CPUs for {accelerator}" if accelerator else "CPUs"),
            "device": "gpu" if gpu else "cpu", "model": args.model, "image": args.image,
            "batch": args.batch, "image_size": args.size, "classes": args.classes,
            **({"declared_accelerator": args.accelerator}
               if args.accelerator and args.accelerator != accelerator else {})}


def run_all(args: argparse.Namespace) -> dict[str, Any]:
    """`check`, then every case in order, each in its own process, within the budget; the
    results file is rewritten after each part."""
    from trainer.benchmark.probe import machine

    deadline = time.monotonic() + args.budget
    me = [sys.executable, "-m", "trainer.benchmark"]
    shared = ["--batch", str(args.batch), "--size", str(args.size), "--classes",
              str(args.classes), "--warmup", str(args.warmup), "--steps", str(args.steps),
              "--model", args.model, "--user-code", args.user_code,
              "--training", args.training] + (["--allow-cpu"] if args.allow_cpu else [])
    run: dict[str, Any] = {"call": args.call, "machine": machine(), "cases": [],
                           "skipped": [], "environment": {
                               k: v for k, v in os.environ.items()
                               if k.startswith(("XLA_", "TF_"))}}
    # The check logs which CUDA libraries TensorFlow opens (a "Cannot dlopen" shows there).
    loading = {"TF_CPP_MIN_LOG_LEVEL": "0", "TF_CPP_VMODULE": "dso_loader=1"}
    [run["check"]] = _child([*me, "check", *shared], args.check_timeout, args.logs, "check",
                            loading)
    results = {**header(args, run["check"]), "runs": [run]}
    check = run["check"]
    print(f"check: {check.get('device')}, {check.get('gpus', 0)} GPU(s), TensorFlow "
          f"{check.get('tensorflow', '?')}; plan: {check.get('plan', check.get('error', '-'))}",
          flush=True)
    save(results, args.output)
    if check.get("gpus", 0) < args.expected_gpus:
        run["stopped"] = (f"TensorFlow sees {check.get('gpus', 0)} GPU(s) where the machine "
                          f"has {args.expected_gpus} (--expected-gpus): nothing measured")
    elif not (check.get("gpus") or args.allow_cpu):
        run["stopped"] = "TensorFlow registered no GPU (--allow-cpu runs on the CPUs)"
    if run.get("stopped"):
        print(f"stopped: {run['stopped']}", flush=True)
        save(results, args.output)
        return results
    found_device = ["--device", str(run["check"].get("device", "cpu")),
                    "--capability", ".".join(map(str, run["check"].get(
                        "compute_capability") or ()))]
    with tempfile.TemporaryDirectory(prefix="xla-cache-") as scratch:
        cache = ["--xla-cache", args.xla_cache or scratch]
        for name in args.cases.split(",") if args.cases else CASES:
            # A case with XLA's caches runs twice: cold (filling them), then warm.
            for _ in range(2 if parse(name).xla_cache else 1):
                left = deadline - time.monotonic()
                if left < min(args.case_timeout, 120) / 2:
                    run["skipped"].append(name)
                    break
                for found in _child([*me, "case", name, "--data", args.data, *shared,
                                     *found_device, *cache], min(args.case_timeout, left),
                                    args.logs, name):
                    run["cases"].append({"case": name, **found})
                    print(line(run["cases"][-1]), flush=True)
                save(results, args.output)
    return results


def save(results: dict[str, Any], output: str) -> str:
    """Writes the results to a local path or a `gs://` object; returns where."""
    text = json.dumps(results, indent=2) + "\n"
    if output.startswith("gs://"):
        from trainer.common.gcs import split_gcs_uri, storage_client

        bucket, name = split_gcs_uri(output)
        storage_client().bucket(bucket).blob(name).upload_from_string(
            text, content_type="application/json")
        return output
    from trainer.common.files import write_text

    Path(output).parent.mkdir(parents=True, exist_ok=True)
    write_text(output, text)
    return output


def _child(command: list[str], timeout: float, logs: Path | None, name: str,
           environ: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """A part run in its own process: its RESULT lines (one per phase it finished), then
    why it stopped if it did not end well; with `logs`, its output is kept as `<name>.log`
    (`+` and other characters outside letters, digits, `.`, `_` and `-` as `_`)."""
    started = time.monotonic()
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, **(environ or {})})
    except subprocess.TimeoutExpired as exc:
        done = subprocess.CompletedProcess(command, -9, _text(exc.stdout), _text(exc.stderr))
    output = done.stdout + done.stderr
    if logs is not None:
        logs.mkdir(parents=True, exist_ok=True)
        # Plain names: the GPU machine's transfer drops files named with a `+`.
        (logs / (re.sub(r"[^A-Za-z0-9._-]", "_", name) + ".log")).write_text(output)
    compiler_log = list(dict.fromkeys(line.strip()[:300] for line in output.splitlines()
                                      if COMPILER_LOG.search(line)
                                      and not line.startswith(RESULT)))[:16]
    found = [json.loads(line[len(RESULT):]) for line in done.stdout.splitlines()
             if line.startswith(RESULT)]
    for phase in found:
        phase["process_seconds"] = round(time.monotonic() - started, 1)
        if compiler_log and phase.get("xla"):
            phase["xla_compiler_log"] = compiler_log
    if done.returncode == 0 and found:
        return found
    tail = output.strip().splitlines()[-12:]
    error = f"timed out after {timeout:.0f} s" if done.returncode == -9 else \
        f"exit {done.returncode}"
    return [*found, {"phase": "stopped", "error": error, "log_tail": tail,
                     **({"xla_compiler_log": compiler_log} if compiler_log else {})}]


def _text(output: str | bytes | None) -> str:
    return output.decode(errors="replace") if isinstance(output, bytes) else output or ""


def line(found: dict[str, Any]) -> str:
    if "error" in found:
        return f"{found['case']}: {found['error']}"
    if found.get("phase") == "warmup":
        cache = found.get("xla_cache")
        return (f"{found['case']}: warm-up {found['warmup_seconds']} s "
                f"({found['warmup_steps']} steps)"
                + (f", {cache['start']} start: {cache['restored']} cached file(s) read, "
                   f"{cache['saved']} saved" if cache else ""))
    if found.get("phase") == "profile":
        profile = found["profile"]
        return f"{found['case']}: profile " + (profile.get("error") or json.dumps(
            {k: profile.get(k) for k in ("step_ms", "busy_percent", "shares")}))
    # A figure the machine could not measure (no GPU: no peak memory, no utilisation) is
    # left out, never printed as None.
    measured = [f"{label} {found[key]}{unit}" for key, label, unit in (
        ("peak_memory_gib", "peak", " GiB"), ("gpu_utilization_mean", "GPU busy", "%"))
        if found.get(key) is not None]
    return (f"{found['case']}: {found['images_per_second']:,.0f} images/s, "
            f"{found['step_ms']} ms/step ({found['policy']}, xla {found['xla']}, batch "
            f"{found['batch']}, {found['input']})" + "".join(f", {m}" for m in measured))


def parser() -> argparse.ArgumentParser:
    """`python -m trainer.benchmark`'s arguments."""
    parser = argparse.ArgumentParser(prog="python -m trainer.benchmark",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("part", choices=("all", "check", "case"))
    parser.add_argument("name", nargs="?", help="The case (`case`).")
    parser.add_argument("--data", default="", help="A prepared dataset (its TFRecords).")
    parser.add_argument("--model", default="resnet50", help="training.model.")
    parser.add_argument("--user-code", default="", help="training.user_code.")
    parser.add_argument("--training", default="{}", help="The training options (JSON) the "
                        "plan is made with.")
    parser.add_argument("--accelerator", default="", help="The accelerator type the job "
                        "asked for (recorded; a GPU seen is recorded as itself).")
    parser.add_argument("--image", default="", help="The trainer image's digest (recorded).")
    parser.add_argument("--call", default="", help="What this call is (recorded).")
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--classes", type=int, default=1000)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--cases", default="", help="Comma-separated cases (default: CASES).")
    parser.add_argument("--budget", type=float, default=480.0, help="Seconds for `all`.")
    parser.add_argument("--case-timeout", type=float, default=200.0)
    parser.add_argument("--check-timeout", type=float, default=120.0)
    parser.add_argument("--device", default="cpu", help="`case`: the GPU `check` found.")
    parser.add_argument("--capability", default="", help="`case`: its compute capability.")
    parser.add_argument("--allow-cpu", action="store_true")
    parser.add_argument("--expected-gpus", type=int, default=0, help="Stop unless TensorFlow "
                        "sees this many GPUs (the machine's).")
    parser.add_argument("--output", default="benchmarks/results/gpu.json",
                        help="Where `all` writes the results file (a path or gs://).")
    parser.add_argument("--logs", type=Path, help="Where `all` keeps each part's output.")
    parser.add_argument("--xla-cache", default="", help="Where the `cache` cases keep XLA's "
                        "caches (a folder, or gs:// through /gcs/); default: a temporary one.")
    return parser


def main(argv: list[str] | None = None) -> int:
    """`all` (check, then the cases, writing the results file), or one part as `all` runs
    it (`check`, `case NAME`)."""
    from trainer.benchmark import cases, probe
    from trainer.cluster.case_names import CaseError
    from trainer.common.schema import validate
    from trainer.run.training_options import TrainingOptions

    arguments = parser()
    args = arguments.parse_args(argv)
    try:
        for name in ([args.name] if args.part == "case" else
                     args.cases.split(",") if args.part == "all" and args.cases else []):
            parse(name or "")
        options = validate(TrainingOptions, json.loads(args.training), prefix="training",
                           strict=False)
    except (CaseError, ValueError) as exc:
        arguments.error(str(exc))
    if args.part == "check":
        print(RESULT + json.dumps(probe.check(args.allow_cpu, options)), flush=True)
    elif args.part == "case":
        capability = tuple(int(p) for p in args.capability.split(".")) \
            if args.capability else None
        cases.run(parse(args.name), probe.plan_for(args.device, capability, options),
                  args.data, args.batch, args.size, args.classes, args.warmup, args.steps,
                  model=args.model, user_code=args.user_code, xla_cache=args.xla_cache)
    else:
        results = run_all(args)
        print(f"results: {save(results, args.output)}")
        done = results["runs"][-1]["cases"]
        return 0 if done and all("error" not in c for c in done) else 1
    return 0

