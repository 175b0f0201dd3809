"""Create every table pool of the code location in the Dagster instance, at its default limit.

Dagster creates a pool lazily, on the first claim; two runs claiming a new pool at the same moment can both
get through. `./dev` runs this once per instance so the pools exist before any run starts.
"""

from __future__ import annotations

import sys


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
    if not storage.supports_global_concurrency_limits or instance.get_concurrency_config().pool_config.default_pool_limit is None:
        return []
    existing = {pool.name for pool in storage.get_pool_limits()}
    created = [name for name in pool_names(defs) if name not in existing]
    for name in created:
        storage.initialize_concurrency_limit_to_default(name)
    return created


def main() -> int:
    from dagster import DagsterInstance

    from etr_assets.definitions import defs

    with DagsterInstance.get() as instance:
        created = initialize_pools(instance, defs)
    if created:
        print(f"created {len(created)} Dagster pool(s): {', '.join(created)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
