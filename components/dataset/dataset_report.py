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
    skipped = manifest["skipped"]
    lines += ["", f"## Skipped files: {len(skipped)} ({manifest['bad_fraction']:.2%})", ""]
    lines += [f"- `{s['file']}`: {s['reason']}" for s in skipped[:200]]
    if len(skipped) > 200:
        lines.append(f"- ... and {len(skipped) - 200} more (see manifest.json)")
    return "\n".join(lines) + "\n"
