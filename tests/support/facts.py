"""Checking a sentence by the facts it must name, not by its wording: a message that
names the field, the value and what would be valid passes however it is phrased."""

from __future__ import annotations

import re


def missing(text: str, *facts: str) -> list[str]:
    """The `facts` (substrings: a field, a value, a figure) that `text` does not name."""
    return [fact for fact in facts if fact not in text]


def listed_after(text: str, head: str, end: str = " (") -> list[str]:
    """The comma-separated items after `head` in `text`, up to `end` (or the end)."""
    rest = text.split(head, 1)[1]
    return [item.strip() for item in rest.split(end, 1)[0].split(",")]


def figures(text: str) -> list[float]:
    """Every number in `text`, in order (thousands separators dropped)."""
    return [float(n.replace(",", "")) for n in re.findall(r"\d[\d,]*(?:\.\d+)?", text)]
