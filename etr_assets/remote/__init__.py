"""Running the Spark layers away from the Dagster run: a Glue 5.0 or EMR Serverless job launched through Dagster Pipes.

`layers` names the layers a job can run (the same library functions the assets call), `run_layer` is the job's
entry script, and `jobs` builds the start-job parameters. Nothing here imports Dagster: the job has only
`dagster-pipes`.
"""
