"""Where a run's GPU time went: every replica's efficiency series merged after training,
the derived figures, the verdict with its evidence, and one line of advice.

The replicas append their series to the job directory (`trainer.run.efficiency_log`); the
training report merges them once the job is over (every replica has ended then) and
names a replica whose file is missing. The figures (`efficiency.json`):
- per replica: images per second (and per GPU), the step time and the part of it spent
  waiting for input, GPU utilisation, memory and power (or why they are unavailable), the
  host's CPU use and network rate;
- for the cluster: images per second, GPU-hours;
- the verdict: `input-bound` when the steps wait for their batches for at least
  INPUT_BOUND of their time; else, on several machines whose GPUs are busy less than
  GPU_BUSY percent, `communication-bound` (the steps neither wait for input nor keep the
  GPUs busy: the rest is the all-reduce between machines; a profile confirms it); else
  `compute-bound`;
- a replica whose steps wait for input longer than the others' by SLOW_MARGIN of the
  step, or whose steps take SLOW_MARGIN longer, is named.
"""

from __future__ import annotations

import os
import statistics
from typing import Any

from components.training.reference_throughput import reference
from trainer.common import files
from trainer.run.efficiency_log import read_series

FILE = "efficiency.json"
#: Fewer measured steps per replica than this are no ground for a verdict.
MIN_STEPS = 5
#: The share of the step spent waiting for input from which a run is input-bound.
INPUT_BOUND = 0.25
#: How much worse than the median replica a replica must be to be named.
SLOW_MARGIN = 0.15
#: GPU memory use under which the advice is a larger batch.
MEMORY_LEFT = 0.5
#: GPU utilisation under which a multi-machine run that does not wait for input is
#: communication-bound: its steps spend the rest in the all-reduce.
GPU_BUSY = 60.0


def expected_replicas(strategy: str, training_machines: int) -> list[str]:
    """The replicas that write a series: every training machine (under
    ParameterServerStrategy the chief only: the workers run no training loop of their
    own)."""
    if strategy == "parameter_server":
        return ["chief-0"]
    if training_machines <= 1:
        return []  # one process: named after its TF_CONFIG, whatever it is
    return ["chief-0"] + [f"worker-{i}" for i in range(training_machines - 1)]


def _last_per_epoch(epochs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A restarted replica runs an epoch again: its last record of each epoch counts."""
    by_epoch = {e["epoch"]: e for e in epochs}
    return [by_epoch[k] for k in sorted(by_epoch)]


def _weighted(epochs: list[dict[str, Any]], key: str) -> float | None:
    pairs = [(e[key], e["steps"]) for e in epochs if e.get(key) is not None and e["steps"]]
    total = sum(steps for _, steps in pairs)
    return sum(v * s for v, s in pairs) / total if total else None


def _gpu_figures(samples: list[dict[str, Any]]) -> dict[str, Any]:
    readings = [s["gpus"] for s in samples if isinstance(s.get("gpus"), list) and s["gpus"]]
    if not readings:
        why = next((s["gpus"]["unavailable"] for s in samples
                    if isinstance(s.get("gpus"), dict)), "no samples")
        return {"unavailable": why}
    flat = [g for reading in readings for g in reading]
    return {"count": len(readings[-1]), "name": readings[-1][0].get("name", ""),
            "utilization_percent": round(statistics.fmean(
                g["utilization_percent"] for g in flat), 1),
            "memory_used_bytes": max(g["memory_used_bytes"] for g in flat),
            "memory_total_bytes": max(g["memory_total_bytes"] for g in flat),
            "power_watts": round(statistics.fmean(g["power_watts"] for g in flat), 1),
            "temperature_c": max(g["temperature_c"] for g in flat),
            "throttle_reasons": sorted({r for g in flat for r in g["throttle_reasons"]}),
            "samples": len(readings)}


def _host_figures(samples: list[dict[str, Any]]) -> dict[str, Any]:
    hosts = [s["host"] for s in samples if "cpu_percent" in s.get("host", {})]
    if not hosts:
        return {"unavailable": next((s["host"].get("unavailable") for s in samples
                                     if "host" in s), "no samples")}
    figures = {"cpu_percent": round(statistics.fmean(h["cpu_percent"] for h in hosts), 1),
               "memory_used_bytes": max(h["memory_used_bytes"] for h in hosts),
               "memory_total_bytes": hosts[-1]["memory_total_bytes"]}
    timed = [s for s in samples if "cpu_percent" in s.get("host", {})]
    seconds = timed[-1]["at"] - timed[0]["at"] if len(timed) > 1 else 0
    if seconds > 0:  # all-reduce and Cloud Storage reads together
        moved = sum(timed[-1]["host"][k] - timed[0]["host"][k]
                    for k in ("network_sent_bytes", "network_received_bytes"))
        figures["network_bytes_per_second"] = round(moved / seconds)
    return figures


def replica_figures(lines: list[dict[str, Any]]) -> dict[str, Any]:
    """One replica's figures from its series."""
    epochs = _last_per_epoch([x for x in lines if x.get("kind") == "epoch"])
    samples = [x for x in lines if x.get("kind") == "sample"]
    step = _weighted(epochs, "step_seconds")
    wait = _weighted(epochs, "input_seconds")
    gpu = _gpu_figures(samples)
    images = _weighted(epochs, "images_per_second")
    warmups = [{k: x[k] for k in ("fit", "epoch", "first_step_seconds", "steady_step_seconds",
                                  "warmup_seconds", "compiler") if k in x}
               for x in lines if x.get("kind") == "warmup"]
    return {
        "epochs": epochs, "step_seconds": round(step, 6) if step is not None else None,
        "input_seconds": round(wait, 6) if wait is not None else None,
        "input_share": round(min(1.0, wait / step), 4) if wait is not None and step else None,
        "images_per_second": round(images, 2) if images is not None else None,
        "images_per_second_per_gpu": round(images / gpu["count"], 2)
        if images is not None and gpu.get("count") else None,
        "warmups": warmups,
        "warmup_seconds": round(sum(w["warmup_seconds"] for w in warmups), 3)
        if warmups else None,
        "gpu": gpu, "host": _host_figures(samples), "samples": len(samples),
        "timeline": _timeline(samples)}


def _timeline(samples: list[dict[str, Any]], points: int = 200) -> list[list[float | None]]:
    """[seconds since the first sample, CPU %, mean GPU % or None], at most `points`."""
    if not samples:
        return []
    step = max(1, len(samples) // points)
    start = samples[0]["at"]
    out = []
    for sample in samples[::step]:
        gpus = sample.get("gpus")
        busy = statistics.fmean(g["utilization_percent"] for g in gpus) \
            if isinstance(gpus, list) and gpus else None
        out.append([round(sample["at"] - start, 1), sample.get("host", {}).get("cpu_percent"),
                    busy])
    return out


def merge(job_dir: str, expected: list[str], train_seconds: float, *, model: str = "",
          mixed_precision: str = "off", cache: bool = False) -> dict[str, Any]:
    """Every replica's figures, the cluster's, the verdict and the advice; for a `model`
    NVIDIA measured on the GPUs seen, NVIDIA's figure beside the run's."""
    series = read_series(job_dir)
    replicas = {name: replica_figures(lines) for name, lines in series.items()}
    missing = [name for name in expected if name not in replicas]
    measured = {n: r for n, r in replicas.items() if r["step_seconds"]}
    gpus = sum(r["gpu"].get("count", 0) for r in replicas.values())
    cluster = {
        "replicas": len(replicas), "missing_replicas": missing,
        "images_per_second": round(sum(r["images_per_second"] or 0
                                       for r in measured.values()), 2),
        "gpus": gpus, "gpu_hours": round(gpus * train_seconds / 3600, 4),
        "train_seconds": round(train_seconds, 1)}
    per_gpu = [r["images_per_second_per_gpu"] for r in measured.values()
                if r["images_per_second_per_gpu"]]
    if per_gpu:
        cluster["images_per_second_per_gpu"] = round(statistics.fmean(per_gpu), 2)
    gpu_name = next((r["gpu"]["name"] for r in replicas.values() if r["gpu"].get("name")), "")
    verdict, evidence = _verdict(measured, len(replicas))
    return {"replicas": replicas, "cluster": cluster, "verdict": verdict,
            "evidence": evidence, "slow_replicas": _slow(measured),
            "advice": _advice(verdict, measured, cache),
            "reference": reference(model, gpu_name, mixed_precision)}


def _verdict(measured: dict[str, dict[str, Any]], machines: int) -> tuple[str, str]:
    shares = [r["input_share"] for r in measured.values() if r["input_share"] is not None]
    if not shares:
        return "unknown", "no replica's steps were split (none measured, or parameter servers)"
    steps = statistics.median(sum(e["steps"] for e in r["epochs"]) for r in measured.values())
    if steps < MIN_STEPS:  # an epoch of a step or two is mostly its own start
        return "unknown", (f"only {steps:g} measured step(s) per replica (at least "
                           f"{MIN_STEPS} to judge): a training split of a few global batches")
    share = statistics.fmean(shares)
    if share >= INPUT_BOUND:
        return "input-bound", (f"the steps wait for their batches {share:.0%} of their time "
                               f"(at least {INPUT_BOUND:.0%} is input-bound)")
    busy = [r["gpu"]["utilization_percent"] for r in measured.values()
            if r["gpu"].get("count")]
    if machines > 1 and busy and statistics.fmean(busy) < GPU_BUSY:
        return "communication-bound", (
            f"the steps wait for their batches {share:.0%} of their time, yet the GPUs are "
            f"busy only {statistics.fmean(busy):.0f}% (under {GPU_BUSY:.0f}%): the rest is "
            f"the all-reduce between the {machines} machines (training.profile_steps "
            "confirms it)")
    return "compute-bound", (f"the steps wait for their batches {share:.0%} of their time; "
                             "the rest is compute and the all-reduce (a profile tells them "
                             "apart)")


def _slow(measured: dict[str, dict[str, Any]]) -> list[str]:
    if len(measured) < 2:
        return []
    named = []
    step = statistics.median(r["step_seconds"] for r in measured.values())
    waits = [r["input_seconds"] for r in measured.values() if r["input_seconds"] is not None]
    wait = statistics.median(waits) if waits else None
    for name, r in measured.items():
        if r["step_seconds"] > step * (1 + SLOW_MARGIN):
            named.append(f"{name}: its steps take {r['step_seconds']:.4f} s, the median "
                         f"{step:.4f} s")
        elif wait is not None and r["input_seconds"] is not None and \
                r["input_seconds"] - wait > SLOW_MARGIN * step:
            named.append(f"{name}: waits {r['input_seconds']:.4f} s a step for input, the "
                         f"median replica {wait:.4f} s")
    return named


def _advice(verdict: str, measured: dict[str, dict[str, Any]], cache: bool = False) -> str:
    if verdict == "input-bound":
        return ("feed the steps faster: " + (
            "" if cache else "cache the decoded images (training.cache: on, with "
            "training.cache_budget_mb for them), ")
            + "give the input more CPU (a machine with more vCPUs), or keep the data in the "
            "job's region" + (" (the decoded images are cached already)" if cache else ""))
    if verdict == "communication-bound":
        return ("shorten the all-reduce: a Reduction Server pool (pool 2, Vertex AI's "
                "reductionserver image) for NCCL across machines, a larger training.batch_size "
                "(fewer all-reduces per epoch), or fewer machines: scaling out adds little "
                "while the GPUs wait for each other")
    gpus = [r["gpu"] for r in measured.values() if r["gpu"].get("count")]
    if gpus:
        used = max(g["memory_used_bytes"] / g["memory_total_bytes"] for g in gpus)
        if used < MEMORY_LEFT:
            return (f"the GPUs use at most {used:.0%} of their memory: a larger "
                    "training.batch_size (with training.scale_learning_rate) does more per step")
        return "none: the GPUs are busy with the model's own work"
    if verdict == "unknown":
        return "none: nothing was measured"
    return ("none from these figures: no GPU was seen (NVML unavailable), so only the host's "
            "CPU use is known")


def metrics(figures: dict[str, Any]) -> dict[str, float]:
    """The KFP Metrics artifact's share: the cluster's figures as numbers."""
    cluster = figures["cluster"]
    shares = [r["input_share"] for r in figures["replicas"].values()
              if r["input_share"] is not None]
    found = {"images_per_second": cluster["images_per_second"],
             "gpu_hours": cluster["gpu_hours"]}
    if shares:
        found["input_share"] = round(statistics.fmean(shares), 4)
    busy = [r["utilization"]["mean_percent"] for r in
            figures.get("cloud_monitoring", {}).get("replicas", {}).values()
            if "utilization" in r]
    if busy:
        found["cloud_monitoring_gpu_percent"] = round(statistics.fmean(busy), 1)
    return found


def load(job_dir: str) -> dict[str, Any] | None:
    """The training report's figures (None where it wrote none)."""
    return files.read_json(os.path.join(job_dir, FILE))


def summary(figures: dict[str, Any]) -> dict[str, Any]:
    """What the model's lineage keeps of them: the cluster's figures, the verdict and the
    estimated cost."""
    cost = figures.get("cost") or {}
    return {**metrics(figures), "verdict": figures["verdict"],
            **({"cost_usd": cost["usd"], "prices_read": cost["prices_read"]} if cost else {})}


def write(job_dir: str, figures: dict[str, Any]) -> str:
    """`efficiency.json` in the job directory; returns its path."""
    path = os.path.join(job_dir, FILE)
    files.write_json(path, figures)
    return path


def lines(figures: dict[str, Any]) -> list[str]:
    """What the run prints: one line per replica, the cluster, the verdict, the advice."""
    out = []
    for name, r in sorted(figures["replicas"].items()):
        share = "unavailable" if r["input_share"] is None else f"{r['input_share']:.0%}"
        gpu = r["gpu"]
        gpu_text = f"GPU unavailable ({gpu['unavailable']})" if "unavailable" in gpu else \
            f"{gpu['count']} GPU(s) {gpu['utilization_percent']:.0f}% busy"
        cpu = r["host"].get("cpu_percent")
        warm = r.get("warmup_seconds")
        out.append(f"efficiency: {name}: {r['images_per_second'] or 0:.0f} images/s in its "
                   f"steps, step {(r['step_seconds'] or 0) * 1000:.1f} ms, input {share} of "
                   f"the step; {gpu_text}" + (f"; CPU {cpu:.0f}%" if cpu is not None else "")
                   + (f"; warm-up {warm:.1f} s (the first steps' tracing and compilation)"
                      if warm is not None else ""))
    cluster = figures["cluster"]
    gpu_time = f"{cluster['gpu_hours']:.3f} GPU-hours" if cluster["gpus"] else "no GPU seen"
    out.append(f"efficiency: cluster {cluster['images_per_second']:.0f} images/s in the steps "
               f"(the replicas' sum), {gpu_time}"
               + (f"; no series from {', '.join(cluster['missing_replicas'])}"
                  if cluster["missing_replicas"] else ""))
    out.append(f"efficiency: {figures['verdict']}: {figures['evidence']}")
    for slow in figures["slow_replicas"]:
        out.append(f"efficiency: slower than the others: {slow}")
    out.append(f"efficiency: advice: {figures['advice']}")
    if figures.get("reference"):
        from components.training.reference_throughput import line as reference_line

        out.append("efficiency: " + reference_line(
            figures["reference"], figures["cluster"].get("images_per_second_per_gpu")))
    if figures.get("cloud_monitoring"):
        from components.training.job_utilization import lines as monitored

        out.extend(f"efficiency: {line}" for line in monitored(figures["cloud_monitoring"]))
    if figures.get("cost"):
        from components.capacity.cost import line

        out.append(f"efficiency: {line(figures['cost'])}")
    return out


def html(figures: dict[str, Any], chart: str = "") -> str:
    """The reports' efficiency section: a table per replica, then `chart` (each replica's
    CPU and GPU use over time, `components.charts.use_over_time`, drawn by the caller)."""
    import html as escape

    rows = []
    for name, r in sorted(figures["replicas"].items()):
        gpu = r["gpu"]
        rows.append("<tr>" + "".join(f"<td>{escape.escape(str(v))}</td>" for v in (
            name, r["images_per_second"], r["images_per_second_per_gpu"] or "-",
            "-" if r["step_seconds"] is None else f"{1000 * r['step_seconds']:.1f}",
            "-" if r["input_share"] is None else f"{r['input_share']:.0%}",
            gpu.get("unavailable") or f"{gpu['utilization_percent']}%",
            r["host"].get("cpu_percent", "-"))) + "</tr>")
    monitored = ""
    if figures.get("cloud_monitoring"):
        from components.training.job_utilization import lines as monitored_lines

        monitored = "<p>" + "<br>".join(escape.escape(line) for line in
                                        monitored_lines(figures["cloud_monitoring"])) + "</p>"
    return ("<h2>Efficiency</h2>"
            f"<p>{escape.escape(figures['verdict'])}: {escape.escape(figures['evidence'])}"
            f"<br>advice: {escape.escape(figures['advice'])}</p>"
            "<table><tr><th>replica</th><th>images/s in its steps</th><th>images/s per GPU</th>"
            "<th>step (ms)</th><th>input share</th><th>GPU busy</th><th>CPU %</th></tr>"
            + "".join(rows) + "</table>"
            + chart
            + monitored)
