"""Every price an estimate uses, in one place: a region's prices (`PriceBook.region`) and
the one lookup of a type's price in them (`price_of`).

A region's prices come from the first of these that can be had, and say which:

1. the Cloud Billing Catalog API (`components.prices.catalog`), read at most once a day for
   a region (`refresh` reads it again) and kept in the cache (`price_cache`);
2. when it cannot be read (no network, no credentials, no permission: said once), the
   newest cached day for the region;
3. else the table shipped with the project (`shipped_table`: Compute Engine's list prices
   per region from dated public readings of the catalog, as Vertex AI's).

`vertex.prices` (USD per hour by type, `SPOT:`/`FLEX_START:`/`PREDICTION:<type>` for those
pricings) is laid over whichever was used. A machine type's price is its vCPUs and GB
(`components.gpu.catalog.machine_shape`) times its family's core and RAM prices, unless a
price is given for the type itself. A Spot or Flex-start type without a price of its own
is priced on demand, and the estimate names it.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from components.gpu.catalog import machine_shape
from components.prices import price_cache, shipped_table
from components.prices.sku_match import PARTS, family_of, price_region
from trainer.common.errors import InputError

#: Pricings apart from on-demand training: Spot and DWS Flex-start (priced on demand when
#: no price of their own is known, and said), prediction nodes (never priced as training).
DISCOUNTED = ("SPOT", "FLEX_START")
PRICINGS = tuple(pricing for pricing in PARTS if pricing)
CATALOG = "the Cloud Billing Catalog API"


class AmbiguousPriceError(InputError):
    """Two catalog SKUs match one type: it is not priced by a pick."""


@dataclasses.dataclass(frozen=True)
class PriceList(Mapping[str, float]):
    """A region's prices, USD an hour by `vertex.prices` key, and where they come from.

    Attributes:
        region: Their region.
        rates: By key (a type, `<pricing>:<type>`, `CORE:<family>` per vCPU, `RAM:<family>`
            per GB).
        read: The day they were read ("2026-11-28"), or the shipped table's dates.
        source: Where from, in words.
        skus: The SKU ids of each key read from the catalog.
        ambiguous: Keys more than one SKU matches, with those SKUs.
    """

    region: str
    rates: Mapping[str, float]
    read: str
    source: str
    skus: Mapping[str, Sequence[str]] = dataclasses.field(default_factory=dict)
    ambiguous: Mapping[str, str] = dataclasses.field(default_factory=dict)

    def __getitem__(self, key: str) -> float:
        if key in self.ambiguous:
            raise AmbiguousPriceError(
                f"{CATALOG} has more than one SKU for {key} in {self.region}: "
                f"{self.ambiguous[key]}; give its price in vertex.prices (USD per hour)")
        return self.rates[key]

    def __contains__(self, key: object) -> bool:
        return key in self.rates or key in self.ambiguous

    def __iter__(self) -> Iterator[str]:
        return iter(self.rates)

    def __len__(self) -> int:
        return len(self.rates)

    def words(self) -> str:
        """Where the prices come from, for an estimate line."""
        return f"{self.region} prices of {self.read}, {self.source}"


@dataclasses.dataclass(frozen=True)
class Price:
    """A type's price: USD an hour (None: unpriced), whether a Spot or Flex-start type was
    priced on demand, and the SKU ids it was read from."""

    usd: float | None
    on_demand: bool = False
    skus: tuple[str, ...] = ()


def _direct(prices: Mapping[str, float], kind: str, pricing: str) -> Price | None:
    prefix = f"{pricing}:" if pricing else ""
    skus = getattr(prices, "skus", {})
    if f"{prefix}{kind}" in prices:
        return Price(prices[f"{prefix}{kind}"], skus=tuple(skus.get(f"{prefix}{kind}", ())))
    shape, family = machine_shape(kind), family_of(kind)
    core, ram = f"{prefix}CORE:{family}", f"{prefix}RAM:{family}"
    if shape and family and core in prices and ram in prices:
        return Price(shape.vcpus * prices[core] + shape.memory_gb * prices[ram],
                     skus=(*skus.get(core, ()), *skus.get(ram, ())))
    return None


def price_of(prices: Mapping[str, float], kind: str, pricing: str = "") -> Price:
    """`kind`'s price an hour (a machine type: the machine alone; a GPU type: one GPU) for
    `pricing` ("" on demand, or a PRICINGS value; any other strategy is on demand).

    Raises:
        AmbiguousPriceError: The catalog has two SKUs for it.
    """
    pricing = pricing if pricing in PRICINGS else ""
    found = _direct(prices, kind, pricing)
    if found:
        return found
    if pricing in DISCOUNTED:
        found = _direct(prices, kind, "")
        if found:
            return dataclasses.replace(found, on_demand=True)
    return Price(None)


def unpriced_words(kinds: Sequence[str]) -> str:
    """The words every estimate ends with when types have no price ("" when none)."""
    return (f"; without a price for {', '.join(kinds)}: give it in vertex.prices (USD per "
            "hour)" if kinds else "")


def hourly_words(usd: float, unpriced: Sequence[str]) -> str:
    """A price an hour in words, never "0.00 USD" for what has no price: with a part
    unpriced the figure is a floor ("at least"), with nothing priced there is no figure."""
    if not unpriced:
        return f"{usd:.2f} USD an hour"
    if usd <= 0:
        return "no price"
    return f"at least {usd:.2f} USD an hour"


#: Cached prices older than this many days are said to be stale (Google changes Spot
#: prices as often as daily, list prices a few times a year).
STALE_DAYS = 30


def _staleness(read: str, today: str) -> str:
    """", 45 days old: stale" for cached prices past STALE_DAYS, else ""."""
    try:
        age = (datetime.date.fromisoformat(today) - datetime.date.fromisoformat(read)).days
    except ValueError:
        return ""
    return f"; {age} days old: stale" if age > STALE_DAYS else ""


def _today() -> str:
    return datetime.datetime.now(datetime.timezone.utc).date().isoformat()


class PriceBook:
    """The prices of the regions a run asks for, read once each, with `overrides`
    (`vertex.prices`) over them.

    Args:
        overrides: `vertex.prices`.
        client: Makes a CloudCatalogClient (default: one with the default credentials).
        refresh: Read the catalog even when today's prices are cached.
        log: Where the one line saying the catalog could not be read goes.
        today: The day's date (YYYY-MM-DD; default: today, UTC).
        default_region: The region of a resource whose name holds none (`vertex.region`).
    """

    def __init__(self, overrides: Mapping[str, float] | None = None, *,
                 client: Callable[[], Any] | None = None, refresh: bool = False,
                 log: Callable[[str], None] | None = None, today: str = "",
                 default_region: str = shipped_table.REGION):
        self.overrides = dict(overrides or {})
        self.default_region = default_region
        self._client, self._refresh, self._log = client, refresh, log
        self.today = today or _today()
        self._skus: list[Any] | None = None
        self.unreadable = ""  # why the catalog could not be read, once it was tried
        self._read_lists: dict[str, PriceList] = {}  # as read, before the overrides
        self._regions: dict[str, PriceList] = {}

    @classmethod
    def of(cls, vertex: Any, **kwargs: Any) -> PriceBook:
        """The prices of a run with `vertex` (its VertexOptions): its `prices` over what is
        read, its region the default; `kwargs` as the constructor's."""
        return cls(vertex.prices, default_region=vertex.region, **kwargs)

    def over(self, overrides: Mapping[str, float], default_region: str) -> PriceBook:
        """This book's reading (nothing read twice) with other `overrides` over it."""
        other = copy.copy(self)
        other.overrides, other.default_region, other._regions = dict(overrides), \
            default_region, {}
        return other

    def region(self, region: str) -> PriceList:
        """`region`'s prices (read once per book)."""
        if region not in self._regions:
            if region not in self._read_lists:
                self._read_lists[region] = self._read(region)
            self._regions[region] = self._overridden(self._read_lists[region])
        return self._regions[region]

    def read_regions(self) -> list[str]:
        """The regions whose prices this book has read, in order."""
        return list(self._regions)

    def _read(self, region: str) -> PriceList:
        cached = None if self._refresh else price_cache.read(region, self.today)
        if cached:
            return _from_entry(region, cached, f"from {CATALOG} (cached)")
        skus = self._catalog()
        if skus is not None:
            found, ambiguous = price_region(skus, region)
            entry = {"read": self.today,
                     "prices": {k: {"usd": f.usd, "skus": list(f.skus)} for k, f in found.items()},
                     "ambiguous": ambiguous}
            price_cache.write(region, self.today, entry)
            return _from_entry(region, entry, f"from {CATALOG}")
        older = price_cache.newest(region, self.today)
        if older:
            return _from_entry(region, older, f"cached from {CATALOG} (unread today"
                               f"{_staleness(str(older.get('read', '')), self.today)})")
        table = shipped_table.prices(region)
        return PriceList(region, table, shipped_table.READ, "from the shipped table" + (
            "" if table else f" (which has nothing for {region})"))

    def _catalog(self) -> list[Any] | None:
        from components.prices.catalog import CatalogUnreadable, read_catalog

        if self._skus is None and not self.unreadable:
            try:
                self._skus = read_catalog(self._client)
            except CatalogUnreadable as exc:
                self.unreadable = str(exc)
                if self._log:
                    self._log(f"prices: {exc}; using the newest cached prices, else the "
                              "shipped table")
        return self._skus

    def _overridden(self, found: PriceList) -> PriceList:
        if not self.overrides:
            return found
        return dataclasses.replace(
            found, rates={**found.rates, **self.overrides},
            skus={k: v for k, v in found.skus.items() if k not in self.overrides},
            ambiguous={k: v for k, v in found.ambiguous.items() if k not in self.overrides},
            source=f"{found.source}; vertex.prices over them")


def _from_entry(region: str, entry: Mapping[str, Any], source: str) -> PriceList:
    prices = entry.get("prices", {})
    return PriceList(region, {k: float(v["usd"]) for k, v in prices.items()},
                     str(entry.get("read", "")), source,
                     {k: tuple(v.get("skus", ())) for k, v in prices.items()},
                     dict(entry.get("ambiguous", {})))
