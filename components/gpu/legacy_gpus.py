"""Legacy AI Platform machine types and scale tiers whose GPUs the trainer image cannot
run (the K80 of `standard_gpu`, `complex_model_m_gpu`, `complex_model_l_gpu` and the
`BASIC_GPU` tier): refused naming the legacy type that implies them, with the nearest
supported configuration as a complete `trainingInput` to paste.

Nearest: the same Compute Engine machine (`catalog.LEGACY_MACHINES`' equivalent) with as
many GPUs of the oldest type the image runs that attaches in that count (T4: 1, 2 or 4;
else V100: 1, 2, 4 or 8), each candidate checked by the GPU rules before it is offered.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from components.gpu import catalog as cat
from components.gpu.ai_platform_job import TASKS
from components.gpu.image_support import image_cannot_serve

#: The GPU types offered in place of one the image cannot run, oldest first (both attach
#: to the N1 machines the legacy types map to).
REPLACEMENTS = (cat.T4, cat.V100)


def unsupported_legacy(training_input: Mapping[str, Any]) -> dict[str, tuple[str, Any]]:
    """The tasks whose legacy type carries a GPU the image cannot run: task -> (the field
    that names it, e.g. `masterType` or `scaleTier`, its value)."""
    tier = str(training_input.get("scaleTier", "BASIC")).upper()
    if tier in cat.SCALE_TIERS:
        legacy = cat.LEGACY_MACHINES[cat.SCALE_TIERS[tier]]
        bad = legacy.gpu and image_cannot_serve(legacy.gpu[0])
        return {"master": ("scaleTier", training_input.get("scaleTier"))} if bad else {}
    found = {}
    for task in TASKS:
        machine = training_input.get(f"{task}Type")
        legacy = cat.LEGACY_MACHINES.get(machine) if isinstance(machine, str) else None
        if legacy and legacy.gpu and image_cannot_serve(legacy.gpu[0]):
            found[task] = (f"{task}Type", machine)
    return found


def _machine_of(training_input: Mapping[str, Any], task: str) -> cat.LegacyMachine:
    tier = str(training_input.get("scaleTier", "BASIC")).upper()
    name = cat.SCALE_TIERS[tier] if tier in cat.SCALE_TIERS else training_input[f"{task}Type"]
    return cat.LEGACY_MACHINES[name]


def replacement(training_input: Mapping[str, Any], region: str | None,
                convert: Callable[..., Any]) -> dict[str, Any] | None:
    """The `trainingInput` with every unsupported legacy type replaced (module docstring);
    None when no candidate passes the GPU rules. `convert`: the converter of a
    `trainingInput` to worker pools (`ai_platform_pools.convert_ai_platform_config`)."""
    from components.gpu.pools import check_pools
    from components.gpu.validation import validate_worker_pool_specs

    unsupported = unsupported_legacy(training_input)
    if not unsupported:
        return None
    result = {"scaleTier": "CUSTOM", **_only_used(
        {k: v for k, v in training_input.items() if k != "scaleTier"})}
    for task in unsupported:
        legacy = _machine_of(training_input, task)
        count = legacy.gpu[1] if legacy.gpu else 1
        for gpu in REPLACEMENTS:
            if count not in cat.GPU_COUNTS[gpu]:
                continue
            config = dict(training_input.get(f"{task}Config") or {})
            candidate = {**result, f"{task}Type": legacy.equivalent, f"{task}Config": {
                **config, "acceleratorConfig": {"count": count, "type": gpu}}}
            converted = convert(candidate, check_legacy=False)
            pool = converted.specs[_index(task)] if len(converted.specs) > _index(task) else {}
            # The machine alone first (as a chief: one replica), the whole cluster last.
            if pool and validate_worker_pool_specs([{**pool, "replica_count": 1}], region).ok:
                result = candidate
                break
        else:
            return None
    whole = convert(result, check_legacy=False)
    return result if check_pools(whole.specs, region=region).ok else None


def _only_used(training_input: Mapping[str, Any]) -> dict[str, Any]:
    """The fields the pipeline takes: what the conversion's warnings say to leave out
    (`ai_platform_job.NOT_USED`, `TASK_NOT_USED`) is left out of the configuration offered
    to paste."""
    from components.gpu.ai_platform_job import NOT_USED, TASK_NOT_USED

    kept: dict[str, Any] = {}
    for key, value in training_input.items():
        if key in NOT_USED:
            continue
        if isinstance(value, Mapping):
            unused = TASK_NOT_USED if key.endswith("Config") else {}
            value = {k: v for k, v in value.items()
                     if f"{key}.{k}" not in NOT_USED and k not in unused}
        kept[key] = value
    return kept


def _index(task: str) -> int:
    return TASKS.index(task)


def refusal(training_input: Mapping[str, Any], region: str | None,
            convert: Callable[..., Any]) -> list[str]:
    """One error per legacy type the image cannot run, the last with the configuration to
    paste instead ([] when every type is supported); `convert` as `replacement` takes it."""
    import yaml

    unsupported = unsupported_legacy(training_input)
    errors, said = [], set()
    for task, (field, value) in unsupported.items():
        legacy = _machine_of(training_input, task)
        gpu, count = legacy.gpu or ("", 0)
        why = "" if gpu in said else f": {image_cannot_serve(gpu)}"
        said.add(gpu)
        kind = "scale tier" if field == "scaleTier" else "machine type"
        errors.append(f"trainingInput.{field} is {value}, a legacy AI Platform {kind} that "
                      f"carries {count} x {gpu}, which the trainer image cannot run{why}")
    if errors:
        nearest = replacement(training_input, region, convert)
        if nearest is not None:
            block = yaml.safe_dump({"trainingInput": nearest}, sort_keys=False).rstrip()
            errors[-1] += ("; the nearest supported configuration, the same machines with "
                           "supported GPUs, to paste in its place:\n"
                           + "\n".join(f"      {line}" for line in block.splitlines()))
        else:
            errors[-1] += ("; the same machines with T4 or V100 GPUs would break the GPU rules "
                           "too (validate-gpu says which): choose the machines and GPUs as in "
                           "docs/gpu-configuration.md")
    return errors
