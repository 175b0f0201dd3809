"""`etr prepare-instance`: 1. the laptop dagster.yaml if none, 2. storage migrated, 3. every table pool created up
front (Dagster creates one on its first claim, and two runs claiming a new pool at once can both get through)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from dagster import DagsterInstance

from etr_assets.definitions import defs

LAPTOP_CONFIG = Path(__file__).resolve().parent / "conf" / "dagster.yaml"


def pool_names(defs) -> list[str]:
    """Pools of the table assets and of the ops of plain jobs (table_maintenance takes one per table)."""
    assets = {a.op.pool for a in defs.assets if getattr(a, "op", None) is not None and a.op.pool}
    ops = {
        node.pool
        for job in defs.jobs or ()
        if hasattr(job, "graph")  # a JobDefinition; asset jobs are unresolved here and use the assets' pools
        for node in job.graph.iterate_op_defs()
        if node.pool
    }
    return sorted(assets | ops)


def initialize_pools(instance, defs) -> list[str]:
    storage = instance.event_log_storage
    if (
        not storage.supports_global_concurrency_limits
        or instance.get_concurrency_config().pool_config.default_pool_limit is None
    ):
        return []
    existing = {pool.name for pool in storage.get_pool_limits()}
    created = [name for name in pool_names(defs) if name not in existing]
    for name in created:
        storage.initialize_concurrency_limit_to_default(name)
    return created


def prepare_instance(config: Path | None = None) -> list[str]:
    """Steps 1-3 for $DAGSTER_HOME; returns what was done, one line each."""
    if not (home := os.environ.get("DAGSTER_HOME")):
        raise RuntimeError("DAGSTER_HOME is not set: point it at the instance's folder (./dev uses $ETR_HOME/dagster)")
    home_dir, done = Path(home), []
    home_dir.mkdir(parents=True, exist_ok=True)
    target = home_dir / "dagster.yaml"
    if not target.exists():
        shutil.copyfile(config or LAPTOP_CONFIG, target)
        done.append(f"wrote {target} (from {config or LAPTOP_CONFIG})")
    with DagsterInstance.get() as instance:
        instance.upgrade()
        done.append(f"storage of {home_dir} is up to date")
        created = initialize_pools(instance, defs)
    if created:
        done.append(f"created {len(created)} pool(s): {', '.join(created)}")
    return done
