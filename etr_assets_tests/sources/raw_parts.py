"""Raw parts written from records serialized here: the fetch stores the API's own text (`RawZone.write_lines`)."""

from __future__ import annotations

import json

from etr_assets.sources.raw_zone import Batch, RawZone


def write_part(raw: RawZone, batch: Batch, number: int, records: list) -> str:
    return raw.write_lines(batch, number, [json.dumps(r, ensure_ascii=False, separators=(",", ":")) for r in records])
