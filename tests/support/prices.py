"""The prices the tests of the arithmetic over prices compute their figures from by hand:
a shipped table of their own (`hand_prices` in tests/conftest.py), so that a new reading of
Google's prices in `components/prices/shipped_prices.csv` changes no expected figure.

Vertex AI's us-central1 prices as Google lists them: n1-standard-4 on its pricing page
(transcribed 2026-10-07); the H100 and A3's cores and RAM as a billing export of an
a3-highgpu-8g job lists them (2025-08-16)."""

from __future__ import annotations

N1_STANDARD_4 = 0.21849885
H100 = 11.2660332
A3_CORE, A3_RAM = 0.0293227, 0.0025534

TABLE = {
    **{f"n1-standard-{n}": N1_STANDARD_4 * n / 4 for n in (4, 8, 16, 32, 64, 96)},
    "NVIDIA_H100_80GB": H100,
    "CORE:a3-highgpu": A3_CORE,
    "RAM:a3-highgpu": A3_RAM,
}
