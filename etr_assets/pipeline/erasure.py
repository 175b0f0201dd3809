"""The erasure plan of this pipeline: `etr_assets.lake.erasure` bound to every table whose spec marks personal data
and the raw feeds with a subject column."""

from __future__ import annotations

import functools

from etr_assets.lake import erasure as library
from etr_assets.tables import personal_data_specs
from etr_assets.tables.feeds import RAW_FEEDS

# prove_erased(spark, catalog, raw, request) scans them all; specs=(...) narrows it to those tables.
erase_raw_zone = functools.partial(library.erase_raw_zone, feeds=RAW_FEEDS)
scan_raw_zone = functools.partial(library.scan_raw_zone, feeds=RAW_FEEDS)
erase_raw_step = functools.partial(library.erase_raw_step, feeds=RAW_FEEDS)
prove_step = functools.partial(library.prove_step, specs=personal_data_specs(), feeds=RAW_FEEDS)
erasure_stages = functools.partial(library.erasure_stages, personal_data_specs())
erase_customers = functools.partial(library.erase_customers, specs=personal_data_specs(), feeds=RAW_FEEDS)
prove_erased = functools.partial(library.prove_erased, specs=personal_data_specs(), feeds=RAW_FEEDS)
