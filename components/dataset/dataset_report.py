"""The dataset stage's Markdown report (class distribution, shards, skipped files)."""

from __future__ import annotations

from typing import Any

from trainer.common.contract import image_format

REPORT_NAME = "report.md"


def markdown_report(manifest: dict[str, Any]) -> str:
    """The class distribution, shards and skipped files, as Markdown (KFP shows it)."""
    splits = list(manifest["splits"])
    lines = [f"# Dataset: {manifest['source']}", "",
             f"{manifest['examples']} images, {len(manifest['classes'])} classes, "
             f"{manifest['image_size'][0]}x{manifest['image_size'][1]} RGB "
             f"{image_format(manifest).upper()}; source "
             f"fingerprint `{manifest['source_fingerprint']}`.", "",
             "| class | " + " | ".join(splits) + " |",
             "| --- | " + " | ".join("---:" for _ in splits) + " |"]
    for name in manifest["classes"]:
        lines.append(f"| {name} | " + " | ".join(
            str(manifest["splits"][s]["per_class"][name]) for s in splits) + " |")
    lines.append("| **total** | " + " | ".join(
        f"**{manifest['splits'][s]['count']}**" for s in splits) + " |")
    lines += ["", "| split | shards | MB |", "| --- | ---: | ---: |"]
    for s in splits:
        shards = manifest["splits"][s]["shards"]
        lines.append(f"| {s} | {len(shards)} | "
                     f"{sum(x['bytes'] for x in shards) / 2**20:.1f} |")
    lines += statistics_lines(manifest.get("statistics"), manifest["classes"])
    skipped = manifest["skipped"]
    lines += ["", f"## Skipped files: {len(skipped)} ({manifest['bad_fraction']:.2%})", ""]
    lines += [f"- `{s['file']}`: {s['reason']}" for s in skipped[:200]]
    if len(skipped) > 200:
        lines.append(f"- ... and {len(skipped) - 200} more (see manifest.json)")
    return "\n".join(lines) + "\n"


def statistics_lines(statistics: dict[str, Any] | None, classes: list[str]) -> list[str]:
    """The report's formats, sizes and duplicates (`data_statistics`)."""
    if not statistics or not statistics.get("formats"):
        return []
    sizes, dups = statistics["sizes"], statistics["duplicates"]
    lines = ["", "## Images as the source stores them", "",
             "Formats: " + ", ".join(f"{k} {v}" for k, v in statistics["formats"].items())
             + f"; width {_spread(sizes['width'])}, height {_spread(sizes['height'])} pixels.",
             "", "| longer side up to | images |", "| ---: | ---: |"]
    lines += [f"| {side} | {count} |" for side, count in sizes["longer_side"].items()]
    lines += ["", "## Duplicates (near: 8x8 colour thumbnails within "
                  f"{dups['near_difference']:g} of 255 on average)", "",
              "| images of | also in | byte-identical | near | labelled otherwise |",
              "| --- | --- | ---: | ---: | ---: |"]
    lines += [f"| {pair.split('-')[0]} | {pair.split('-')[1]} | {c['exact']} | {c['near']} "
              f"| {c['other_label']} |" for pair, c in dups["across"].items()]
    within = ", ".join(f"{split} {n}" for split, n in dups["within"].items())
    lines += ["", f"Byte-identical images within a split: {within}."]
    if dups["listed"]:
        lines += [""] + [_listed(d, classes) for d in dups["listed"]]
        if dups["more"]:
            lines.append(f"- ... and {dups['more']} more")
    return lines


def _listed(pair: dict[str, Any], classes: list[str]) -> str:
    line = f"- {pair['kind']}: `{pair['images'][0]}` = `{pair['images'][1]}`"
    if pair["kind"] == "near":
        line += f" (differ by {pair['difference']:g})"
    if "labels" in pair:
        line += " labelled " + " and ".join(
            classes[i] if 0 <= i < len(classes) else str(i) for i in pair["labels"])
    return line


def _spread(spread: dict[str, float]) -> str:
    return f"{spread['median']:g} (5-95%: {spread['p5']:g}-{spread['p95']:g})"
