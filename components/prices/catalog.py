"""Reading Google's price catalog: the Cloud Billing Catalog API's public SKUs of Vertex AI
and Compute Engine (`google-cloud-billing`'s `CloudCatalogClient.list_skus`, with the
user's credentials; the API lists at most 5,000 SKUs a page and gives a `nextPageToken`
until the last: Cloud Billing docs, "Get Google Cloud pricing information" and the
Catalog API's how-to)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from components.prices.sku_match import COMPUTE_ENGINE, VERTEX_AI, Sku, from_message
from trainer.common.cloud_calls import STALL_SECONDS, NoAnswer, bounded_read
from trainer.common.errors import StageError, first_line

#: The services a job is billed on: Vertex AI (training, management fees, prediction) and
#: Compute Engine (Spot and DWS Flex-start machines and GPUs).
SERVICES = (VERTEX_AI, COMPUTE_ENGINE)
PAGE_SIZE = 5000


class CatalogUnreadable(StageError):
    """The catalog could not be read (no network, no credentials, no permission)."""


def catalog_client() -> Any:
    """A CloudCatalogClient with the default credentials, over REST: its token and its pages
    through one HTTP session whose calls take a timeout (the transport the fake catalog's
    tests use too)."""
    from google.cloud import billing_v1

    from trainer.common.cloud_calls import default_credentials

    credentials, _ = default_credentials()
    return billing_v1.CloudCatalogClient(transport="rest", credentials=credentials)


def read_catalog(make: Any = None, services: tuple[str, ...] = SERVICES) -> list[Sku]:
    """Every priced SKU of `services` through the client `make()` makes (default:
    `catalog_client`), bounded (`bounded_read`): on a network that drops connections it
    gives up after `STALL_SECONDS` without an answer instead of waiting minutes.

    Raises:
        CatalogUnreadable: No client, a listing failed, or no answer in time.
    """
    def read(progress: Callable[[], None]) -> list[Sku]:
        return read_skus(open_client(make), services, progress)

    try:
        return bounded_read("the Cloud Billing Catalog API", read)
    except NoAnswer as exc:
        raise CatalogUnreadable(str(exc)) from None


def read_skus(client: Any, services: tuple[str, ...] = SERVICES,
              progress: Callable[[], None] = lambda: None) -> list[Sku]:
    """Every priced SKU of `services`, in USD, every page (`progress()` after each; each
    page's request times out after `STALL_SECONDS`).

    Raises:
        CatalogUnreadable: A listing failed; the message names the service and the error.
    """
    from google.api_core import exceptions
    from google.auth import exceptions as auth_exceptions
    from google.cloud import billing_v1

    found = []
    for service in services:
        request = billing_v1.ListSkusRequest(parent=f"services/{service}", currency_code="USD",
                                             page_size=PAGE_SIZE)
        try:
            for page in client.list_skus(request=request, timeout=STALL_SECONDS).pages:
                progress()
                for sku in type(page).pb(page).skus:
                    parsed = from_message(sku, service)
                    if parsed:
                        found.append(parsed)
        except (exceptions.GoogleAPIError, auth_exceptions.GoogleAuthError, OSError) as exc:
            raise CatalogUnreadable(
                f"the Cloud Billing Catalog API's SKUs of services/{service} could not be read"
                f" ({type(exc).__name__}: {first_line(exc)})"
            ) from exc
    return found


def open_client(make: Any = None) -> Any:
    """`make()` (default: `catalog_client`), its failure (no credentials) as unreadable.

    Raises:
        CatalogUnreadable: The client could not be made.
    """
    from google.auth import exceptions as auth_exceptions

    try:
        return (make or catalog_client)()
    except auth_exceptions.DefaultCredentialsError as exc:
        # google-auth's own message is 250 characters with a link; one short line will do.
        raise CatalogUnreadable("the Cloud Billing Catalog API needs Google Cloud "
                                "credentials, and this machine has none") from exc
    except (auth_exceptions.GoogleAuthError, OSError, ValueError) as exc:
        raise CatalogUnreadable(f"no client for the Cloud Billing Catalog API "
                                f"({type(exc).__name__}: {first_line(exc)})") from exc
