"""Raw batches -> bronze: validate with the spec, quarantine what fails, drop suppressed customers, replace the days;
batches are marked complete only after both commits, so a crash leaves them pending (docs/raw-zone.md)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
from collections import Counter
from typing import TYPE_CHECKING

from etr_assets.errors import BadInputError
from etr_assets.lake.evolve import ensure_table
from etr_assets.lake.feeds import RawFeed
from etr_assets.lake.figures import WriteResult
from etr_assets.lake.frames import conform
from etr_assets.lake.quality import CheckOutcome, Severity
from etr_assets.lake.timetravel import record_change
from etr_assets.lake.validate import Validated, read_validated_days
from etr_assets.lake.writes import append, current_snapshot_id, files_of_days, iceberg_table, replace_days
from etr_assets.sources.raw_zone import Batch, RawZone, batch_day_of_file

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

DEFAULT_MAX_REJECT_RATE = 0.05
# Validated rows per writing task (one file per day each): a day of a million transactions is written by two.
ROWS_PER_WRITER = 500_000
# A reload shrinking a loaded day by more is a glitch (an empty or truncated reply) until a run says 1.0.
DEFAULT_MAX_DAY_SHRINK = 0.5


def _suppress(result: Validated, feed: RawFeed, suppression) -> tuple[Validated, frozenset[int]]:
    """`result` without the records of suppressed customers, and the ids they named (to remove their raw lines)."""
    from pyspark.sql import functions as F

    subject = feed.bronze.subject_column
    if not suppression or not subject:
        return result, frozenset()
    accepted_hit = suppression.is_suppressed(F.col(subject))
    accepted_ids = result.accepted.where(accepted_hit).groupBy(subject).count().collect()
    refused_keys = suppression.suppressed_keys(feed.quarantine)
    refused = result.quarantined.select(refused_keys.alias("_ids")).where(F.size("_ids") > 0).collect()
    dropped_accepted = sum(r["count"] for r in accepted_ids)
    if not (ids := {r[subject] for r in accepted_ids} | {i for r in refused for i in r["_ids"]}):
        return result, frozenset()
    kept = dataclasses.replace(
        result,
        accepted=result.accepted.where(~accepted_hit),
        quarantined=result.quarantined.where(F.size(refused_keys) == 0),
        accepted_count=result.accepted_count - dropped_accepted,
        quarantined_count=result.quarantined_count - len(refused),
        suppressed_count=dropped_accepted + len(refused),
    )
    return kept, frozenset(ids)


def _union(frames: list):
    """By name, in halves: a union is analysed whole when made, so a chain of a range's days costs their square."""
    half = len(frames) // 2
    return frames[0] if not half else _union(frames[:half]).unionByName(_union(frames[half:]))


def load_bronze_days(
    spark: SparkSession,
    catalog: str,
    raw: RawZone,
    feed: RawFeed,
    days: list[dt.date],
    max_reject_rate: float = DEFAULT_MAX_REJECT_RATE,
    finish_pending: bool = False,
    max_day_shrink: float = DEFAULT_MAX_DAY_SHRINK,
) -> WriteResult:
    """Load `days` (and, with `finish_pending`, every other day with a downloaded batch still pending). A refused
    batch fails a requested day before anything is written; an earlier pending one is skipped, never blocking."""
    from pyspark.sql import functions as F

    from etr_assets.lake.erasure.suppression import suppression_list

    requested = set(days)
    if finish_pending:
        days = sorted(requested | {b.day for b in raw.pending(feed.source, feed.endpoint) if raw.manifest(b)})
    chosen: dict[dt.date, Batch] = {day: raw.latest_sealed(feed.source, feed.endpoint, day) for day in days}
    if missing := [day for day, batch in chosen.items() if batch is None]:
        raise BadInputError(
            f"no downloaded raw batch for {missing[0]} under {feed.source}/{feed.endpoint}: "
            f"materialize the raw asset for that day first"
        )

    suppression = suppression_list(spark, catalog) if feed.bronze.subject_column else None
    carry = tuple(c for c in (feed.quarantine.subject_column, feed.key_column) if c)
    files = [uri for batch in chosen.values() for uri in raw.file_uris(batch)]
    checked = read_validated_days(
        spark, files, [*chosen], batch_day_of_file, feed.api_columns, feed.bronze.checks, feed.record_day_column, carry
    )
    bronze = feed.bronze.qualified(catalog)
    dropped: dict[dt.date, frozenset[int]] = {}
    skipped: dict[str, str] = {}  # batch key -> why it waits
    try:
        # What the days hold now: whether a reload shrinks one, and whether the write is a first load (an append).
        loaded = {}
        if spark.catalog.tableExists(bronze):
            in_days = spark.table(bronze).where(F.col(feed.day_column).isin(sorted(chosen)))
            loaded = {r[0]: r[1] for r in in_days.groupBy(feed.day_column).count().collect()}
        refused: dict[dt.date, str] = {}  # days whose batch must not be loaded: too many records refused, or a shrink
        for day in list(checked):
            checked[day], dropped[day] = _suppress(checked[day], feed, suppression)
            result, held, key = checked[day], loaded.get(day, 0), chosen[day].key
            arriving = result.accepted_count
            if result.reject_rate > max_reject_rate:
                refused[day] = (
                    f"raw batch {key}: {result.quarantined_count} of {result.received} records refused "
                    f"({result.reject_rate:.1%} > the {max_reject_rate:.1%} allowed); nothing was written and the "
                    f"batch stays pending. First: " + "; ".join(result.first_reasons)
                )
            elif max_day_shrink < 1 and held and arriving < held * (1 - max_day_shrink):
                refused[day] = (
                    f"raw batch {key}: reloading {day} would shrink {feed.bronze.identifier} from {held} to "
                    f"{arriving} rows ({1 - arriving / held:.0%} fewer; at most {max_day_shrink:.0%} allowed); "
                    f"nothing was written and the batch stays pending. If the source really dropped those records, "
                    f"re-run with max_day_shrink 1.0 (run config resources.raw_zone.config.max_day_shrink)"
                )
        if blocking := sorted(day for day in refused if day in requested):
            raise BadInputError(refused[blocking[0]])
        for day in refused:  # an earlier batch still refused: it waits, the requested days go ahead
            skipped[chosen.pop(day).key] = refused[day]
            checked.pop(day).release()
            days = [d for d in days if d != day]
        accepted, quarantined = [], []  # each day's rows, unioned in halves (`_union`)
        for day, result in checked.items():
            batch_id, now = F.lit(chosen[day].batch_id), F.current_timestamp()
            batch_columns = {"_batch_id": batch_id, "_ingested_at": now}
            if feed.day_column not in {c.name for c in feed.api_columns}:
                batch_columns[feed.day_column] = F.lit(day)
            rows = result.accepted.withColumns(batch_columns)
            bad = result.quarantined.withColumns(
                {"_batch_id": batch_id, "_batch_day": F.lit(day), "quarantined_at": now}
            )
            if feed.key_column:
                key = F.col(feed.key_column)
                note = F.lit(" is in the snapshot: its history stays as it was")
                held = F.concat(F.col("reason"), F.lit(f"; {feed.key_column} "), key.cast("string"), note)
                bad = bad.withColumn("reason", F.when(key.isNotNull(), held).otherwise(F.col("reason")))
            accepted.append(rows)
            quarantined.append(bad)

        changes = ensure_table(spark, catalog, feed.bronze)
        ensure_table(spark, catalog, feed.quarantine)
        # A task per ROWS_PER_WRITER rows, no shuffle (hash gave a day one task); a first load is an append.
        writers = math.ceil(sum(r.accepted_count for r in checked.values()) / ROWS_PER_WRITER)
        df = conform(_union(accepted), feed.bronze).coalesce(
            max(1, min(spark.sparkContext.defaultParallelism, writers))
        )
        options = {"distribution-mode": "none"}
        if any(loaded.get(day) for day in days):
            commit = replace_days(spark, bronze, df, feed.day_column, days, options=options)
        else:
            commit = append(spark, bronze, df, options)
        refused_into = feed.quarantine.qualified(catalog)
        # Nothing refused and nothing to replace: no commit (an empty overwrite still writes a snapshot each day).
        if not days or any(r.quarantined_count for r in checked.values()) or holds_days(spark, refused_into, days):
            quarantined = conform(_union(quarantined), feed.quarantine)
            replace_days(spark, refused_into, quarantined, "_batch_day", days)
    finally:
        for result in checked.values():
            result.release()

    raw_lines_removed = 0
    if ids := {i for d in dropped.values() for i in d}:  # removed from the loaded batches' files, as erasure does
        from etr_assets.sources.raw_erasure import RawFeedSubject, erase_raw_records

        subject = RawFeedSubject(feed.source, feed.endpoint, feed.bronze.subject_column)
        keys = {chosen[day].key for day, d in dropped.items() if d and day in chosen}
        raw_lines_removed = erase_raw_records(raw, ids, (subject,), batch_keys=keys).records_removed
    for batch in chosen.values():
        raw.settle(batch, {"snapshot_id": str(commit.snapshot_id), "table": bronze})

    unknown = sum((Counter(r.unknown_fields) for r in checked.values()), Counter())
    received = sum(r.received for r in checked.values())
    quarantined_count = sum(r.quarantined_count for r in checked.values())
    suppressed_count = sum(r.suppressed_count for r in checked.values())
    reject_rate = round(quarantined_count / received, 6) if received else 0.0
    first_reasons = "; ".join(r for result in checked.values() for r in result.first_reasons[:2])
    warnings = []
    if unknown:
        warnings.append(
            f"{feed.endpoint}: the API sent fields the spec does not declare ({', '.join(sorted(unknown))}); "
            f"they are kept in the raw zone, not in {feed.bronze.identifier}"
        )
    if quarantined_count:
        warnings.append(
            f"{feed.endpoint}: {quarantined_count} record(s) quarantined in {feed.quarantine.identifier}; first: "
            + first_reasons
        )
    if suppressed_count:
        warnings.append(
            f"{feed.endpoint}: {suppressed_count} record(s) of erased customers suppressed (on the suppression list): "
            f"not stored, and {raw_lines_removed} raw line(s) removed"
        )
    warnings += [f"skipped, still pending: {message}" for message in skipped.values()]
    quarantine = CheckOutcome(
        "quarantine_rate",
        "no received record is refused into quarantine",
        quarantined_count == 0,
        quarantined_count,
        first_reasons[:400],
        severity=Severity.WARN,
        by_day={d.isoformat(): round(r.reject_rate, 6) for d, r in checked.items()},
        figures={"reject_rate": reject_rate},
    )
    return WriteResult(
        commit,
        changes,
        {day.isoformat(): checked[day].accepted_count for day in chosen},
        {
            "records_received": received,
            "records_accepted": received - quarantined_count - suppressed_count,
            "records_quarantined": quarantined_count,
            "records_suppressed": suppressed_count,
            "raw_lines_suppressed": raw_lines_removed,
            "reject_rate": reject_rate,
            "unknown_fields": ", ".join(f"{k} ({v})" for k, v in sorted(unknown.items())) or "none",
            "batches": ", ".join(b.batch_id for b in chosen.values()),
            "finished_pending_days": ", ".join(d.isoformat() for d in chosen if d not in requested) or "none",
            "refused_pending_batches": ", ".join(skipped) or "none",
        },
        tuple(warnings),
        (quarantine,),
    )


def abandon_batch(
    spark: SparkSession, catalog: str, raw: RawZone, feed: RawFeed, batch_id: str, reason: str, run_id: str = ""
) -> dict:
    """Close a pending batch of `feed` without loading it (its source will not fix it), audited."""
    if not reason.strip():
        raise BadInputError(f"abandoning raw batch {batch_id} needs a reason")
    pending = {b.batch_id: b for b in raw.pending(feed.source, feed.endpoint)}
    if (batch := pending.get(batch_id.rsplit("/", 1)[-1])) is None:
        raise BadInputError(
            f"no pending raw batch {batch_id!r} under {feed.source}/{feed.endpoint}; pending: "
            f"{', '.join(pending) or 'none'}"
        )
    raw.abandon(batch, reason, {"run_id": run_id})
    bronze = feed.bronze.qualified(catalog)
    snapshot = current_snapshot_id(spark, bronze) if spark.catalog.tableExists(bronze) else None
    why, after = f"raw batch {batch.key} abandoned: {reason}", "none" if snapshot is None else str(snapshot)
    return record_change(spark, catalog, bronze, "ABANDON_BATCH", None, after, why, run_id)


def holds_days(spark: SparkSession, quarantine: str, days: list[dt.date]) -> bool:
    """Whether the quarantine holds a file of a batch day from the first of `days` to the last (its manifests read,
    no data file)."""
    return bool(files_of_days(spark, iceberg_table(spark, quarantine), "_batch_day", min(days), max(days)))
