"""What a run logs as its resources start (`defs/resources.py`), which `etr run` shows as it follows the run (it does
not show a step's own lines). Apart from the resources so the follower imports neither Spark nor the lake."""

API_STARTED = "started the synthetic BNPL API"
SPARK_STARTING, SPARK_STARTED = "starting Spark (a JVM) for this run", "Spark started"
ANNOUNCED = (API_STARTED, SPARK_STARTING, SPARK_STARTED)
