"""Counts the suite's assertions on literal sentences of more than twelve words: an
`assert` whose expression holds such a string literal (an f-string's literal parts count as
one string), or a `pytest.raises`/`pytest.warns` `match=` of one. A test should assert the
decision or the figure; a sentence only where it is the product, and then by the facts it
names (`tests.support.facts`).

    python -m tests.support.sentence_asserts [FOLDER]   # default: tests
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

WORDS = 12


def _strings(node: ast.AST) -> Iterator[str]:
    for found in ast.walk(node):
        if isinstance(found, ast.Constant) and isinstance(found.value, str):
            yield found.value
        elif isinstance(found, ast.JoinedStr):
            yield "".join(v.value if isinstance(v, ast.Constant) else " X "
                          for v in found.values)


def sentence_asserts(path: Path) -> list[int]:
    """Where `path` asserts on a long literal (line numbers)."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text())):
        checked: list[ast.AST] = []
        if isinstance(node, ast.Assert):
            checked = [node.test]
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", "") in ("raises",
                                                                               "warns"):
            checked = [k.value for k in node.keywords if k.arg == "match"]
        if any(len(s.split()) > WORDS for expr in checked for s in _strings(expr)):
            lines.append(node.lineno)
    return sorted(lines)


def main(argv: list[str]) -> int:
    root = Path(argv[0] if argv else "tests")
    counts = {str(p): len(found) for p in sorted(root.rglob("*.py"))
              for found in [sentence_asserts(p)] if found}
    for path, count in sorted(counts.items(), key=lambda item: -item[1]):
        print(f"{count:4d} {path}")
    print(f"{sum(counts.values()):4d} in all")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
