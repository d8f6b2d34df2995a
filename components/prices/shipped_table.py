"""The prices shipped with the project: what an estimate uses when neither the Cloud
Billing Catalog API nor a cache of it can be read. Us-central1 (Iowa) only, each figure
with where it was read; an estimate from it says so, and that other regions' prices
differ."""

from __future__ import annotations

REGION = "us-central1"
#: The oldest and newest reading below, for the estimate lines.
READ = "2025-08-16 to 2026-10-07"

_N1_STANDARD_4 = 0.21849885
#: USD per hour: machine types (the machine alone), accelerator types (one GPU), and a
#: family's cores (`CORE:<family>`, per vCPU) and memory (`RAM:<family>`, per GB).
PRICES: dict[str, float] = {
    # Vertex AI pricing (custom training, us-central1) as transcribed on 2026-10-07 in
    # api-evangelist/google-vertex-ai plans/google-vertex-ai-plans-pricing.yml; Compute
    # Engine prices a predefined family per vCPU and GB, which grow together within it, so
    # n1-standard-N costs N/4 of n1-standard-4.
    **{f"n1-standard-{n}": round(_N1_STANDARD_4 * n / 4, 8) for n in (4, 8, 16, 32, 64, 96)},
    # A public billing export of an a3-highgpu-8g training job (zenn.dev, 2025-08-16): SKUs
    # 3F95-001E-B747 "Vertex AI: Training/Pipelines on NVIDIA H100 80GB in Iowa",
    # 2E83-99F1-391A "... on A3 Instance Core in Iowa", B045-9255-8314 "... on A3 Instance
    # RAM in Iowa".
    "NVIDIA_H100_80GB": 11.2660332,
    "CORE:a3-highgpu": 0.0293227,
    "RAM:a3-highgpu": 0.0025534,
}
SOURCES = {
    "n1-standard": "https://cloud.google.com/vertex-ai/pricing (custom training, us-central1) "
                   "as transcribed on 2026-10-07 in api-evangelist/google-vertex-ai",
    "a3-highgpu": "a billing export of an a3-highgpu-8g job (zenn.dev, 2025-08-16), SKUs "
                  "3F95-001E-B747, 2E83-99F1-391A, B045-9255-8314",
}
