"""Where the tests find the checkout (test modules sit at different depths)."""

from pathlib import Path

#: The repository's root: `pyproject.toml`, `compiled/`, `config.example.yaml`, ...
ROOT = Path(__file__).resolve().parents[2]
