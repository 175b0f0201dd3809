"""The code location built when a workspace loads it, from the ETR_* variables set then (`etr_assets.definitions`
reads them once, at import): a test's daemon ticks run against that test's lake."""

import dagster as dg

from etr_assets.definitions import build_definitions
from etr_assets.settings import Settings


@dg.definitions
def defs() -> dg.Definitions:
    return build_definitions(Settings.from_env())
