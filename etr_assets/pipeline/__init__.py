"""This pipeline's layers on top of the library (`etr_assets.lake`): the transaction tables, the customer and
merchant histories with the customer profiles, and the GDPR erasure plan over this pipeline's tables. The tables
and feeds they use are declared once in `etr_assets.tables`."""
