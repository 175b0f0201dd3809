"""The main job over the transaction pipeline, and its daily schedule (stopped until someone starts it)."""

from __future__ import annotations

from dagster import (
    AssetSelection,
    DefaultScheduleStatus,
    ScheduleDefinition,
    build_schedule_from_partitioned_job,
    define_asset_job,
)

PIPELINE_GROUPS = ("raw", "bronze", "landing", "silver", "gold")


def pipeline_job(exclude_checks=()):
    """Every layer for the partition; checks that run on their own schedule (freshness) are left out."""
    selection = AssetSelection.groups(*PIPELINE_GROUPS)
    if exclude_checks:
        selection = selection - AssetSelection.checks(*exclude_checks)
    return define_asset_job(
        name="etr_pipeline",
        selection=selection,
        description="Fetch a day from the BNPL API (transactions, customers, merchants) and refresh "
        "every layer for it.",
    )


def daily_schedule(job) -> ScheduleDefinition:
    # Runs at 02:00 UTC for the day that just ended; stopped by default so a fresh install does nothing alone.
    return build_schedule_from_partitioned_job(
        job,
        name="etr_pipeline_daily",
        hour_of_day=2,
        default_status=DefaultScheduleStatus.STOPPED,
        description="Each night, runs etr_pipeline for the previous day's partition.",
    )
