"""Download one day of an endpoint into the raw zone as a new batch."""

from __future__ import annotations

import collections
import datetime as dt
from concurrent.futures import Future, ThreadPoolExecutor

from etr_assets.sources.api_client import ApiClient
from etr_assets.sources.raw_zone import Batch, BatchManifest, RawZone

SOURCE = "bnpl"
WRITERS = 2  # pages stored at once, while the next page downloads
PAGES_IN_FLIGHT = 8  # pages held in memory waiting to be stored, at most
# endpoint name -> (path, name of the day parameter)
ENDPOINTS = {
    "transactions": ("/v1/transactions", "date"),
    "customers": ("/v1/customers", "as_of"),
    "merchants": ("/v1/merchants", "as_of"),
}


def fetch_day(client: ApiClient, raw: RawZone, endpoint: str, day: dt.date) -> tuple[Batch, BatchManifest]:
    """Fetch every page of `endpoint` for `day` into a new pending batch, then seal it once every page is stored
    (a batch cut off midway is never loaded). Pages are written while the next ones download."""
    if endpoint not in ENDPOINTS:
        raise ValueError(f"unknown endpoint {endpoint!r}; known: {', '.join(ENDPOINTS)}")
    path, day_param = ENDPOINTS[endpoint]
    batch = raw.start_batch(SOURCE, endpoint, day)
    files, records = [], 0
    with ThreadPoolExecutor(max_workers=WRITERS, thread_name_prefix=f"raw-{endpoint}") as writers:
        writing: collections.deque[Future] = collections.deque()
        for number, page in enumerate(client.iter_record_texts(path, {day_param: day.isoformat()}), start=1):
            if page:
                writing.append(writers.submit(raw.write_lines, batch, number, page))
                records += len(page)
            while len(writing) > PAGES_IN_FLIGHT or (writing and writing[0].done()):
                files.append(writing.popleft().result())  # in page order; a failed write stops the fetch here
        files += [write.result() for write in writing]
    return batch, raw.seal(batch, files, records)
