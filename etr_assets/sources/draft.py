"""A first declaration of an API's endpoint (docs/sources.md), drafted from one sample response: the records' list and
its data selector, a column per field (nested objects flattened, typed from the sample's values), a guessed key and
sequence, and a `# TODO` wherever a person must decide. The draft parses as it is printed (entities, single_page,
auth none), so `dg check defs` accepts it before the TODOs are settled. Plain Python: no Dagster, no Spark."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import re
import sys
from pathlib import Path

import yaml

from etr_assets.errors import DeclarationError, DraftError
from etr_assets.sources.declaration import COMPONENT_TYPE, IDENTIFIER, parse_attributes

KEY_PART = re.compile(r"^[A-Za-z_][\w-]*$")  # one key of a data_selector or a column's path
# The text bronze reads as a date or a timestamp (etr_assets/lake/frames.py): anything else stays a string.
DATE = re.compile(r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$")
TIMESTAMP = re.compile(
    r"^[0-9]{4}-[0-9]{2}-[0-9]{2}[T ][0-9]{2}:[0-9]{2}(:[0-9]{2}([.][0-9]{1,9})?)?(Z|[-+][0-9]{2}(:?[0-9]{2})?)?$"
)
DECIMAL_TEXT = re.compile(r"^-?[0-9]+[.][0-9]+$")
BIGINT = range(-(2**63), 2**63)
SEQUENCE_NAME = re.compile(
    r"^(last_)?(updated|modified|changed)(_at|_on|_time|_ts|_date|_datetime)?$"
    r"|^(last_)?(update|modification)_(time|ts)$"
)
DAY_NAME = re.compile(r"^(day|date|business_date|.*_date|.*_day)$")
PERSONAL_NAME = re.compile(
    r"(^|_)(e_?mail|phone|mobile|msisdn|first_name|last_name|full_name|surname|birth|dob|date_of_birth|ip|ip_address"
    r"|street|postcode|postal_code|zip|passport|national_id|ssn|iban)($|_)"
)
SUBJECT_NAME = re.compile(r"^(customer|user|person|member|client|account|subscriber)_id$")
PAGING_NAME = re.compile(r"next|cursor|page|offset|total|count|link|has_more|continuation", re.IGNORECASE)
_YAML_WORDS = {"true", "false", "yes", "no", "on", "off", "y", "n", "null", "~"}
_PLAIN = re.compile(r"^[A-Za-z_/][A-Za-z0-9_./-]*$")


@dataclasses.dataclass
class DraftColumn:
    name: str
    path: tuple[str, ...]  # keys from the record to the value
    type: str
    required: bool  # present and non-null in every sample record
    unique: bool  # no two sample records share a value
    note: str = ""  # what a person should check, shown beside the column

    @property
    def nested(self) -> bool:
        return self.path != (self.name,)


@dataclasses.dataclass
class Draft:
    """What the sample says: where the records are, their columns, and the guesses made from them."""

    selector: tuple[str, ...]  # () when the body is the list
    records: int
    columns: list[DraftColumn]
    key: str
    key_sure: bool  # an id-like column, unique and never null in the sample
    sequence: str | None
    skipped: list[str]  # fields no column can name (a path is keys of letters, digits, _ and -)
    paging: list[tuple[str, object]]  # the body's fields beside the records that look like paging


def read_sample(sample: str) -> tuple[str, object]:
    """(the sample's name for messages, its JSON document); `-` reads standard input."""
    name = "standard input" if sample == "-" else sample
    try:
        text = sys.stdin.read() if sample == "-" else Path(sample).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise DraftError(f"{name}: no such file") from None
    except UnicodeDecodeError:
        raise DraftError(f"{name}: not JSON: not UTF-8 text") from None
    except OSError as failed:
        raise DraftError(f"{name}: cannot be read: {failed.strerror or failed}") from None
    try:
        return name, json.loads(text, parse_constant=_refuse_constant)
    except json.JSONDecodeError as bad:
        raise DraftError(f"{name}: not JSON: {bad.msg} (line {bad.lineno}, column {bad.colno})") from None
    except ValueError as bad:
        raise DraftError(f"{name}: not JSON: {bad}") from None


def _refuse_constant(word: str):
    raise ValueError(f"{word} is not a JSON value")


def find_records(document: object, name: str) -> tuple[tuple[str, ...], list[dict]]:
    """The shallowest non-empty list of JSON objects (the first, in the body's order, at that depth) and the keys
    leading to it; lists inside lists are not searched (a data selector names keys only)."""
    level: list[tuple[tuple[str, ...], object]] = [((), document)]
    while level:
        deeper = []
        for path, value in level:
            if isinstance(value, list) and value and all(isinstance(item, dict) for item in value):
                return path, value
            if isinstance(value, dict):
                deeper += [((*path, k), v) for k, v in value.items() if KEY_PART.match(k)]
        level = deeper
    raise DraftError(f"{name}: no records found: neither the body nor a value under its keys is a list of JSON objects")


def analyse(document: object, name: str, resource: str) -> Draft:
    selector, records = find_records(document, name)
    leaves: dict[tuple[str, ...], list] = {}  # path -> its value in each record where present (None included)
    objects: dict[tuple[str, ...], int] = {}  # path -> records where it is a non-empty object
    for record in records:
        _walk(record, (), leaves, objects)
    columns, skipped, names = [], [], set()
    for path, values in leaves.items():
        present = [v for v in values if v is not None]
        if path in objects and not any(not isinstance(v, dict) for v in present):
            continue  # an object (or null) wherever seen: its fields are the columns
        if not all(KEY_PART.match(part) for part in path):
            skipped.append(".".join(path))
            continue
        type_, note = _type(present)
        if path in objects:
            note = _join(note, f"an object in {objects[path]} of {len(records)} records: declared as text here")
        column_name = _unique_name("_".join(_snake(part) for part in path), names)
        texts = [json.dumps(v, sort_keys=True) for v in present]
        required, unique = len(present) == len(records), len(set(texts)) == len(texts)
        columns.append(DraftColumn(column_name, path, type_, required=required, unique=unique, note=note))
    if not columns:
        where = ".".join(selector) or "the body"
        raise DraftError(f"{name}: the records at {where} have no field a column can be declared for")
    key, sure = _key(columns, resource)
    next(c for c in columns if c.name == key).required = True  # the declaration requires it; the TODO says why
    return Draft(selector, len(records), columns, key, sure, _sequence(columns), skipped, _paging(document, selector))


def _walk(record: dict, prefix: tuple[str, ...], leaves: dict, objects: dict) -> None:
    for key, value in record.items():
        path = (*prefix, key)
        if isinstance(value, dict) and value:
            objects[path] = objects.get(path, 0) + 1
            leaves.setdefault(path, [])  # its place in the column order, should it be a value elsewhere
            _walk(value, path, leaves, objects)
        else:
            leaves.setdefault(path, []).append(value)


def _kind(value: object) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "bigint" if value in BIGINT else "big number"
    if isinstance(value, float):
        return "double"
    if isinstance(value, list):
        return "list"
    if isinstance(value, dict):
        return "object"
    if DATE.match(value) and _valid_date(value):
        return "date"
    if TIMESTAMP.match(value) and _valid_date(value[:10]):
        return "timestamp"
    return "decimal text" if DECIMAL_TEXT.match(value) else "string"


def _valid_date(text: str) -> bool:
    try:
        dt.date.fromisoformat(text)
    except ValueError:
        return False
    return True


def _type(values: list) -> tuple[str, str]:
    """The column's type from its non-null sample values, and a note when the guess needs a person."""
    kinds = {_kind(v) for v in values}
    if not kinds:
        return "string", "TODO type: null or missing in every sample record"
    if kinds <= {"bigint", "double"}:
        return ("bigint", "") if kinds == {"bigint"} else ("double", "")
    if len(kinds) == 1 and (kind := next(iter(kinds))) in ("boolean", "date", "timestamp", "string"):
        return kind, ""
    if kinds == {"decimal text"}:
        return "string", "decimal text: kept as sent (a history may type it decimal(p,s))"
    if kinds <= {"decimal text", "string"}:
        return "string", ""
    if kinds == {"list"}:
        return "string", "TODO a list: declared as its JSON text"
    if kinds == {"object"}:
        return "string", "TODO an empty object in the sample: declared as its JSON text"
    if kinds == {"big number"}:
        return "string", "TODO integers beyond bigint: declared as text"
    return "string", f"TODO mixed values in the sample ({', '.join(sorted(kinds))}): declared as text"


def _snake(part: str) -> str:
    text = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", part).lower()
    text = re.sub(r"[^a-z0-9_]+", "_", text)
    return re.sub(r"_+", "_", text).strip("_")


def _unique_name(name: str, taken: set[str]) -> str:
    name = re.sub(r"_+", "_", name).strip("_") or "field"
    if not IDENTIFIER.match(name):
        name = f"f_{name}"
    candidate, n = name, 1
    while candidate in taken:
        n += 1
        candidate = f"{name}_{n}"
    taken.add(candidate)
    return candidate


def _singular(word: str) -> str:
    if word.endswith("ies"):
        return word[:-3] + "y"
    return word[:-1] if word.endswith("s") and not word.endswith("ss") else word


def _key(columns: list[DraftColumn], resource: str) -> tuple[str, bool]:
    """An id-like column (`id`, `<resource>_id`, any `<x>_id`; top-level first) unique and never null in the
    sample; else the first such column of any name; else the first column (the TODO says it is a guess)."""
    fit = [c for c in columns if c.required and c.unique and c.type in ("bigint", "int", "string")]
    own = {f"{_singular(resource)}_id", f"{resource}_id"}
    for rank in (
        lambda c: c.name == "id" and not c.nested,
        lambda c: c.name in own and not c.nested,
        lambda c: c.name.endswith("_id") and not c.nested,
        lambda c: c.name == "id" or c.name.endswith("_id"),
    ):
        if found := [c for c in fit if rank(c)]:
            return found[0].name, True
    return (fit or columns)[0].name, False


def _sequence(columns: list[DraftColumn]) -> str | None:
    found = [c for c in columns if c.type == "timestamp" and SEQUENCE_NAME.match(c.path[-1].lower())]
    return min(found, key=lambda c: not c.required).name if found else None  # the first required one, else the first


def _paging(document: object, selector: tuple[str, ...]) -> list[tuple[str, object]]:
    """The body's scalar fields beside the records (at any level of the selector's path) named like paging."""
    found, node = [], document
    for depth in range(len(selector)):
        if not isinstance(node, dict):
            break
        for key, value in node.items():
            path = (*selector[:depth], key)
            if key != selector[depth] and KEY_PART.match(key) and PAGING_NAME.search(key):
                if value is None or isinstance(value, str | int | float | bool):
                    found.append((".".join(path), value))
                elif isinstance(value, dict):  # links: {next: ...}
                    found += [
                        (f"{'.'.join(path)}.{k}", v)
                        for k, v in value.items()
                        if KEY_PART.match(k) and (v is None or isinstance(v, str | int | float))
                    ]
        node = node.get(selector[depth])
    return found


def _paginator_hint(path: str, value: object) -> str | None:
    last = path.rsplit(".", 1)[-1].lower()
    if isinstance(value, str) and re.match(r"^(https?://|/)", value):
        return f"{{type: json_link, next_url_path: {path}}}"
    if "cursor" in last or "continuation" in last:
        return f"{{type: cursor, cursor_path: {path}, cursor_param: cursor}}"
    if "next" in last:
        return f"{{type: cursor, cursor_path: {path}, cursor_param: {'page' if 'page' in last else 'cursor'}}}"
    if "total" in last and isinstance(value, int) and not isinstance(value, bool):
        return f"{{type: page_number, page_param: page, total_path: {path}}}  (or offset, with total_path)"
    return None


def _scalar(text: str) -> str:
    """`text` as a YAML scalar: plain when that reads back as the same text, else double-quoted."""
    return text if _PLAIN.match(text) and text.lower() not in _YAML_WORDS else json.dumps(text)


def _join(*notes: str) -> str:
    return "; ".join(n for n in notes if n)


def draft_source(sample: str, source: str, resource: str, path: str | None = None) -> str:
    """The declaration drafted from the sample file (`-`: standard input), as YAML text."""
    for what, value in (("NAME", source), ("RESOURCE", resource)):
        if not IDENTIFIER.match(value):
            raise DraftError(f"{what} {value!r} is not a lower-case identifier (letters, digits, _)")
    name, document = read_sample(sample)
    text = render(analyse(document, name, resource), source, resource, path, Path(name).name if sample != "-" else name)
    # The draft parses as a declaration, as the module's docstring promises (a failure here is this module's bug).
    attributes = next(value for key, value in yaml.compose(text).value if key.value == "attributes")
    try:
        parse_attributes(attributes, f"draft of {name}")
    except DeclarationError as bad:  # pragma: no cover - a bug of render
        raise DraftError(f"{name}: the draft does not parse: {bad}") from None
    return text


def render(draft: Draft, source: str, resource: str, path: str | None, sample: str) -> str:
    """The draft as a component file; every choice a person must make is a `# TODO` beside a default that parses."""
    key_type = next(c.type for c in draft.columns if c.name == draft.key)
    variable = f"{source.upper()}_API_URL"
    where = ".".join(draft.selector) or "the body"
    few = " (one record: unique and required are guesses)" if draft.records == 1 else ""
    out = [
        f"# Drafted by `etr draft-source` from {sample}: {draft.records} records at {where}{few}.",
        "# Settle every TODO, then `dg check defs`; the format: docs/sources.md.",
        f"type: {COMPONENT_TYPE}",
        "attributes:",
        f"  name: {source}",
        "  # TODO description: the API in a line",
        "  client:",
        f"    # TODO base_url: set {variable} to the API's URL where the source runs (or write the URL here)",
        f"    base_url: {{env: {variable}}}",
        "    # TODO auth: none, or one of these (a secret is {env: VARIABLE}, never written in the file):",
        f"    #   {{type: bearer, token: {{env: {source.upper()}_API_TOKEN}}}}",
        f"    #   {{type: api_key, name: X-API-Key, location: header, api_key: {{env: {source.upper()}_API_KEY}}}}",
        f"    #   {{type: http_basic, username: USER, password: {{env: {source.upper()}_API_PASSWORD}}}}",
        "    #   {type: oauth2_client_credentials, access_token_url: https://..., client_id: {env: ...},",
        "    #    client_secret: {env: ...}}",
        "    auth: {type: none}",
        "    # TODO paginator: single_page reads one response per day; page_number, offset, cursor, json_link and",
        "    #   header_link follow pages (docs/sources.md lists their options).",
    ]
    for field, value in draft.paging[:4]:
        shown = json.dumps(value)
        out.append(f"    #   The sample's body has {field}: {shown if len(shown) <= 40 else shown[:37] + '...'}")
        if hint := _paginator_hint(field, value):
            out.append(f"    #   e.g. paginator: {hint}")
    out.append("    paginator: single_page")
    out.append("    # TODO page_size: {param: limit, value: 100} when the API takes a page size")
    if draft.selector:
        out.append(f"    data_selector: {'.'.join(draft.selector)}  # where the records are in each response")
    else:
        out.append("    # no data_selector: each response's body is the list of records")
    out += [
        "  resources:",
        f"    - name: {resource}",
        "      # TODO description: what one record is",
        "      endpoint:",
        f"        path: {_scalar(path or '/' + resource)}" + ("" if path else "  # TODO the endpoint's path"),
        "        # TODO day: the query parameter a day is asked for by, and its strftime format, e.g.",
        '        # day: {param: date, format: "%Y-%m-%d"}',
        "      # TODO kind: entities (keyed records; their changes become an SCD2 history) or events (the rows of a",
    ]
    day_columns = sorted((c.name for c in draft.columns if c.type == "date"), key=lambda n: not DAY_NAME.match(n))
    suggestion = f"day_column: {day_columns[0]}" if day_columns else "day_column: <a date column>"
    out += [
        f"      #   day: add {suggestion}, and remove mode, tracked and sequence)",
        "      kind: entities",
        "      # TODO mode: full (each list is whole: a key it lacks was deleted) or changes (changed records only)",
        "      mode: full",
    ]
    unsure = "" if draft.key_sure else "TODO no id-like column "
    out.append(f"      key: {_scalar(draft.key)}  # {unsure}unique and never null in the sample")
    if draft.sequence:
        out.append(f"      sequence: {_scalar(draft.sequence)}  # versions are ordered by this update time")
    else:
        out.append("      # no sequence: the sample has no update time; a version starts at its snapshot's time")
    out.append("      # TODO tracked: the columns whose change makes a new version (default: all but key and sequence)")
    personal = [c.name for c in draft.columns if PERSONAL_NAME.search(c.name)]
    subjects = [c.name for c in draft.columns if SUBJECT_NAME.match(c.name) and c.type in ("bigint", "int")]
    example = f" (e.g. subject: {subjects[0]})" if subjects else ""
    out += [
        "      # TODO pii: mark columns of personal data pii: true, and name the subject: the bigint column of the",
        f"      #   person's id, by which erasure finds their records{example}",
    ]
    if personal:
        out.append(f"      #   These look personal: {', '.join(personal)}")
    out += ["      # TODO doc: what each column holds (the tables' column comments)", "      columns:"]
    for column in draft.columns:
        parts = [f"name: {_scalar(column.name)}", f"type: {column.type}"]
        if column.nested:
            parts.append(f"path: {_scalar('.'.join(column.path))}")
        if column.required:
            parts.append("required: true")
        note = column.note
        if column.name == draft.key and not column.unique:
            note = _join(note, "TODO not unique in the sample")
        out.append(f"        - {{{', '.join(parts)}}}" + (f"  # {note}" if note else ""))
    for field in draft.skipped:
        out.append(f"        # TODO {json.dumps(field)} has a key no path can name (letters, digits, _ and - only)")
    out += [
        "      # TODO checks: a rule each record must pass (SQL on the columns), else it is quarantined, e.g.",
        "      # checks:",
        f"      #   - {{description: {draft.key} is positive, sql: {draft.key} > 0}}"
        if key_type == "bigint"
        else f"      #   - {{description: {draft.key} is not blank, sql: \"trim({draft.key}) <> ''\"}}",
        "",
    ]
    return "\n".join(out)
