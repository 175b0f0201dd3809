"""The Glue 5.0 / EMR Serverless job that runs a layer away from the Dagster run, through Dagster Pipes: `run_layer`
is its entry script, `jobs` builds its parameters. No Dagster here: the job has only `dagster-pipes`."""
