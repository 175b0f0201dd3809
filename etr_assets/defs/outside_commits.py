"""`commits_outside_dagster`: a check per table, from its Iceberg metadata and Dagster's events (no JVM), of each
commit another tool made, and the sensor that judges what is new every minute."""

import hashlib
import json

import dagster as dg

from etr_assets.defs.common import check_results, table_key
from etr_assets.defs.maintenance import JOB_NAME
from etr_assets.lake.metadata import load_table, main_changes, utc_text
from etr_assets.lake.quality import CheckOutcome, outside_commits_outcome
from etr_assets.lake.specs import TableSpec
from etr_assets.settings import Settings

OUTSIDE = "commits_outside_dagster"
FIRST_LOOK = 20  # moves of main a check with no earlier position judges: the newest ones
# An event names a commit after it is made, by Dagster's clock; the commit's time is the writer's (a remote Spark
# job's), which may be behind by up to this much: events are read from this long before the first move judged.
CLOCK_SKEW_MS = 5 * 60 * 1000
# A rollback moves main back to a snapshot an event may have named long before: it is Dagster's only if an event
# recorded it after the move (the rollback job's observation; its Spark driver shares the run's clock).
ROLLBACK_SLACK_MS = 1000
# Runs that may be committing now: a commit precedes the event that names it.
WRITING = [dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.CANCELING]
JUDGE_FROM_TAG = "etr/judge_outside_from"  # {table: position} the sensor judged from, on the run it launches


def writers_in_flight(
    instance: dg.DagsterInstance, exclude_run: str | None = None
) -> list[tuple[float, dg.DagsterRun]]:
    """(when it started, run) of each run in progress, `exclude_run` left out."""
    return [
        (record.start_time or record.create_timestamp.timestamp(), record.dagster_run)
        for record in instance.get_run_records(filters=dg.RunsFilter(statuses=WRITING))
        if record.dagster_run.run_id != exclude_run
    ]


def may_write(run: dg.DagsterRun, key: dg.AssetKey) -> bool:
    """Whether `run` may commit rows to the asset's table: an asset run of it, or an op job (erasure, rollback);
    maintenance only rewrites (`replace`, never judged)."""
    return run.job_name != JOB_NAME and (run.asset_selection is None or key in run.asset_selection)


def recorded_position(instance: dg.DagsterInstance, spec: TableSpec) -> tuple[int, int] | None:
    """The move of main the check's newest evaluation judged through (its metadata); None before any."""
    check_key = dg.AssetCheckKey(table_key(spec), OUTSIDE)
    # Newest first; a run executing the check has recorded a planned execution first: not an evaluation.
    for record in instance.event_log_storage.get_asset_check_execution_history(check_key, limit=5):
        if isinstance(evaluation := record.evaluation, dg.AssetCheckEvaluation):
            at, snapshot = evaluation.metadata.get("judged_through_ms"), evaluation.metadata.get("judged_through")
            if at is not None and snapshot is not None and str(snapshot.value).lstrip("-").isdigit():
                return int(at.value), int(snapshot.value)
            return None
    return None


def _dagster_events(instance: dg.DagsterInstance, key: dg.AssetKey, after_ms: int) -> dict[int, int]:
    """{snapshot id: when the newest event naming it was recorded (ms)}, from the asset's materializations and
    observations (maintenance's, erasure's, rollback's) recorded after `after_ms`."""
    named: dict[int, int] = {}
    records_filter = dg.AssetRecordsFilter(asset_key=key, after_timestamp=after_ms / 1000)
    for fetch in (instance.fetch_materializations, instance.fetch_observations):
        cursor = None
        while True:
            found = fetch(records_filter, limit=500, cursor=cursor)
            for record in found.records:
                value = str(getattr(record.asset_event.metadata.get("snapshot_id"), "value", ""))
                if value.lstrip("-").isdigit():
                    named[int(value)] = max(named.get(int(value), 0), int(record.timestamp * 1000))
            if not found.has_more:
                break
            cursor = found.cursor
    return named


def judge_outside(
    settings: Settings,
    spec: TableSpec,
    instance: dg.DagsterInstance,
    since: tuple[int, int] | None,
    writers: list[tuple[float, dg.DagsterRun]],
) -> tuple[CheckOutcome, tuple[int, int], str]:
    """The moves of main after `since` (None: a first look), oldest first: Dagster's when an event of the asset names
    the snapshot (for a rollback, one recorded after it). A move a running writer may have made waits, with every
    later one. Returns the outcome, the position judged through ((0, 0): no move yet) and what waits."""
    key = table_key(spec)
    if since is None:
        since_text = f"its newest {FIRST_LOOK} changes (the check's first look)"
    else:
        since_text = utc_text(since[0]) if since[0] else "the table's first commit"
    table = load_table(settings, spec)
    changes = main_changes(table, since, FIRST_LOOK) if table is not None else []
    if not changes:
        note = "" if table is not None else f"{spec.identifier} has not been created yet"
        return outside_commits_outcome([], since_text, 0, note), since or (0, 0), ""
    named = _dagster_events(instance, key, changes[0].at_ms - CLOCK_SKEW_MS)
    # Judged through so far: `since`, or on a first look just before its oldest change.
    through, judged = since or (changes[0].at_ms - 1, 0), len(changes)
    outside, waiting = [], ""
    for index, change in enumerate(changes):
        recorded = named.get(change.snapshot_id)
        if change.rollback:
            dagsters = recorded is not None and recorded >= change.at_ms - ROLLBACK_SLACK_MS
        else:  # a new snapshot: any event naming it came after it
            dagsters = recorded is not None or change.rewrite_only
        if not dagsters:
            started = [run for at, run in writers if may_write(run, key) and at * 1000 <= change.at_ms + CLOCK_SKEW_MS]
            if started:
                run = started[0]
                waiting = (
                    f"{len(changes) - index} later change(s) from {utc_text(change.at_ms)} wait for run "
                    f"{run.run_id[:8]} of {run.job_name}, which may have made them, to end"
                )
                judged = index
                break
            outside.append(change)
        through = change.position
    return outside_commits_outcome(outside, since_text, judged, waiting), through, waiting


def outside_result(outcome: CheckOutcome, through: tuple[int, int]) -> dg.AssetCheckResult:
    """The check's result, with the position it judged through (where its next evaluation starts)."""
    result = check_results([outcome])[0]
    return dg.AssetCheckResult(
        passed=result.passed,
        severity=result.severity,
        description=result.description,
        metadata={**result.metadata, "judged_through_ms": through[0], "judged_through": str(through[1])},
    )


def outside_check(settings: Settings, spec: TableSpec) -> dg.AssetChecksDefinition:
    @dg.asset_check(
        asset=table_key(spec),
        name=OUTSIDE,
        description=f"Warns of each commit to {spec.identifier} Dagster recorded no event of (another tool wrote or "
        "rolled back the table), naming its snapshot, time, operation and rows; Dagster's freshness and figures do "
        f"not see them. From metadata (no JVM): the {OUTSIDE} sensor judges what is new each minute; Execute "
        "judges what came since the check's last evaluation, and so clears a warning once read.",
    )
    def commits_outside_dagster(context: dg.AssetCheckExecutionContext) -> dg.AssetCheckResult:
        instance = context.instance
        writers = writers_in_flight(instance, exclude_run=context.run.run_id)
        # Where the sensor that launched this run judged the table from, so the run reports what it found.
        position = json.loads(context.run.tags.get(JUDGE_FROM_TAG, "{}")).get(spec.identifier)
        since = tuple(position) if position else recorded_position(instance, spec)
        outcome, through, _ = judge_outside(settings, spec, instance, since, writers)
        return outside_result(outcome, through)

    return commits_outside_dagster


JOB = "judge_commits_outside_dagster"


def outside_commits_job(checks: list[dg.AssetChecksDefinition]):
    """The checks alone: a run of it reads metadata and Dagster's events (no JVM, no table written)."""
    return dg.define_asset_job(
        name=JOB,
        selection=dg.AssetSelection.checks(*checks),
        description=f"Judges the {OUTSIDE} check of the tables the {OUTSIDE} sensor found commits outside Dagster "
        "in (or of every table, launched by hand).",
    )


def outside_commits_sensor(settings: Settings, specs: list[TableSpec]) -> dg.SensorDefinition:
    @dg.sensor(
        name=OUTSIDE,
        job_name=JOB,
        minimum_interval_seconds=60,
        default_status=dg.DefaultSensorStatus.STOPPED,
        description=f"Every minute, judges the commits made to each table since the last look (table metadata and "
        f"Dagster's events: no JVM) and, when any was made outside Dagster, launches a {JOB} run whose {OUTSIDE} "
        "checks fail naming them; a commit a run in progress may have made waits for the run's end.",
    )
    def commits_outside_dagster(context: dg.SensorEvaluationContext):
        try:
            looked = {k: tuple(v) for k, v in json.loads(context.cursor or "{}").get("judged_through", {}).items()}
        except (AttributeError, TypeError, ValueError):  # an earlier version's cursor: a first look
            looked = {}
        writers = writers_in_flight(context.instance)
        found, reported, waiting = {}, [], []
        for spec in specs:
            # Where this sensor, or the check run since, left off.
            positions = (looked.get(spec.identifier), recorded_position(context.instance, spec))
            since = max((p for p in positions if p is not None), key=lambda p: p[0], default=None)  # the later
            outcome, through, waits = judge_outside(settings, spec, context.instance, since, writers)
            looked[spec.identifier] = through
            if waits:
                waiting.append(f"{spec.identifier}: {waits}")
            if not outcome.passed:
                found[spec.identifier] = (table_key(spec), since, through)
                reported.append(f"{spec.identifier}: {outcome.description}")
        cursor = json.dumps({"judged_through": {k: list(v) for k, v in sorted(looked.items())}})
        if not found:
            skip = f"no commit outside Dagster since the last look ({len(specs)} tables)"
            return dg.SensorResult(skip_reason="; ".join([skip, *waiting]), cursor=cursor)
        context.log.warning("; ".join(reported))  # the sensor's log reaches the console (the code server's output)
        start = {table: list(since) for table, (_, since, _) in found.items() if since is not None}
        # One run per finding: the key names where each table's judging starts and ends.
        key = ",".join(f"{table}@{since}..{through}" for table, (_, since, through) in found.items())
        request = dg.RunRequest(
            run_key=f"{OUTSIDE}:{hashlib.sha1(key.encode()).hexdigest()[:16]}",
            asset_selection=[],
            asset_check_keys=[dg.AssetCheckKey(asset, OUTSIDE) for asset, _, _ in found.values()],
            tags={JUDGE_FROM_TAG: json.dumps(start, sort_keys=True)},
        )
        return dg.SensorResult(run_requests=[request], cursor=cursor)

    return commits_outside_dagster
