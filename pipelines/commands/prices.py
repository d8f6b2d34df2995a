"""`gpu-pipeline prices [--region R] [--refresh] [--config F]`: the prices a run would use,
where they come from (Google's price catalog, its cache or the shipped table), and each
one's SKU ids; with a config, what each of its configurations costs an hour."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from components.prices.price_list import DISCOUNTED, PriceList, price_of
from components.prices.sku_match import FAMILY_WORDS
from components.stage_messages import say


def add_parser(commands: Any, parser_class: type) -> None:
    """Declares the command and its flags."""
    parser = commands.add_parser(
        "prices", help="The prices estimates and budgets use (Cloud Billing Catalog API, "
        "else its cache, else the shipped table), with their SKU ids.")
    parser.add_argument("--region", help="The region (default: the config's vertex.region, "
                        "else us-central1).")
    parser.add_argument("--refresh", action="store_true",
                        help="Read the catalog again even when today's prices are cached.")
    parser.add_argument("--config", type=Path,
                        help="YAML configuration: its region, vertex.prices and the price of "
                             "each of its configurations.")


def _cell(prices: PriceList, kind: str, pricing: str) -> str:
    found = price_of(prices, kind, pricing)
    if found.usd is None or found.on_demand:
        return f"{pricing or 'on demand'} not priced"
    skus = f" (SKU {', '.join(found.skus)})" if found.skus else ""
    return f"{pricing or 'on demand'} {found.usd:.4f}{skus}"


def gpu_lines(prices: PriceList) -> list[str]:
    """Each GPU type offered in the region (the zone data GPU validation reads), one GPU an
    hour on demand, Spot and Flex-start."""
    from components.gpu.catalog import ACCELERATOR_TYPES
    from components.gpu.regions import regions_offering

    lines = []
    for gpu in ACCELERATOR_TYPES:
        offered = regions_offering(gpu)
        if offered is not None and prices.region not in offered:
            continue
        lines.append(f"  {gpu}: " + "; ".join(_cell(prices, gpu, p) for p in ("", *DISCOUNTED)))
    return lines


def family_lines(prices: PriceList) -> list[str]:
    """Each machine family's vCPU and GB an hour, on demand, and the machine types priced
    whole."""
    from components.gpu.catalog import ACCELERATOR_TYPES

    lines = [f"  {kind}: {prices[kind]:.4f}" for kind in prices
             if ":" not in kind and kind not in ACCELERATOR_TYPES]
    for family in FAMILY_WORDS:
        core, ram = (price_of(prices, f"{part}:{family}") for part in ("CORE", "RAM"))
        if core.usd is None or ram.usd is None:
            continue
        lines.append(f"  {family}: {core.usd:.6f} a vCPU, {ram.usd:.6f} a GB (SKUs "
                     f"{', '.join((*core.skus, *ram.skus)) or 'none: given or shipped'})")
    return lines


def run(args: argparse.Namespace) -> int:
    """Prints the region's prices, and each configuration's with `--config`."""
    from components.capacity.budget import usd
    from components.capacity.cost import rate
    from components.vertex_options import VertexOptions
    from pipelines.commands.common import load
    from pipelines.vertex.clients import Clients

    config = load(args) if args.config is not None else None
    vertex = config.vertex if config else VertexOptions(region=args.region or "us-central1")
    book = Clients(refresh_prices=args.refresh).price_book(vertex, say)
    prices = book.region(args.region or vertex.region)
    print(f"prices: {prices.words()}")
    print("GPUs (USD an hour, one GPU):")
    for line in gpu_lines(prices) or ["  none offered here, as the zone data knows"]:
        print(line)
    print("machines (USD an hour; a machine type is its vCPUs and GB at its family's, "
          "unless priced whole):")
    for line in family_lines(prices) or ["  none priced"]:
        print(line)
    for key in sorted(vertex.prices):
        print(f"  {key}: {vertex.prices[key]} (vertex.prices)")
    if config is not None:
        print("configurations (USD an hour, every replica):")
        for alternative in config.alternatives():
            found = rate(alternative.pools, book.region(alternative.region),
                         alternative.scheduling_strategy)
            print(f"  {alternative.label} ({alternative.region}, "
                  f"{alternative.scheduling_strategy}): {usd(found.usd)}"
                  + (f"; on demand for want of their own: {', '.join(found.on_demand)}"
                     if found.on_demand else "")
                  + (f"; not priced: {', '.join(found.unpriced)}" if found.unpriced else "")
                  + found.reserved_words())
    return 0
