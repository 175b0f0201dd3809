"""Concurrent MERGE writers on the `s3` profile: Iceberg's JDBC catalog on PostgreSQL 15, data through S3A on moto.

A MERGE that loses a commit race is not retried by Iceberg (`ValidationException: Found conflicting files`):
`etr_assets.lake.retry.run_with_retries` re-reads and re-runs it. These tests race real processes on one table:

1. three processes apply interleaving SCD2 observations of the same keys, several rounds each: whatever the
   commit order, the table ends as the history of all observations, with no lost or doubled commit;
2. two insert-only MERGEs of the same new rows both commit, duplicating them (apache/iceberg #12653), while our
   SCD2 MERGE (always with MATCHED clauses) of the same new keys from three processes leaves no duplicate;
3. with one attempt only, the loser of a MERGE race raises CommitConflictError naming the operation, and with
   a few attempts both writers get through.

The writers are three long-lived processes (concurrent_job.py), each with its own JVM, started once for the
module: JVM start-up is most of the cost on two cores. The tests read the results back through pyiceberg (no
JVM, no writer's catalog cache in between).
"""

from __future__ import annotations

import collections
import dataclasses
import datetime as dt
import itertools
import json
import os
import queue
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from etr_assets.settings import Settings
from etr_assets_tests.infra import (
    clean_env,
    create_bucket,
    moto_server,
    postgres_server,
    require_s3_profile_jars,
    s3_client,
)
from etr_assets_tests.s3.concurrent_job import T0_EPOCH
from etr_assets_tests.s3.conftest import REGION, s3_profile_settings

JOB = Path(__file__).with_name("concurrent_job.py")
ROOT = Path(__file__).resolve().parents[2]
WRITERS = 3
STARTUP_TIMEOUT = 180
TASK_TIMEOUT = 240
CONFLICT = "Found conflicting files"


# --- the writer processes -----------------------------------------------------------------------------------
class Writer:
    """One concurrent_job.py process (its own process group: the job, its JVM and its Python workers)."""

    def __init__(self, number: int, args: dict, log_dir: Path):
        self.number = number
        self.stderr_path = log_dir / f"writer-{number}.err"
        env = clean_env(REGION) | {"PYSPARK_PYTHON": sys.executable}  # no AWS_* of the host: dummy keys only
        with open(self.stderr_path, "w") as err:
            self.process = subprocess.Popen(
                [sys.executable, str(JOB), json.dumps(args | {"writer": number})],
                cwd=ROOT,
                env=env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
                start_new_session=True,
            )
        self.messages: queue.Queue = queue.Queue()
        self.other_output: collections.deque = collections.deque(maxlen=50)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        for line in self.process.stdout:
            kind, _, payload = line.rstrip("\n").partition(" ")
            if kind in ("READY", "RESULT", "FAILED"):
                self.messages.put((kind, payload))
            else:
                self.other_output.append(line)
        self.messages.put(("EXIT", ""))

    def diagnostics(self) -> str:
        err = self.stderr_path.read_text(errors="replace")[-4000:] if self.stderr_path.exists() else ""
        return f"writer {self.number} (exit {self.process.poll()}):\n{err}\n{''.join(self.other_output)[-2000:]}"

    def send(self, task: dict) -> None:
        self.process.stdin.write(json.dumps(task) + "\n")
        self.process.stdin.flush()

    def receive(self, expected: str, deadline: float) -> dict:
        try:
            kind, payload = self.messages.get(timeout=max(1.0, deadline - time.monotonic()))
        except queue.Empty:
            self.kill()  # it may still be working on the task: nothing later could trust its answers
            raise AssertionError(f"no {expected} in time from {self.diagnostics()}") from None
        if kind == "FAILED":
            raise AssertionError(f"{json.loads(payload)['traceback']}\n{self.diagnostics()}")
        if kind != expected:
            raise AssertionError(f"expected {expected}, got {kind} from {self.diagnostics()}")
        return json.loads(payload)

    def kill(self) -> None:
        """SIGKILL the process group we created for it (by id): the job, and its JVM if it outlived the job."""
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:  # the whole group has exited already
            pass
        self.process.wait()

    def stop(self) -> None:
        try:
            if self.process.poll() is None:
                self.send({"task": "stop"})
                self.process.stdin.close()
                self.process.wait(timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            pass
        finally:
            self.kill()
            self.reader.join(timeout=5)


@dataclasses.dataclass
class Cluster:
    settings: Settings
    writers: list[Writer]
    root: Path

    def folder(self, name: str) -> str:
        path = self.root / f"{name}-{uuid.uuid4().hex[:8]}"
        path.mkdir()
        return str(path)

    def run(self, tasks: dict[int, dict]) -> dict[int, dict]:
        """Hand each writer its task at once; wait for every answer (a timed-out writer is killed)."""
        for number, task in tasks.items():
            self.writers[number].send(task)
        deadline = time.monotonic() + TASK_TIMEOUT
        answers, failures = {}, []
        for number in tasks:
            try:
                answers[number] = self.writers[number].receive("RESULT", deadline)
            except AssertionError as failure:  # collect the others' answers first: they must not be left over
                failures.append(str(failure))
        assert not failures, "\n\n".join(failures)
        return answers


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """moto's S3, a private PostgreSQL with the catalog database, and three warm writer processes."""
    require_s3_profile_jars()
    root = tmp_path_factory.mktemp("concurrent")
    with moto_server() as endpoint, postgres_server() as jdbc_url:
        bucket = f"etr-lake-{uuid.uuid4().hex[:10]}"
        create_bucket(s3_client(endpoint, REGION), bucket)
        settings = s3_profile_settings(bucket, endpoint, jdbc_url, root / "etr")
        args = {"bucket": bucket, "endpoint": endpoint, "jdbc_url": jdbc_url}
        writers: list[Writer] = []
        try:
            started = time.monotonic()
            deadline = time.monotonic() + STARTUP_TIMEOUT
            # The first writer alone creates the JDBC catalog's tables: writers initializing a fresh catalog at
            # once race on its schema migration ("column iceberg_type ... already exists").
            writers.append(Writer(0, args | {"home": str(root / "writer-0")}, root))
            ready = [writers[0].receive("READY", deadline)]
            for number in range(1, WRITERS):
                writers.append(Writer(number, args | {"home": str(root / f"writer-{number}")}, root))
            ready += [writer.receive("READY", deadline) for writer in writers[1:]]
            print(
                f"\n{WRITERS} writers ready in {time.monotonic() - started:.1f}s "
                f"({', '.join(str(r['seconds']) for r in ready)}s each)"
            )
            yield Cluster(settings, writers, root)
        finally:
            for writer in writers:
                writer.stop()


# --- reading back, and the expected history -----------------------------------------------------------------
def hour_of(value: dt.datetime | None) -> int | None:
    if value is None:
        return None
    seconds = value.replace(tzinfo=dt.UTC).timestamp() if value.tzinfo is None else value.timestamp()
    assert (seconds - T0_EPOCH) % 3600 == 0, value
    return int((seconds - T0_EPOCH) // 3600)


def load(settings: Settings, name: str):
    from etr_assets.lake.metadata import catalog

    return catalog(settings).load_table(("conc", name))


def scd2_rows(settings: Settings, name: str) -> list[dict]:
    rows = load(settings, name).scan().to_arrow().to_pylist()
    for row in rows:
        row["from"], row["to"] = hour_of(row["_valid_from"]), hour_of(row["_valid_to"])
    return rows


def versions_of(rows: list[dict]) -> collections.Counter:
    return collections.Counter((r["id"], r["a"], r["b"], r["from"], r["to"]) for r in rows)


def expected_history(observations: list[list]) -> collections.Counter:
    """Per key: sort by time, collapse consecutive equal states (Python's == is NULL-safe), cut at changes."""
    by_key: dict[int, list] = collections.defaultdict(list)
    for key, a, b, hour in observations:
        by_key[key].append((hour, (a, b)))
    versions = collections.Counter()
    for key, events in by_key.items():
        changes: list = []
        for hour, state in sorted(events):
            if not changes or changes[-1][1] != state:
                changes.append((hour, state))
        for (hour, state), following in zip(changes, changes[1:] + [(None, None)]):
            versions[(key, state[0], state[1], hour, following[0])] += 1
    return versions


def check_invariants(rows: list[dict]) -> None:
    by_key: dict[int, list] = collections.defaultdict(list)
    for row in rows:
        by_key[row["id"]].append(row)
    for key, versions in by_key.items():
        versions.sort(key=lambda r: r["from"])
        assert sum(r["_is_current"] for r in versions) <= 1, f"key {key}: more than one current row"
        assert len({r["from"] for r in versions}) == len(versions), f"key {key}: duplicate _valid_from"
        for row in versions:
            assert row["_is_current"] == (row["to"] is None), f"key {key}: _is_current disagrees with _valid_to"
            assert row["to"] is None or row["to"] > row["from"], f"key {key}: empty interval"
        for earlier, later in itertools.pairwise(versions):
            assert earlier["to"] is not None and earlier["to"] <= later["from"], f"key {key}: overlapping versions"


def observations(rng: random.Random, keys: range, hours: int) -> list[list]:
    """(id, a, b, hour), one per key and hour at most: changes, re-sends of the same state, value <-> NULL."""
    rows = []
    for key in keys:
        state = None
        for hour in range(hours):
            if rng.random() < 0.45:
                if state is None or rng.random() < 0.65:
                    state = (rng.choice([None, "x", "y"]), rng.choice([None, 1, 2]))
                rows.append([key, state[0], state[1], hour])
    return rows


# --- 1. overlapping SCD2 MERGEs -----------------------------------------------------------------------------
@pytest.mark.slow
def test_overlapping_scd2_merges_from_three_processes_end_as_the_history_of_all_observations(cluster, aws_env):
    """Each writer owns a window of hours and learns the others' observations in a different order.

    Writer w applies, round after round, its cumulative observations: its own window (hours 10w..10w+9), then
    half of the next writer's window, then all of it and half of the third, then everything. Every round of every
    writer recomputes the same keys from what it was given, so intermediate states flip between writers' views;
    the end state must be the history of all observations, whatever order the commits landed in.
    """
    rng = random.Random(20250301)
    union = observations(rng, range(1, 7), hours=10 * WRITERS)
    window = {w: [r for r in union if 10 * w <= r[3] < 10 * w + 10] for w in range(WRITERS)}
    tasks = {}
    barrier = cluster.folder("scd2-barrier")
    for w in range(WRITERS):
        mine, following, third = window[w], window[(w + 1) % WRITERS], window[(w + 2) % WRITERS]
        pick = random.Random(w)
        half_following = [r for r in following if pick.random() < 0.5]
        half_third = [r for r in third if pick.random() < 0.5]
        rounds = [mine, mine + half_following, mine + following + half_third, union]
        assert all(len({tuple(r) for r in rows}) == len(rows) for rows in rounds)
        tasks[w] = {
            "task": "scd2_rounds",
            "table": "history",
            "create": w == 0,
            "barrier": barrier,
            "writers": WRITERS,
            "rounds": rounds,
        }
    started = time.monotonic()
    answers = cluster.run(tasks)
    elapsed = time.monotonic() - started

    rounds = [entry for w in sorted(answers) for entry in answers[w]["rounds"]]
    gave_up = [entry["gave_up"] for entry in rounds if "gave_up" in entry]
    retries = [retry for entry in rounds for retry in entry["retries"]]
    commits = [entry["snapshot_id"] for entry in rounds if entry.get("changed")]

    def lost(entry: dict) -> int:  # attempts that lost a race: each retried one, and the last if it gave up
        return len(entry["retries"]) + ("gave_up" in entry)

    print(
        f"\nSCD2 writers: {len(union)} observations of 6 keys, {len(rounds)} rounds in {elapsed:.1f}s: "
        f"{len(commits)} commits, {sum(map(lost, rounds))} attempts lost a race ({len(retries)} retried), "
        f"{len(gave_up)} rounds ran out of attempts"
    )
    for w in sorted(answers):
        print(
            f"  w{w}: "
            + ", ".join(
                f"r{e['round']} {'commit' if e.get('changed') else 'GAVE UP' if 'gave_up' in e else 'no-op'}"
                f" after {lost(e)} lost (t={e['seconds']}s)"
                for e in answers[w]["rounds"]
            )
        )
    for retry in retries[:3]:
        print(f"  e.g. attempt {retry['attempt']} lost: {retry['error'][:200]}")

    # The writers really raced: some MERGE lost to another's commit, and it was a recognised conflict.
    assert retries, "no MERGE ever conflicted: the writers did not overlap (the test proved nothing)"
    assert all(CONFLICT in retry["error"] for retry in retries), retries
    # A round may run out of attempts (apply_observations' default is 5): that raises CommitConflictError and
    # commits nothing, which the snapshot count below checks. The end state does not depend on it: the last
    # commit of all is some writer's, and that writer's last round (the full union) came after it and either
    # made it or found nothing to change; it cannot have lost, as nothing committed after it.
    for entry in rounds:
        if "gave_up" in entry:
            assert entry["gave_up"].startswith("SCD2 merge into etr.conc.history: lost to concurrent writers 5 times")
            assert CONFLICT in entry["cause"], entry

    rows = scd2_rows(cluster.settings, "history")
    print(f"  table: {len(rows)} versions of {len({r['id'] for r in rows})} keys")
    check_invariants(rows)
    expected = expected_history(union)
    assert versions_of(rows) == expected
    assert len(rows) == sum(expected.values())

    # Every MERGE that changed something committed exactly once: no lost and no doubled commit.
    table = load(cluster.settings, "history")
    snapshot_ids = [str(s.snapshot_id) for s in table.metadata.snapshots]
    assert len(snapshot_ids) == len(commits), (snapshot_ids, commits)
    # Scd2Result.snapshot_id names each writer's own commit: no two rounds report the same snapshot.
    assert sorted(commits) == sorted(snapshot_ids), (commits, snapshot_ids)


# --- 2. insert-only MERGE duplicates, and the SCD2 MERGE that does not ------------------------------------
@pytest.mark.slow
def test_concurrent_insert_only_merges_of_the_same_rows_duplicate_them(cluster, aws_env):
    """apache/iceberg #12653: `WHEN NOT MATCHED THEN INSERT` alone is planned as an append, which validates
    nothing, so two writers that read the table before either commits both insert the same new keys."""
    seed_ids, source_ids = list(range(5)), list(range(20))
    barrier, gate = cluster.folder("insert-barrier"), cluster.folder("insert-gate")
    tasks = {
        w: {
            "task": "insert_only_merge",
            "table": "insert_only",
            "create": w == 0,
            "barrier": barrier,
            "gate": gate,
            "writers": 2,
            "seed_ids": seed_ids,
            "source_ids": source_ids,
        }
        for w in range(2)
    }
    answers = cluster.run(tasks)
    assert not any(a["gate_late"] for a in answers.values()), "the writers never met inside their MERGEs"

    table = load(cluster.settings, "insert_only")
    ids = collections.Counter(table.scan().to_arrow().column("id").to_pylist())
    new = set(source_ids) - set(seed_ids)
    duplicated = sorted(i for i, n in ids.items() if n > 1)
    print(
        f"\ninsert-only MERGEs: operations {[a['operation'] for a in answers.values()]}, "
        f"{sum(ids.values())} rows for {len(ids)} ids, {len(duplicated)} ids duplicated"
    )
    assert set(ids) == set(seed_ids) | set(source_ids)
    assert all(ids[i] == 1 for i in seed_ids)  # matched rows are never inserted
    if not duplicated:
        pytest.skip("apache/iceberg #12653 did not reproduce: both insert-only MERGEs committed without duplicates")
    # Both appends committed (Iceberg retried the losing one as an append): every new key is there twice.
    assert duplicated == sorted(new) and all(ids[i] == 2 for i in new)
    assert [a["operation"] for a in answers.values()] == ["append", "append"]
    assert len(table.metadata.snapshots) == 3  # the seed, and both MERGEs


@pytest.mark.slow
def test_scd2_merges_of_the_same_new_keys_from_three_processes_leave_no_duplicate(cluster, aws_env):
    """The same first observations of 20 new keys from three processes that all read the empty table: one
    commits, the two others conflict (our MERGE has MATCHED clauses, so Iceberg validates it), re-read, find
    nothing left to do and commit nothing."""
    rows = [[key, "x", key % 3 or None, 1] for key in range(100, 120)]
    rows += [[key, "y" if key % 2 else "x", key % 3 or None, 2] for key in range(100, 120)]  # half change
    barrier, gate = cluster.folder("newkeys-barrier"), cluster.folder("newkeys-gate")
    tasks = {
        w: {
            "task": "scd2_rounds",
            "table": "new_keys",
            "create": w == 0,
            "barrier": barrier,
            "gate": gate,
            "writers": WRITERS,
            "rounds": [rows],
        }
        for w in range(WRITERS)
    }
    answers = cluster.run(tasks)
    assert not any(a["gate_late"] for a in answers.values()), "the writers never met inside their MERGEs"

    outcomes = [a["rounds"][0] for a in answers.values()]
    retries = [retry for entry in outcomes for retry in entry["retries"]]
    print(
        f"\nSCD2 same new keys: inserted {[e.get('inserted') for e in outcomes]}, "
        f"committed {[bool(e.get('changed')) for e in outcomes]}, retries {[len(e['retries']) for e in outcomes]}"
    )
    assert not [e["gave_up"] for e in outcomes if "gave_up" in e]
    table_rows = scd2_rows(cluster.settings, "new_keys")
    check_invariants(table_rows)
    keyed = collections.Counter((r["id"], r["from"]) for r in table_rows)
    assert max(keyed.values()) == 1, f"duplicate (key, _valid_from): {[k for k, n in keyed.items() if n > 1]}"
    assert versions_of(table_rows) == expected_history(rows)
    assert len(table_rows) == 30  # 20 keys, 10 of them with a second version

    # Exactly one writer committed; the two others lost, retried once, and found the rows already there.
    assert sorted(bool(e.get("changed")) for e in outcomes) == [False, False, True]
    assert sorted(len(e["retries"]) for e in outcomes) == [0, 1, 1]
    assert all(CONFLICT in retry["error"] for retry in retries), retries
    assert len(load(cluster.settings, "new_keys").metadata.snapshots) == 1


# --- 3. retries run out -------------------------------------------------------------------------------------
@pytest.mark.slow
def test_a_merge_with_one_attempt_loses_with_an_error_naming_it_and_a_few_attempts_get_through(cluster, aws_env):
    ids = list(range(10))

    def race(value: str, attempts: int) -> dict[int, dict]:
        barrier, gate = cluster.folder("upsert-barrier"), cluster.folder("upsert-gate")
        tasks = {
            w: {
                "task": "merge_with_retries",
                "table": "upsert",
                "create": w == 0 and value == "a",
                "barrier": barrier,
                "gate": gate,
                "writers": 2,
                "ids": ids,
                "attempts": attempts,
                "value": f"{value}{w}",
                "what": f"upsert into conc.upsert by writer {w}",
            }
            for w in range(2)
        }
        answers = cluster.run(tasks)
        assert not any(a["gate_late"] for a in answers.values()), "the writers never met inside their MERGEs"
        return answers

    def values() -> collections.Counter:
        data = load(cluster.settings, "upsert").scan().to_arrow()
        assert sorted(data.column("id").to_pylist()) == ids  # neither duplicated nor lost
        return collections.Counter(data.column("v").to_pylist())

    # One attempt each: both read the same snapshot, one commits, the other's validation fails and, with no
    # attempt left, run_with_retries raises CommitConflictError naming the operation and the conflict.
    answers = race("a", attempts=1)
    print(f"\none attempt: {json.dumps(answers)}")
    winners = [w for w, a in answers.items() if a["ok"]]
    losers = [w for w, a in answers.items() if not a["ok"]]
    assert len(winners) == 1 and len(losers) == 1, answers
    lost = answers[losers[0]]
    assert lost["error_type"] == "CommitConflictError"
    assert lost["message"].startswith(
        f"upsert into conc.upsert by writer {losers[0]}: lost to concurrent writers 1 times; last conflict: "
    )
    # The conflict itself is in the cause: the message's "last conflict" is py4j's first line (see the report).
    assert CONFLICT in lost["cause"], lost
    assert lost["retries"] == [] and answers[winners[0]]["retries"] == []
    assert values() == {f"a{winners[0]}": len(ids)}  # the loser changed nothing

    # Three attempts each: the loser re-reads and re-runs after the winner's commit, so its values are last.
    answers = race("b", attempts=3)
    print(f"three attempts: {json.dumps(answers)}")
    assert all(a["ok"] for a in answers.values()), answers
    retried = [w for w, a in answers.items() if a["retries"]]
    assert len(retried) == 1 and len(answers[retried[0]]["retries"]) == 1, answers
    assert CONFLICT in answers[retried[0]]["retries"][0]
    assert values() == {f"b{retried[0]}": len(ids)}
    assert len(load(cluster.settings, "upsert").metadata.snapshots) == 4  # seed, a-winner, both b MERGEs
