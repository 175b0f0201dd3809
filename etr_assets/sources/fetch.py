"""Download one day of an endpoint into the raw zone as a new batch."""

from __future__ import annotations

import datetime as dt

from etr_assets.sources.api_client import ApiClient
from etr_assets.sources.raw_zone import Batch, BatchManifest, RawZone

SOURCE = "bnpl"
# endpoint name -> (path, name of the day parameter)
ENDPOINTS = {
    "transactions": ("/v1/transactions", "date"),
    "customers": ("/v1/customers", "as_of"),
    "merchants": ("/v1/merchants", "as_of"),
}


def fetch_day(client: ApiClient, raw: RawZone, endpoint: str, day: dt.date) -> tuple[Batch, BatchManifest]:
    """Fetch every page of `endpoint` for `day` into a new pending batch, then seal it.

    If this dies midway the batch stays pending without a manifest and is never loaded; the next run
    fetches the day again into a new batch, so nothing half-downloaded reaches Iceberg.
    """
    if endpoint not in ENDPOINTS:
        raise ValueError(f"unknown endpoint {endpoint!r}; known: {', '.join(ENDPOINTS)}")
    path, day_param = ENDPOINTS[endpoint]
    batch = raw.start_batch(SOURCE, endpoint, day)
    files: list[str] = []
    records = 0
    # Each record's text as the API sent it: the raw zone is the evidence of what arrived.
    for number, page in enumerate(client.iter_record_texts(path, {day_param: day.isoformat()}), start=1):
        if page:
            files.append(raw.write_lines(batch, number, page))
            records += len(page)
    return batch, raw.seal(batch, files, records)
