"""Download one day of a declared source's resource into the raw zone as a new batch."""

from __future__ import annotations

import collections
import datetime as dt
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING

from etr_assets.sources.raw_zone import Batch, BatchManifest, RawZone

if TYPE_CHECKING:
    from etr_assets.sources.http_fetch import SourceClient

WRITERS = 2  # pages stored at once, while the next page downloads
PAGES_IN_FLIGHT = 8  # pages held in memory waiting to be stored, at most


def fetch_day(
    client: SourceClient, raw: RawZone, endpoint: str, day: dt.date, run_id: str | None = None
) -> tuple[Batch, BatchManifest]:
    """Fetch every page of `endpoint` for `day` into a new pending batch, sealed once every page is stored (a batch
    cut off midway is never loaded). `run_id` is recorded in the batch: whether its run ended tells a retry when."""
    declaration = client.declaration
    if endpoint not in declaration.names:
        raise ValueError(
            f"unknown endpoint {endpoint!r} of source {declaration.name}; known: {', '.join(declaration.names)}"
        )
    resource = declaration.resource(endpoint)
    batch = raw.start_batch(declaration.name, endpoint, day, run_id=run_id)
    files, records = [], 0
    with ThreadPoolExecutor(max_workers=WRITERS, thread_name_prefix=f"raw-{endpoint}") as writers:
        writing: collections.deque[Future] = collections.deque()
        for number, page in enumerate(client.iter_record_texts(resource, day), start=1):
            if page:
                writing.append(writers.submit(raw.write_lines, batch, number, page))
                records += len(page)
            while len(writing) > PAGES_IN_FLIGHT or (writing and writing[0].done()):
                files.append(writing.popleft().result())  # in page order; a failed write stops the fetch here
        files += [write.result() for write in writing]
    return batch, raw.seal(batch, files, records)
