"""`gpu-pipeline validate-gpu`: any GPU configuration file or flags, checked against the rules.

Reads an AI Platform Training `config.yaml`, a list of Vertex AI worker pool specs (YAML or
JSON) or a gpu-pipeline configuration, and prints the problems or the normalised pools.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipelines.commands.common import positive_int
from trainer.common.errors import InputError
from trainer.common.schema import short

if TYPE_CHECKING:
    from components.gpu.alternatives import Checked
    from trainer.run.training_options import TrainingOptions


def add_parser(commands: Any, parser_class: type) -> None:
    """Declares the command and its flags."""
    parser = commands.add_parser("validate-gpu",
                                 help="Check a GPU configuration against the rules.")
    parser.add_argument("--config", type=Path, help="An AI Platform config.yaml (trainingInput), "
                        "Vertex worker pool specs (YAML/JSON list) or a gpu-pipeline config.")
    parser.add_argument("--machine-type", help="Compute Engine machine type, e.g. n1-standard-8.")
    parser.add_argument("--accelerator-type", help="GPU type, e.g. NVIDIA_TESLA_T4.")
    parser.add_argument("--accelerator-count", type=int, default=None, help="GPUs per machine.")
    parser.add_argument("--replica-count", type=positive_int, default=1,
                        help="Machines of this type (1 chief + the rest as workers).")
    parser.add_argument("--region", help="Vertex AI region.")
    parser.add_argument("--json", action="store_true", help="Print a machine-readable report.")


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _section(data: Any, key: str) -> dict:
    value = data.get(key) if isinstance(data, dict) else None
    return value if isinstance(value, dict) else {}


#: The `vertex` fields the GPU check reads (the others are only checked for their form).
GPU_KEYS = ("worker_pool_specs", "scheduling_strategy", "timeout", "fallbacks")


def validate_file(path: Path, region: str | None):
    """Validates a file in any of the accepted formats by stage 1's one check
    (`check_pools`: GPU rules, roles, training plan and, in a gpu-pipeline config, the
    scheduling strategy's rules); returns (result, region, format, the training options: a
    gpu-pipeline config's own, else the defaults)."""
    from components.gpu.ai_platform_pools import validate_ai_platform_config
    from components.gpu.pools import check_pools, with_role_checks
    from components.vertex_options import VertexOptions
    from pipelines.config import SECTIONS, VertexConfig, measurements_location
    from pipelines.config_loading import (
        AI_PLATFORM_KEYS,
        unknown_sections,
        with_absolute_paths,
        without_deprecated_keys,
    )
    from pipelines.yaml_input import read_yaml
    from trainer.common.schema import validate
    from trainer.run.training_options import TrainingOptions

    data = read_yaml(path, "--config")
    if data is None or data == {} or data == []:
        raise InputError(f"config file {str(path)!r} is empty: nothing to validate (give "
                         "worker pools: an AI Platform config.yaml, Vertex worker pool specs "
                         "or a gpu-pipeline config with a vertex section)")
    defaults = TrainingOptions()
    if isinstance(data, list):
        return (check_pools(data, region=region, training=defaults), region,
                "vertex worker pool specs", defaults)
    if isinstance(data, dict) and AI_PLATFORM_KEYS & set(data):
        region = region or _text(_section(data, "trainingInput").get("region"))
        return (with_role_checks(validate_ai_platform_config(data, region), defaults), region,
                "AI Platform config.yaml", defaults)
    if isinstance(data, dict) and "worker_pool_specs" in data:
        region = region or _text(data.get("region"))
        return (check_pools(data["worker_pool_specs"], region=region, training=defaults),
                region, "vertex worker pool specs", defaults)
    if isinstance(data, dict) and set(data) & set(SECTIONS):
        if data.get("vertex") is not None and not isinstance(data["vertex"], dict):
            raise InputError(f"--config {str(path)!r}: vertex is {short(data['vertex'])}; "
                             "expected a mapping with region, worker_pool_specs, ...")
        vertex = _section(data, "vertex")
        region = region or _text(vertex.get("region")) or VertexOptions().region
        current = with_absolute_paths(without_deprecated_keys(data, str(path), None),
                                      path.resolve().parent)  # local-run keys: not here
        # Every section's problems at once, as `run` and `compile` report them.
        problems = unknown_sections(data)
        try:
            training = validate(TrainingOptions, _section(current, "training"),
                                prefix="training", strict=False)
        except InputError as exc:
            problems.append(str(exc))
            training = defaults
        root = vertex.get("pipeline_root")
        training = training.model_copy(update={"measurements": measurements_location(
            training.measurements, root if isinstance(root, str) else "")})
        try:  # the section's other fields (a misspelt key among them)
            validate(VertexConfig, {k: v for k, v in vertex.items() if k not in GPU_KEYS},
                     prefix="vertex", strict=False)
        except InputError as exc:
            problems.append(str(exc))
        try:
            # As submit checks it: every alternative, with its scheduling strategy's rules.
            checked = _alternatives(vertex, region, training)
        except InputError as exc:
            problems.append(str(exc))
        if len(problems) > 1:
            raise InputError("invalid configuration:\n" + "\n".join(f"  - {p}"
                                                                      for p in problems))
        if problems:
            raise InputError(problems[0])
        return (checked if vertex.get("fallbacks") else checked.results[0], region,
                "gpu-pipeline config", training)
    misspelt = [line for line in unknown_sections(data) if "did you mean" in line] \
        if isinstance(data, dict) else []
    if misspelt:  # a gpu-pipeline config whose sections are misspelt, as `run` says it
        raise InputError(f"--config {str(path)!r}: " + "; ".join(misspelt))
    raise InputError(f"--config {str(path)!r} is in no format validate-gpu reads: expected an AI "
                     "Platform config.yaml (trainingInput: ...), Vertex worker pool specs (a "
                     "list, or worker_pool_specs: [...]), or a gpu-pipeline config (vertex: ...)")


def _alternatives(vertex: dict, region: str, training: TrainingOptions | None) -> Checked:
    """A config's primary configuration and fallbacks checked (`Checked`)."""
    from components.gpu.configuration import check_configuration
    from components.vertex_options import VertexOptions
    from pipelines.config import reservations_in_project
    from trainer.common.schema import validate

    vertex = reservations_in_project(vertex)  # ZONE/NAME in the config's project
    options = validate(VertexOptions, {"region": region, **{k: vertex[k] for k in GPU_KEYS
                                                            if k in vertex}},
                       prefix="vertex", strict=False)
    return check_configuration(options, training).checked


def _config_vertex(path: Path | None) -> dict[str, Any]:
    """A gpu-pipeline config's `vertex` section (validated with the file), or {}."""
    import yaml

    if path is None:
        return {}
    data = yaml.safe_load(Path(path).read_text()) if Path(path).suffix in (".yaml", ".yml") \
        else None
    vertex = data.get("vertex") if isinstance(data, dict) else None
    return vertex if isinstance(vertex, dict) else {}


def _book_of(vertex: dict[str, Any]) -> Any:
    """The prices of a config's `vertex` section (its `prices` over what is read)."""
    from components.prices.price_list import PriceBook

    prices = vertex.get("prices")
    return PriceBook({str(k): float(v) for k, v in prices.items()}
                     if isinstance(prices, dict) else {}, log=lambda line: print(line))


def most_line(pools: Any, prices: Any, strategy: str, timeout: str) -> str:
    """The most a configuration's job can cost: its price (`prices`: its region's) for the
    whole `vertex.timeout` (offline there is no measured speed; `submit --dry-run` estimates
    the configured epochs at the newest registered model's)."""
    from components.capacity.budget import usd
    from components.capacity.cost import rate
    from components.capacity.training_hours import timeout_bound

    found, bound = rate(pools, prices, strategy), timeout_bound(timeout)
    return (f"cost: at most {usd(found.usd * bound.hours)} USD, the job running its whole "
            f"{bound.basis} ({bound.hours:g} h)"
            + (" without the unpriced types" if found.unpriced else "")
            + "; submit --dry-run estimates the configured epochs from the measured speed")


def price_line(pools: Any, prices: Any, strategy: str = "") -> str:
    """What the pools cost an hour at `prices` (a region's
    `components.prices.price_list.PriceList`), in one line."""
    from components.capacity.cost import rate
    from components.prices.price_list import hourly_words, unpriced_words

    found = rate(pools, prices, strategy)
    return (f"price: {hourly_words(found.usd, found.unpriced)}, every replica "
            f"({prices.words()}"
            + (f"; {', '.join(found.on_demand)} at on-demand prices, no {strategy} price "
               "found" if found.on_demand else "")
            + unpriced_words(found.unpriced) + ")" + found.reserved_words())


def _report_alternatives(checked: Checked, source: str, as_json: bool,
                         training: TrainingOptions | None,
                         vertex: dict[str, Any] | None = None) -> int:
    """Prints every alternative, each with its index, pools, plan, price an hour and the
    most its job can cost (`vertex`: the config's section, for its prices and timeout), or
    its problems."""
    from components.gpu.alternatives import batch_lines, input_pipelines_of
    from components.vertex_options import VertexOptions

    book = _book_of(vertex or {})
    timeout = str((vertex or {}).get("timeout") or VertexOptions.model_fields["timeout"].default)

    pipelines = input_pipelines_of(checked.alternatives)
    if as_json:
        print(json.dumps({
            "ok": checked.ok, "errors": checked.errors, "warnings": checked.warnings,
            "input": source, "input_pipelines": pipelines,
            "shard_multiple": pipelines,  # its former name, kept for scripts that read it
            "alternatives": [{**a.to_dict(), "ok": r.ok, "errors": r.errors}
                             for a, r in zip(checked.alternatives, checked.results,
                                             strict=True)]}, indent=2))
        return 0 if checked.ok else 1
    for warning in checked.warnings:
        print(f"warning: {warning}")
    for alternative, result in zip(checked.alternatives, checked.results, strict=True):
        print(f"alternative {alternative.index} ({alternative.label}): "
              + ("valid, " + alternative.describe() if result.ok else "invalid"))
        if alternative.plan is not None:
            print(f"  training plan: {alternative.plan.summary()}")
        if result.ok:
            strategy, prices = alternative.scheduling_strategy, book.region(alternative.region)
            print(f"  {price_line(alternative.pools, prices, strategy)}")
            print(f"  {most_line(alternative.pools, prices, strategy, timeout)}")
    if not checked.ok:
        print(f"invalid GPU configuration ({source}):")
        for error in checked.errors:
            print(f"  - {error}")
        return 1
    print(f"valid ({source}): {len(checked.alternatives)} alternatives, tried in this order "
          "when Vertex AI has no capacity; the dataset's shards come in multiples of "
          f"{pipelines}")
    for line in batch_lines(checked.alternatives, training):
        print(f"  {line}")
    return 0


def run(args: argparse.Namespace) -> int:
    """`gpu-pipeline validate-gpu`: exit code 0 when valid, 1 when not."""
    from components.gpu.pools import check_pools

    if args.config is not None:
        if args.machine_type:
            raise InputError("give either --config FILE or --machine-type, not both")
        result, region, source, training = validate_file(args.config, args.region)
    elif args.machine_type:
        machine_spec: dict[str, Any] = {"machine_type": args.machine_type}
        if args.accelerator_type is not None:
            machine_spec["accelerator_type"] = args.accelerator_type
        if args.accelerator_count is not None:
            machine_spec["accelerator_count"] = args.accelerator_count
        specs = [{"machine_spec": machine_spec, "replica_count": 1}]
        if args.replica_count > 1:
            specs.append({"machine_spec": dict(machine_spec),
                          "replica_count": args.replica_count - 1})
        region, source, training = args.region, "command line", None
        result = check_pools(specs, region=region)
    else:
        raise InputError("give --machine-type (with --accelerator-type/--accelerator-count) "
                         "or --config FILE")
    from components.gpu.alternatives import Checked

    if isinstance(result, Checked):
        return _report_alternatives(result, source, args.json, training,
                                    _config_vertex(args.config))
    plan = result.plan.to_dict() if result.plan is not None else None
    if args.json:
        print(json.dumps({"ok": result.ok, "errors": result.errors, "warnings": result.warnings,
                          "worker_pool_specs": result.specs, "region": region,
                          "input": source, "training_plan": plan}, indent=2))
    else:
        for warning in result.warnings:
            print(f"warning: {warning}")
        if result.ok:
            used = [p for p in result.pools if p]
            print(f"valid ({source}): {len(used)} worker pool(s)"
                  + (f" in {region}" if region else
                     " (no region given: which regions offer these GPUs was not checked; "
                     "--region checks it)"))
            print(json.dumps(result.specs, indent=2))
            print(f"training plan: {result.plan.summary()}")
            for line in result.plan.describe():
                print(f"  {line}")
            print(price_line(result.pools, _book_of(_config_vertex(args.config)).region(
                region or "us-central1")) + ("" if region else " (no region given: "
                                              "us-central1's prices)"))
        else:
            print(f"invalid GPU configuration ({source}):")
            for error in result.errors:
                print(f"  - {error}")
            if result.plan is not None:
                print(f"training plan these pools would run: {result.plan.summary()}")
    return 0 if result.ok else 1
