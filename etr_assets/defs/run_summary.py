"""What a run did, in three lines, read from the instance's event log: at the end of every run's log, and
`etr run-summary`. A failed run gets the first failure's one-line reason (a step's, or why its process is gone, as
the run guard recorded it), an erasure run its proof."""

from __future__ import annotations

import dataclasses
from collections import Counter

from dagster import AssetCheckSeverity, DagsterEventType, DagsterInstance, DagsterRunStatus, RunsFilter

from etr_assets.defs.dagster_private import USER_CODE_ERROR

DAY_ROWS = "dagster/partition_row_count"  # a day's own rows, on its partition
RUN_ROWS = ("current_rows", "rows_written")  # a write without days: a history's current versions, else its rows
ADDED = "records_added"  # the rows the write's one commit added (the same on each day it materialized)
SUPPRESSED = "records_suppressed"  # bronze: records of erased customers not stored (`lake/bronze.py`)
PROOF, SUPPRESSION = "proof", "suppression"  # gdpr_erasure's prove_erasure step (`defs/erasure.py`)
STEP_FAILURE, STEP_OUTPUT = DagsterEventType.STEP_FAILURE, DagsterEventType.STEP_OUTPUT
ENGINE_EVENT, RUN_FAILURE = DagsterEventType.ENGINE_EVENT, DagsterEventType.RUN_FAILURE
# An engine event's metadata (`defs/run_guard.py`): why the run's worker process is gone, and the step it was in.
WORKER_GONE, GONE_DURING = "worker_gone", "during_step"
REASON_CHARS = 600  # a reason longer than this is cut: the summary stays readable
FINISHED = [DagsterRunStatus.SUCCESS, DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED]


@dataclasses.dataclass(frozen=True)
class RunSummary:
    run_id: str
    job_name: str
    status: str
    partitions: str  # "2025-01-01", "2025-01-01...2025-01-03", or "" for an unpartitioned run
    seconds: float | None
    rows_by_table: dict[str, int]  # asset (a raw batch or a table) -> its rows for the run's days: equal on a rerun
    passed: int
    warned: int
    failed: int
    not_passed: tuple[str, ...]  # "asset:check" of each check that warned or failed
    suppressed: int = 0  # records of erased customers dropped by the run's bronze loads
    failures: tuple[tuple[str, str], ...] = ()  # (step, the first line of why it failed), in the order they failed
    proof: str = ""  # an erasure run's: "VERIFIED (N erased customer(s) on the suppression list: ...)"
    written_by_table: dict[str, int] = dataclasses.field(default_factory=dict)  # asset -> rows this run committed

    def lines(self, status: str | None = None) -> list[str]:
        """Three lines, then an erasure's proof and why it failed; `status` replaces the run's (one still ending)."""
        took = f" in {self.seconds:.0f} s" if self.seconds is not None else ""
        days = f" for {self.partitions}" if self.partitions else ""
        rows, written = sum(self.rows_by_table.values()), sum(self.written_by_table.values())
        checks = f"checks: {self.passed} passed, {self.warned} warned, {self.failed} failed"
        lines = [
            f"run {self.run_id[:8]} of {self.job_name}{days}: {status or self.status}{took}",
            f"  {len(self.rows_by_table)} asset(s) materialized"
            + (f", {rows:,} row(s) for its days, {written:,} written by this run" if self.rows_by_table else "")
            + (f", {self.suppressed:,} record(s) of erased customers suppressed" if self.suppressed else ""),
            f"  {checks}" + (f" ({', '.join(self.not_passed)})" if self.not_passed else ""),
        ]
        if self.proof:
            lines.append(f"  erasure proof: {self.proof}")
        if self.failures:
            (step, reason), others = self.failures[0], [s for s, _ in self.failures[1:]]
            lines.append(f"  failed: {step}: {reason}" + (f" (also failed: {', '.join(others)})" if others else ""))
        return lines


def proof_of(metadata) -> str:
    """An erasure proof's outcome and suppression statement, from prove_erasure's metadata ("" for other steps)."""
    if PROOF not in metadata:
        return ""
    statement = metadata[SUPPRESSION].value if SUPPRESSION in metadata else ""
    return f"{metadata[PROOF].value}" + (f" ({statement})" if statement else "")


def failure_reason(data) -> str:
    """The first line of why a step failed: a `Failure`'s description, else the innermost error's message."""
    described = data.user_failure_data.description if data.user_failure_data else None
    error = data.error
    if data.error_source == USER_CODE_ERROR and error is not None and error.cause is not None:
        error = error.cause  # Dagster's wrapper ("Error occurred while executing op ..."), the code's error inside
    return _first_line(described or (error.message if error is not None else ""))


def _first_line(text: str | None) -> str:
    line = next((line.strip() for line in (text or "").splitlines() if line.strip()), "no reason given")
    return line if len(line) <= REASON_CHARS else f"{line[: REASON_CHARS - 1]}…"


def full_run_id(instance: DagsterInstance, run_id: str) -> str:
    """`run_id`, or the one run id it begins (the short id logs print); unchanged when none or several do."""
    if len(run_id) >= 36:
        return run_id
    matches = [found for found in instance.get_run_ids() if found.startswith(run_id)]
    return matches[0] if len(matches) == 1 else run_id


def summarize_run(
    instance: DagsterInstance, run_id: str | None = None, worker_gone: tuple[str, str] | None = None
) -> RunSummary | None:
    """The run `run_id` (default: the instance's newest finished run), or None. `worker_gone`: (step, why) of a run
    whose process is gone, as the run guard is about to record it."""
    newest = RunsFilter(statuses=FINISHED)
    runs = [instance.get_run_by_id(full_run_id(instance, run_id))] if run_id else instance.get_runs(newest, limit=1)
    if (run := next(iter(runs), None)) is None:
        return None
    rows: dict[str, dict[str | None, int]] = {}  # asset -> day (None: the whole run) -> rows
    suppressed, added = {}, {}
    verdicts: Counter[str] = Counter()
    not_passed, failures, proof, ended = [], [], "", ""
    kinds = {DagsterEventType.ASSET_MATERIALIZATION, DagsterEventType.ASSET_CHECK_EVALUATION}
    for record in instance.all_logs(run.run_id, of_type=kinds | {STEP_FAILURE, STEP_OUTPUT, ENGINE_EVENT, RUN_FAILURE}):
        event = record.dagster_event
        data = event.event_specific_data
        if event.event_type == ENGINE_EVENT:
            if data is not None and WORKER_GONE in data.metadata:
                step = data.metadata[GONE_DURING].value if GONE_DURING in data.metadata else ""
                failures.append((step or "run", str(data.metadata[WORKER_GONE].value)))
        elif event.event_type == RUN_FAILURE:
            ended = _first_line((data.error.message if data is not None and data.error else "") or event.message)
        elif event.event_type == STEP_OUTPUT:
            proof = proof_of(data.metadata) or proof
        elif event.event_type == STEP_FAILURE:
            failures.append((event.step_key, failure_reason(data)))
            proof = proof_of(data.user_failure_data.metadata if data.user_failure_data else {}) or proof
        elif event.event_type == DagsterEventType.ASSET_MATERIALIZATION:
            key, metadata = data.materialization.asset_key.to_user_string(), data.materialization.metadata
            # Each day's own rows on its partition; else the run's figure, the same on each of its days: once.
            days = rows.setdefault(key, {})
            if DAY_ROWS in metadata:
                days[data.materialization.partition] = int(metadata[DAY_ROWS].value)
            elif figure := next((name for name in RUN_ROWS if name in metadata), None):
                days.setdefault(None, int(metadata[figure].value))
            if ADDED in metadata:
                added.setdefault(key, int(metadata[ADDED].value))
            if SUPPRESSED in metadata:
                suppressed.setdefault(key, int(metadata[SUPPRESSED].value))
        elif data.passed:
            verdicts["passed"] += 1
        else:
            verdicts["warned" if data.severity == AssetCheckSeverity.WARN else "failed"] += 1
            not_passed.append(f"{data.asset_key.to_user_string()}:{data.check_name}")
    if worker_gone is not None:
        failures.append(worker_gone)
    if not failures and ended:  # no step failed: why the run failed (an error of the run itself, or who failed it)
        failures.append(("run", ended))
    start, end = (run.tags.get(f"dagster/asset_partition_range_{edge}") for edge in ("start", "end"))
    partitions = run.tags.get("dagster/partition") or (f"{start}...{end}" if start and end else "")
    held = {key: sum(days.values()) for key, days in rows.items()}
    stats = instance.get_run_stats(run.run_id)
    seconds = stats.end_time - stats.start_time if stats.start_time and stats.end_time else None
    return RunSummary(
        run.run_id,
        run.job_name,
        run.status.value,
        partitions,
        seconds,
        held,
        verdicts["passed"],
        verdicts["warned"],
        verdicts["failed"],
        tuple(not_passed),
        sum(suppressed.values()),
        tuple(failures),
        proof,
        {key: added.get(key, n) for key, n in held.items()},  # no commit figure (a raw batch): all of it is new
    )
