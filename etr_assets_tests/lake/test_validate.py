"""Raw lines read, numbered and checked (etr_assets.lake.validate), as Spark's line reader would number them."""

from etr_assets.lake.specs import Column
from etr_assets.lake.validate import PARALLEL_LISTING_THRESHOLD, read_validated

COLUMNS = (Column("id", "bigint", required=True), Column("name", "string"))


def test_every_line_keeps_its_file_and_number_whatever_ends_it(lake, tmp_path):
    # Lines end at \n, \r\n or a lone \r; blank lines count but are no records; the last line needs no line break.
    first = tmp_path / "part-00001.jsonl"
    first.write_bytes(b'{"id": 1}\n\n{"id": "x"}\r\n{"id": 3, "name": "c"}\r{"name": "no id"}')
    second = tmp_path / "part-00002.jsonl"
    second.write_bytes(b'{"id": 5, "extra": true}\n   \nnot json\n')
    files = [str(first), str(second)]

    result = read_validated(lake, files, COLUMNS)
    try:
        accepted = {(r["_source_file"].rsplit("/", 1)[-1], r["id"]) for r in result.accepted.collect()}
        refused = {
            (r["source_file"].rsplit("/", 1)[-1], r["line_number"]): r["reason"] for r in result.quarantined.collect()
        }
    finally:
        result.release()

    assert accepted == {("part-00001.jsonl", 1), ("part-00001.jsonl", 3), ("part-00002.jsonl", 5)}
    assert refused == {
        ("part-00001.jsonl", 3): "a value of the wrong type: id expects bigint, got x",
        ("part-00001.jsonl", 5): "missing required field id",
        ("part-00002.jsonl", 3): "not a JSON object",
    }
    assert (result.received, result.accepted_count, result.quarantined_count) == (6, 3, 3)
    assert result.unknown_fields == {"extra": 1}
    # The numbers are those of Spark's own line reader, file by file.
    read_line_by_line = lake.read.text(files).collect()
    assert [r["value"] for r in read_line_by_line][:5] == [
        '{"id": 1}',
        "",
        '{"id": "x"}',
        '{"id": 3, "name": "c"}',
        '{"name": "no id"}',
    ]


def test_a_line_one_parse_cannot_read_is_read_as_a_json_reader_reads_it(lake, tmp_path):
    # Most lines are parsed once; a key given twice (a JSON reader keeps its last value) and NaN (no JSON number: the
    # line is not a JSON object, yet its other fields are read, so the refused record keeps its subject) are read
    # as before, with their keys and fields apart.
    path = tmp_path / "part-00001.jsonl"
    path.write_text('{"id": 1, "id": 2, "name": "a"}\n{"id": 3, "name": NaN}\n{"id": 4, "name": "b", "name": "c"}\n')

    result = read_validated(lake, [str(path)], COLUMNS, carry_columns=("id",))
    try:
        accepted = {r["id"]: r["name"] for r in result.accepted.collect()}
        refused = [(r["line_number"], r["reason"], r["id"]) for r in result.quarantined.collect()]
    finally:
        result.release()

    assert accepted == {2: "a", 4: "c"}
    assert refused == [(2, "not a JSON object", 3)]
    assert result.unknown_fields == {}


def _jobs_run(spark, action) -> int:
    """How many Spark jobs `action` ran (job ids are consecutive; retention keeps the newest)."""
    tracker = spark.sparkContext.statusTracker()
    before = max(tracker.getJobIdsForGroup(None), default=-1)
    action()
    return max(tracker.getJobIdsForGroup(None), default=-1) - before


def test_many_local_files_are_listed_by_the_driver_and_the_session_keeps_its_threshold(lake, tmp_path):
    files = []
    for number in range(40):  # more than Spark's 32, past which it lists paths with a job of a task per path
        path = tmp_path / f"part-{number:05d}.jsonl"
        path.write_text(f'{{"id": {number}}}\n')
        files.append(str(path))
    before = lake.conf.get(PARALLEL_LISTING_THRESHOLD)
    counts = {}

    def validate(some_files):
        result = read_validated(lake, some_files, COLUMNS)
        counts[len(some_files)] = result.accepted_count
        result.release()

    one_file, forty_files = _jobs_run(lake, lambda: validate(files[:1])), _jobs_run(lake, lambda: validate(files))

    assert counts == {1: 1, 40: 40}
    assert forty_files == one_file  # the tally's jobs alone: no listing job
    assert lake.conf.get(PARALLEL_LISTING_THRESHOLD) == before


# Pieces of generated text: escaped backslashes before escapes, surrogate pairs and lone surrogates, NUL, combining
# marks, right-to-left text, quotes, and a text that merely looks like an escape.
TEXT_PIECES = ("a", "\\", "\\\\", '"', "\ud800", "\udc00", "\U0001f600", "\x00", "e\u0301", "שלום", "\\u", "ud800")


def generated_names(count: int, seed: int) -> list[str]:
    import random

    pick = random.Random(seed)
    names = ["x" * 5000, "\\" + "\ud800", "\\\\" + "\ud800", "\ud800" + "\\", "\udc00\ud800"]
    while len(names) < count:
        names.append("".join(pick.choice(TEXT_PIECES) for _ in range(pick.randint(1, 8))))
    return names


def has_lone_surrogate(text: str) -> bool:
    return any(0xD800 <= ord(c) <= 0xDFFF for c in text)


def encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def test_text_is_stored_exactly_or_refused_as_a_json_parser_reads_it(lake, tmp_path):
    import json

    names = generated_names(400, seed=30)
    lines = []
    for number, name in enumerate(names):
        # Surrogates only escaped (raw, they are not UTF-8); other text escaped or raw, alternately.
        ascii_only = not encodable(name) or number % 2 == 0
        lines.append(json.dumps({"id": number, "name": name}, ensure_ascii=ascii_only))
    path = tmp_path / "part-00001.jsonl"
    path.write_text("\n".join(lines), encoding="utf-8")

    result = read_validated(lake, [str(path)], COLUMNS)
    try:
        accepted = {r["id"]: r["name"] for r in result.accepted.collect()}
        refused = {r["line_number"] - 1: r["reason"] for r in result.quarantined.collect()}
    finally:
        result.release()

    assert result.received == len(names) == result.accepted_count + result.quarantined_count
    for number, line in enumerate(lines):
        text = json.loads(line)["name"]  # what a JSON parser reads: an escaped pair joins into one character
        if has_lone_surrogate(text):
            assert "lone UTF-16 surrogate" in refused.get(number, ""), (number, line)
        else:
            assert accepted.get(number) == text, (number, line)
    assert 0 < len(refused) < len(names)


def test_several_days_batches_are_checked_in_one_read_each_day_counted_and_released_on_its_own(lake, tmp_path):
    import datetime as dt

    from etr_assets.lake.validate import read_validated_days
    from etr_assets.sources.raw_zone import batch_day_of_file

    columns = (*COLUMNS, Column("day", "date", required=True))
    days, files = [dt.date(2025, 1, n) for n in range(1, 6)], []
    for n, day in enumerate(days):  # each batch in a folder named as the raw zone names it: its day first
        folder = tmp_path / f"{day}_20250104T000000000000Z_a1b2c{n}"
        folder.mkdir()
        lines = [f'{{"id": {n * 10 + i}, "day": "{day}"}}' for i in range(n + 1)]
        if n == 1:  # a record of another day, a line that is no JSON, and a field no column declares
            lines += ['{"id": 99, "day": "2025-01-01"}', "not json", '{"id": 98, "day": "2025-01-02", "x": 1}']
        (folder / "part-00001.jsonl").write_text("\n".join(lines))
        files.append(str(folder / "part-00001.jsonl"))

    jobs = lake.sparkContext.statusTracker()
    before = len(jobs.getJobIdsForGroup(None))
    persisted = set(lake.sparkContext._jsc.getPersistentRDDs().keys())  # other tests' in this shared session
    checked = read_validated_days(lake, files, days, batch_day_of_file, columns, day_column="day")
    # the count and the refused lines' first ones, for every day (a read a day ran a count a day): a job or two each
    assert len(jobs.getJobIdsForGroup(None)) - before <= 4
    try:
        counts = {d: (v.received, v.accepted_count, v.quarantined_count, v.unknown_fields) for d, v in checked.items()}
        assert counts == {days[0]: (1, 1, 0, {}), days[1]: (5, 3, 2, {"x": 1})} | {
            day: (n + 1, n + 1, 0, {}) for n, day in enumerate(days) if n > 1
        }
        assert checked[days[1]].first_reasons == [
            "part-00001.jsonl:3: day 2025-01-01 is not the batch day 2025-01-02",
            "part-00001.jsonl:4: not a JSON object",
        ]
        assert sorted(r["id"] for r in checked[days[2]].accepted.collect()) == [20, 21, 22]
        checked.pop(days[1]).release()  # a refused day let go first: the others still read their lines
        assert sorted(r["id"] for r in checked[days[0]].accepted.collect()) == [0]
    finally:
        for validated in checked.values():
            validated.release()
    # The last day released dropped the persisted lines.
    assert set(lake.sparkContext._jsc.getPersistentRDDs().keys()) <= persisted
