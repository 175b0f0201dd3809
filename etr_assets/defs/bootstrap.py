"""The `bootstrap_lake` job: every database and Iceberg table of the specs, created before the first run.

Run it once per environment (Launchpad, or `dagster job execute -m etr_assets.definitions -j bootstrap_lake`);
running it again changes nothing. In the `aws` profile it uses pyiceberg's GlueCatalog (no JVM: Spark's GlueCatalog
needs jars only Glue and EMR ship); elsewhere `ensure_table` on the profile's Spark catalog.
"""

from dagster import OpExecutionContext, job, op

from etr_assets.defs.resources import LakeResource
from etr_assets.lake.bootstrap import bootstrap_catalog, bootstrap_with_spark
from etr_assets.lake.metadata import catalog as pyiceberg_catalog
from etr_assets.settings import Settings
from etr_assets.tables import ALL_SPECS


def build_bootstrap_job(settings: Settings):
    @op(
        name="create_databases_and_tables",
        description="Creates every database and Iceberg table declared in the specs that does not exist yet.",
    )
    def create_databases_and_tables(context: OpExecutionContext, lake: LakeResource) -> None:
        if settings.profile == "aws":
            catalog = pyiceberg_catalog(settings)
            result = bootstrap_catalog(catalog, ALL_SPECS, settings.warehouse, settings.format_version)
        else:
            result = bootstrap_with_spark(lake.session(), lake.catalog, ALL_SPECS)
        context.log.info(result.describe())
        context.add_output_metadata(
            {
                "databases_created": len(result.created_namespaces),
                "tables_created": len(result.created_tables),
                "tables_existing": len(result.existing_tables),
                "created": ", ".join(result.created_namespaces + result.created_tables) or "nothing",
                "catalog": "glue" if settings.profile == "aws" else settings.catalog,
            }
        )

    @job(
        name="bootstrap_lake",
        description="Create the Glue databases (or namespaces) and every Iceberg table from the specs. Safe to re-run.",
    )
    def bootstrap_lake():
        create_databases_and_tables()

    return bootstrap_lake
