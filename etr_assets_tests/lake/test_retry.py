"""Conflict retries: only Iceberg commit conflicts are retried, boundedly, with a clear final error."""

import pytest

from etr_assets.errors import CommitConflictError
from etr_assets.lake.retry import is_commit_conflict, run_with_retries


class FakeJavaError(Exception):
    """Stands in for py4j's Py4JJavaError, which carries the Java exception's text."""


def conflict():
    return FakeJavaError(
        "org.apache.iceberg.exceptions.ValidationException: Found conflicting files that can contain "
        "records matching ref(name='id') == 1"
    )


def test_conflicts_are_retried_until_success():
    calls = []

    def operation():
        calls.append(1)
        if len(calls) < 3:
            raise conflict()
        return "done"

    seen = []
    assert run_with_retries(operation, "merge into t", base_delay=0, on_retry=lambda n, e: seen.append(n)) == "done"
    assert len(calls) == 3 and seen == [1, 2]


def test_other_errors_are_not_retried():
    calls = []

    def operation():
        calls.append(1)
        raise ValueError("bad SQL")

    with pytest.raises(ValueError, match="bad SQL"):
        run_with_retries(operation, "merge into t", base_delay=0)
    assert len(calls) == 1


def test_running_out_of_attempts_names_the_operation():
    with pytest.raises(
        CommitConflictError,
        match="merge into t: lost to concurrent writers 3 times; last conflict: .*Found conflicting files",
    ):
        run_with_retries(lambda: (_ for _ in ()).throw(conflict()), "merge into t", attempts=3, base_delay=0)


def test_commit_failed_is_a_conflict():
    assert is_commit_conflict(
        FakeJavaError("org.apache.iceberg.exceptions.CommitFailedException: Version 4 already exists")
    )
    assert not is_commit_conflict(FakeJavaError("org.apache.spark.sql.AnalysisException: table not found"))


def test_a_manifest_rewrite_whose_manifests_a_concurrent_commit_merged_is_a_conflict():
    # Seen in the suite: a commit merged the manifests rewrite_manifests had planned to replace (every table merges
    # them every 8 commits); planned again from the new snapshot, it succeeds.
    assert is_commit_conflict(
        FakeJavaError(
            "org.apache.iceberg.exceptions.ValidationException: Deleted manifest file:/w/t/metadata/a-m0.avro "
            "could not be found in the latest snapshot 3821546123312976809"
        )
    )
