"""A source declared in YAML (docs/sources.md): its client (base URL, auth, paginator, data selector) and its resources
(endpoints and the tables they fill), in dlt's `rest_api` vocabulary. Parsed with the line of every field, so a mistake
is one line naming the file, the line and the field; a declaration is parsed whole or not at all."""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
from collections.abc import Mapping
from enum import StrEnum
from importlib.resources.abc import Traversable
from pathlib import Path

import yaml

from etr_assets.errors import DeclarationError

IDENTIFIER = re.compile(r"^[a-z][a-z0-9_]*$")
SYNTHETIC_APIS = ("bnpl", "stores")  # what `client.synthetic` may name: etr_assets.sources.synthetic_*
COLUMN_TYPES = ("string", "bigint", "int", "float", "double", "boolean", "date", "timestamp")
DECIMAL = re.compile(r"^decimal\(\d+,\s*\d+\)$")


class AuthType(StrEnum):
    NONE = "none"
    BEARER = "bearer"
    API_KEY = "api_key"
    HTTP_BASIC = "http_basic"
    OAUTH2_CLIENT_CREDENTIALS = "oauth2_client_credentials"


class PaginatorType(StrEnum):
    SINGLE_PAGE = "single_page"
    PAGE_NUMBER = "page_number"
    OFFSET = "offset"
    CURSOR = "cursor"  # the next cursor in the body, sent back as a query parameter
    JSON_LINK = "json_link"  # the next page's URL in the body
    HEADER_LINK = "header_link"  # the next page's URL in the `Link` header


class ResourceKind(StrEnum):
    EVENTS = "events"  # rows of a day (a day column): a reloaded day replaces the day
    ENTITIES = "entities"  # keyed records whose changes become an SCD2 history


class EntityMode(StrEnum):
    FULL = "full"  # each batch is the whole list: a key it lacks was deleted
    CHANGES = "changes"  # each batch holds changed records only


# Each auth kind's fields: (name, is a secret, required). A secret is read from the environment, never the file.
AUTH_FIELDS: Mapping[AuthType, tuple[tuple[str, bool, bool], ...]] = {
    AuthType.NONE: (),
    AuthType.BEARER: (("token", True, True),),
    AuthType.API_KEY: (("name", False, False), ("location", False, False), ("api_key", True, True)),
    AuthType.HTTP_BASIC: (("username", False, True), ("password", True, True)),
    AuthType.OAUTH2_CLIENT_CREDENTIALS: (
        ("access_token_url", False, True),
        ("client_id", True, True),
        ("client_secret", True, True),
        ("scopes", False, False),
    ),
}
# Each paginator's options with their defaults (dlt's names; `total_path` defaults to none: stop at an empty page).
PAGINATOR_OPTIONS: Mapping[PaginatorType, Mapping[str, object]] = {
    PaginatorType.SINGLE_PAGE: dict(),
    PaginatorType.PAGE_NUMBER: dict(page_param="page", base_page=1, total_path=None, maximum_page=None),
    PaginatorType.OFFSET: dict(offset_param="offset", limit_param="limit", total_path=None, maximum_offset=None),
    PaginatorType.CURSOR: dict(cursor_path="cursor", cursor_param="cursor"),
    PaginatorType.JSON_LINK: dict(next_url_path="next"),
    PaginatorType.HEADER_LINK: dict(links_next_key="next"),
}


@dataclasses.dataclass(frozen=True)
class FromEnv:
    """A value read from an environment variable when a run starts (the file names the variable only)."""

    variable: str
    where: str  # `file:line: field`, for the error when it is missing


Text = str | FromEnv


@dataclasses.dataclass(frozen=True)
class Auth:
    type: AuthType
    fields: Mapping[str, object]  # str, FromEnv or (scopes) a tuple of str


@dataclasses.dataclass(frozen=True)
class Paginator:
    type: PaginatorType
    options: Mapping[str, object]


@dataclasses.dataclass(frozen=True)
class Client:
    base_url: Text
    auth: Auth
    paginator: Paginator
    data_selector: tuple[str, ...]  # keys from the body's top to the records' list; () when the body is the list
    page_size: int | None = None
    page_size_param: str | None = None
    timeout_seconds: float = 30.0
    attempts: int = 5
    max_delay_seconds: float = 30.0
    max_pages: int = 10_000  # paging on past this is a fault of the API, not a big day
    synthetic: str | None = None  # the local profile starts this synthetic API when base_url's variable is unset


@dataclasses.dataclass(frozen=True)
class Field:
    name: str
    type: str
    doc: str = ""
    path: tuple[str, ...] = ()  # where the value is in the record, when not a top-level field of this name
    required: bool = False
    pii: bool = False


@dataclasses.dataclass(frozen=True)
class RecordCheck:
    description: str
    sql: str


@dataclasses.dataclass(frozen=True)
class HistoryColumn:
    name: str
    type: str | None = None  # the history's type, when not the received one (e.g. decimal text -> decimal)
    doc: str | None = None


@dataclasses.dataclass(frozen=True)
class TableOptions:
    """What a declaration may say of one of its tables beyond its columns: name, description, properties."""

    table: str | None = None
    description: str | None = None
    properties: Mapping[str, str] = dataclasses.field(default_factory=dict)
    columns: tuple[HistoryColumn, ...] = ()  # history only: its business columns in order (default: every field)


@dataclasses.dataclass(frozen=True)
class Resource:
    name: str
    path: str
    kind: ResourceKind
    columns: tuple[Field, ...]
    params: Mapping[str, str] = dataclasses.field(default_factory=dict)
    day_param: str | None = None  # the query parameter a day is asked for by; None: the endpoint takes no day
    day_format: str = "%Y-%m-%d"
    day_column: str | None = None  # events: the date column of the day (it must equal the batch's day)
    key: str | None = None
    mode: EntityMode = EntityMode.FULL
    tracked: tuple[str, ...] = ()
    sequence: str | None = None  # entities: the source's update timestamp; None: the snapshot's own time
    subject: str | None = None  # the column naming the data subject (GDPR erasure)
    checks: tuple[RecordCheck, ...] = ()
    freshness_hours: float = 36.0
    description: str | None = None
    bronze: TableOptions = TableOptions()
    quarantine: TableOptions = TableOptions()
    history: TableOptions = TableOptions()
    where: str = ""  # `file:line: field` of the resource, for errors found after parsing

    def day_value(self, day: dt.date) -> str:
        return day.strftime(self.day_format)


@dataclasses.dataclass(frozen=True)
class SourceDeclaration:
    name: str
    file: str
    client: Client
    resources: tuple[Resource, ...]
    description: str = ""

    def resource(self, name: str) -> Resource:
        for resource in self.resources:
            if resource.name == name:
                return resource
        raise KeyError(f"source {self.name} has no resource {name!r}; it has {', '.join(self.names)}")

    @property
    def names(self) -> list[str]:
        return [r.name for r in self.resources]

    def secrets(self) -> list[FromEnv]:
        return [v for v in (self.client.base_url, *self.client.auth.fields.values()) if isinstance(v, FromEnv)]


# libyaml's parser where installed (its marks carry the same lines), and the safe constructor for single values.
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_CONSTRUCTOR = yaml.constructor.SafeConstructor()


class _Node:
    """A YAML node with its file and field path: typed reads that fail naming `file:line: field`."""

    def __init__(self, node: yaml.Node, file: str, field: str):
        self.node, self.file, self.field = node, file, field

    @property
    def where(self) -> str:
        return f"{self.file}:{self.node.start_mark.line + 1}: {self.field or '(top)'}"

    def fail(self, message: str) -> DeclarationError:
        return DeclarationError(f"{self.where}: {message}")

    def mapping(self, allowed: tuple[str, ...], required: tuple[str, ...] = ()) -> dict[str, _Node]:
        """The fields given, each one of `allowed` and given once, with every one of `required`."""
        if not isinstance(self.node, yaml.MappingNode):
            raise self.fail("expected a mapping of fields")
        fields: dict[str, _Node] = {}
        for key, value in self.node.value:
            name = key.value if isinstance(key, yaml.ScalarNode) else "?"
            child = _Node(value, self.file, f"{self.field}.{name}" if self.field else name)
            if name not in allowed:
                raise _Node(key, self.file, child.field).fail(f"unknown field; expected one of {', '.join(allowed)}")
            if name in fields:
                raise _Node(key, self.file, child.field).fail("given twice")
            fields[name] = child
        if missing := [n for n in required if n not in fields]:
            raise self.fail(f"missing required field {missing[0]}")
        return fields

    def strings(self) -> dict[str, str]:
        """A mapping of any names to single values, each as text (table properties, query parameters)."""
        if not isinstance(self.node, yaml.MappingNode):
            raise self.fail("expected a mapping")
        names = tuple(str(key.value) for key, _ in self.node.value)
        return {name: str(child.scalar()) for name, child in self.mapping(names).items()}

    def sequence(self) -> list[_Node]:
        if not isinstance(self.node, yaml.SequenceNode):
            raise self.fail("expected a list")
        return [_Node(item, self.file, f"{self.field}[{i}]") for i, item in enumerate(self.node.value)]

    def scalar(self):
        if not isinstance(self.node, yaml.ScalarNode):
            raise self.fail("expected a single value")
        return _CONSTRUCTOR.construct_object(self.node, deep=True)

    def text(self) -> str:
        value = self.scalar()
        if not isinstance(value, str) or not value.strip():
            raise self.fail(f"expected text, got {value!r}")
        return value

    def identifier(self) -> str:
        value = self.text()
        if not IDENTIFIER.match(value):
            raise self.fail(f"{value!r} is not a lower-case identifier (letters, digits, _)")
        return value

    def column_of(self, columns: Mapping[str, object]) -> str:
        """An identifier naming one of `columns` (the resource's)."""
        name = self.identifier()
        if name not in columns:
            raise self.fail(f"{name!r} is not a column of this resource; its columns: {', '.join(columns)}")
        return name

    def number(self, low: float = 0, integer: bool = False) -> float:
        value = self.scalar()
        if isinstance(value, bool) or not isinstance(value, (int,) if integer else (int, float)) or value < low:
            raise self.fail(f"expected {'an integer' if integer else 'a number'} of at least {low}, got {value!r}")
        return value

    def flag(self) -> bool:
        value = self.scalar()
        if not isinstance(value, bool):
            raise self.fail(f"expected true or false, got {value!r}")
        return value

    def choice(self, enum: type[StrEnum]):
        value = self.scalar()
        try:
            return enum(value)
        except ValueError:
            raise self.fail(f"{value!r} is not one of {', '.join(e.value for e in enum)}") from None

    def text_or_env(self, secret: bool) -> Text:
        """A literal, or `{env: VARIABLE}`; a secret must be the latter."""
        if isinstance(self.node, yaml.MappingNode):
            variable = self.mapping(("env",))
            if "env" not in variable:
                raise self.fail("give {env: VARIABLE}")
            name = variable["env"].text()
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
                raise variable["env"].fail(f"{name!r} is not an environment variable name")
            return FromEnv(name, self.where)
        if secret:
            raise self.fail("a secret is never written in the file: give {env: VARIABLE} and set that variable")
        return self.text()


def _column_type(node: _Node) -> str:
    value = node.text().strip().lower()
    if value not in COLUMN_TYPES and not DECIMAL.match(value):
        raise node.fail(f"unknown type {value!r}; a type is one of {', '.join(COLUMN_TYPES)} or decimal(p,s)")
    return value


def _auth(node: _Node) -> Auth:
    fields = node.mapping(("type", *dict.fromkeys(n for spec in AUTH_FIELDS.values() for n, _, _ in spec)), ("type",))
    kind = fields.pop("type").choice(AuthType)
    allowed = {name: (secret, required) for name, secret, required in AUTH_FIELDS[kind]}
    values: dict[str, object] = {}
    for name, child in fields.items():
        if name not in allowed:
            raise child.fail(f"not a field of auth type {kind}; it takes {', '.join(allowed) or 'no field'}")
        if name == "scopes":
            values[name] = tuple(item.text() for item in child.sequence())
        elif name == "location":
            if (where := child.text()) not in ("header", "query"):
                raise child.fail(f"{where!r} is not header or query")
            values[name] = where
        else:
            values[name] = child.text_or_env(secret=allowed[name][0])
    if missing := [name for name, (_, required) in allowed.items() if required and name not in values]:
        raise node.fail(f"auth type {kind} needs field {missing[0]}")
    return Auth(kind, values)


def _paginator(node: _Node) -> Paginator:
    if isinstance(node.node, yaml.ScalarNode):
        kind = node.choice(PaginatorType)
        return Paginator(kind, dict(PAGINATOR_OPTIONS[kind]))
    fields = node.mapping(("type", *dict.fromkeys(o for opts in PAGINATOR_OPTIONS.values() for o in opts)), ("type",))
    kind = fields.pop("type").choice(PaginatorType)
    options = dict(PAGINATOR_OPTIONS[kind])
    for name, child in fields.items():
        if name not in options:
            raise child.fail(f"not an option of paginator {kind}; it takes {', '.join(options) or 'none'}")
        integer = name in ("base_page", "maximum_page", "maximum_offset")
        options[name] = child.number(0, integer=True) if integer else child.text()
    return Paginator(kind, options)


_CLIENT_FIELDS = tuple(
    "base_url auth paginator data_selector page_size timeout_seconds retries max_pages synthetic".split()
)


def _client(node: _Node) -> Client:
    fields = node.mapping(_CLIENT_FIELDS, ("base_url", "paginator"))
    selector = fields["data_selector"].scalar() if "data_selector" in fields else ""
    if not isinstance(selector, str) or not re.fullmatch(r"(\$|[A-Za-z_][\w-]*(\.[A-Za-z_][\w-]*)*)?", selector):
        raise fields["data_selector"].fail(
            f"{selector!r} is not a path of keys such as data or result.items ($: the body)"
        )
    size, size_param = None, None
    if "page_size" in fields:
        page = fields["page_size"].mapping(("param", "value"), ("value",))
        size = int(page["value"].number(1, integer=True))
        size_param = page["param"].text() if "param" in page else None
    retries = fields["retries"].mapping(("attempts", "max_delay_seconds")) if "retries" in fields else {}
    paginator = _paginator(fields["paginator"])
    if paginator.type == PaginatorType.OFFSET and size is None:
        raise fields["paginator"].fail("an offset paginator needs page_size: {value: N}, the limit of each page")
    if "synthetic" in fields and (name := fields["synthetic"].identifier()) not in SYNTHETIC_APIS:
        raise fields["synthetic"].fail(f"{name!r} is not a synthetic API; there are {', '.join(SYNTHETIC_APIS)}")
    return Client(
        base_url=fields["base_url"].text_or_env(secret=False),
        auth=_auth(fields["auth"]) if "auth" in fields else Auth(AuthType.NONE, {}),
        paginator=paginator,
        data_selector=tuple(k for k in selector.split(".") if k and k != "$"),
        page_size=size,
        page_size_param=size_param,
        timeout_seconds=float(fields["timeout_seconds"].number(0.1)) if "timeout_seconds" in fields else 30.0,
        attempts=int(retries["attempts"].number(1, integer=True)) if "attempts" in retries else 5,
        max_delay_seconds=float(retries["max_delay_seconds"].number(0)) if "max_delay_seconds" in retries else 30.0,
        max_pages=int(fields["max_pages"].number(1, integer=True)) if "max_pages" in fields else 10_000,
        synthetic=fields["synthetic"].identifier() if "synthetic" in fields else None,
    )


def _fields(node: _Node) -> tuple[Field, ...]:
    columns, seen = [], {}
    for item in node.sequence():
        fields = item.mapping(("name", "type", "doc", "path", "required", "pii"), ("name", "type"))
        name = fields["name"].identifier()
        if name in seen:
            raise fields["name"].fail(f"column {name} is declared twice (first at line {seen[name]})")
        seen[name] = item.node.start_mark.line + 1
        path = ()
        if "path" in fields:
            text = fields["path"].text()
            if not re.fullmatch(r"[A-Za-z_][\w-]*(\.[A-Za-z_][\w-]*)*", text):
                raise fields["path"].fail(f"{text!r} is not a dotted path of record fields such as address.city")
            path = tuple(text.split("."))
        column = Field(
            name=name,
            type=_column_type(fields["type"]),
            doc=fields["doc"].text() if "doc" in fields else "",
            path=path,
            required=fields["required"].flag() if "required" in fields else False,
            pii=fields["pii"].flag() if "pii" in fields else False,
        )
        columns.append(column)
    if not columns:
        raise node.fail("declare at least one column")
    return tuple(columns)


def _table_options(node: _Node, columns_of: dict | None = None) -> TableOptions:
    """A table's options; `columns_of`: the resource's columns, for a history, which may list its own."""
    fields = node.mapping(("table", "description", "properties", *(("columns",) if columns_of is not None else ())))
    properties = fields["properties"].strings() if "properties" in fields else {}
    columns = []
    for item in fields["columns"].sequence() if "columns" in fields else []:
        scalar = isinstance(item.node, yaml.ScalarNode)  # a column's name alone
        given = {"name": item} if scalar else item.mapping(("name", "type", "doc"), ("name",))
        column = HistoryColumn(
            given["name"].identifier(),
            _column_type(given["type"]) if "type" in given else None,
            given["doc"].text() if "doc" in given else None,
        )
        if column.name not in columns_of:
            raise item.fail(f"{column.name!r} is not a column of this resource; its columns: {', '.join(columns_of)}")
        columns.append(column)
    return TableOptions(
        table=fields["table"].identifier() if "table" in fields else None,
        description=fields["description"].text() if "description" in fields else None,
        properties=properties,
        columns=tuple(columns),
    )


_RESOURCE_FIELDS = tuple(
    "name endpoint kind mode columns key tracked sequence subject checks freshness_hours day_column description"
    " bronze quarantine history".split()
)


def _resource(node: _Node) -> Resource:
    fields = node.mapping(_RESOURCE_FIELDS, ("name", "endpoint", "kind", "columns"))
    endpoint = fields["endpoint"].mapping(("path", "params", "day"), ("path",))
    day_param, day_format = None, "%Y-%m-%d"
    if "day" in endpoint:
        day = endpoint["day"].mapping(("param", "format"), ("param",))
        day_param = day["param"].text()
        if "format" in day:
            day_format = day["format"].text()
            if dt.date(2025, 1, 31).strftime(day_format) == day_format:
                raise day["format"].fail(f"{day_format!r} formats no part of a date (use strftime codes: %Y-%m-%d)")
    params = endpoint["params"].strings() if "params" in endpoint else {}
    columns = _fields(fields["columns"])
    names = {c.name: c for c in columns}
    kind = fields["kind"].choice(ResourceKind)

    def column(field: str, types: tuple[str, ...] = ()) -> str | None:
        if field not in fields:
            return None
        name = fields[field].column_of(names)
        if types and names[name].type not in types:
            raise fields[field].fail(f"column {name} is {names[name].type}; {field} must be {' or '.join(types)}")
        return name

    key, subject = column("key"), column("subject", ("bigint", "int"))
    sequence, day_column = column("sequence", ("timestamp",)), column("day_column", ("date",))
    tracked = tuple(item.column_of(names) for item in fields["tracked"].sequence()) if "tracked" in fields else ()
    if kind == ResourceKind.EVENTS:
        if day_column is None:
            raise node.fail("an events resource needs day_column: the date column its days are partitioned by")
        for entity_only in ("mode", "tracked", "sequence", "history"):
            if entity_only in fields:
                raise fields[entity_only].fail("only an entities resource has this field")
    else:
        if key is None:
            raise node.fail("an entities resource needs key: the column identifying an entity")
        if day_column is not None:
            raise fields["day_column"].fail("an entities resource is partitioned by snapshot day; it has no day_column")
        tracked = tracked or tuple(n for n in names if n not in (key, sequence))
        if key in tracked or (sequence and sequence in tracked):
            raise fields["tracked"].fail("the key and the sequence are not tracked columns")
    if key and not names[key].required:
        raise fields["key"].fail(f"key column {key} must be required: true (a record without it cannot be placed)")
    if (pii := [c.name for c in columns if c.pii]) and subject is None:
        raise node.fail(f"columns {', '.join(pii)} hold personal data: name the subject column to erase by")
    checks = []
    for item in fields["checks"].sequence() if "checks" in fields else []:
        check = item.mapping(("description", "sql"), ("description", "sql"))
        checks.append(RecordCheck(check["description"].text(), check["sql"].text()))
    history = _table_options(fields["history"], names) if "history" in fields else TableOptions()
    if listed := [c.name for c in history.columns]:
        if missing := [c for c in (key, sequence) if c and c not in listed]:
            raise fields["history"].fail(f"history columns must include {missing[0]} (the key, or the sequence)")
    return Resource(
        name=fields["name"].identifier(),
        path=endpoint["path"].text(),
        kind=kind,
        columns=columns,
        params=params,
        day_param=day_param,
        day_format=day_format,
        day_column=day_column,
        key=key,
        mode=fields["mode"].choice(EntityMode) if "mode" in fields else EntityMode.FULL,
        tracked=tracked,
        sequence=sequence,
        subject=subject,
        checks=tuple(checks),
        freshness_hours=float(fields["freshness_hours"].number(1 / 60)) if "freshness_hours" in fields else 36.0,
        description=fields["description"].text() if "description" in fields else None,
        bronze=_table_options(fields["bronze"]) if "bronze" in fields else TableOptions(),
        quarantine=_table_options(fields["quarantine"]) if "quarantine" in fields else TableOptions(),
        history=history,
        where=node.where,
    )


def parse_attributes(node: yaml.Node, file: str, field: str = "attributes") -> SourceDeclaration:
    """The declaration in `node` (a component's `attributes`)."""
    top = _Node(node, file, field)
    fields = top.mapping(("name", "description", "client", "resources"), ("name", "client", "resources"))
    resources, where = [], {}
    for item in fields["resources"].sequence():
        resource = _resource(item)
        if resource.name in where:
            raise item.fail(f"resource {resource.name} is declared twice (first at line {where[resource.name]})")
        where[resource.name] = item.node.start_mark.line + 1
        resources.append(resource)
    if not resources:
        raise fields["resources"].fail("declare at least one resource")
    return SourceDeclaration(
        name=fields["name"].identifier(),
        file=file,
        client=_client(fields["client"]),
        resources=tuple(resources),
        description=fields["description"].text() if "description" in fields else "",
    )


COMPONENT_TYPE = "etr_assets.defs.api_source.ApiSource"


def load_declaration(path: str | Path | Traversable) -> SourceDeclaration:
    """The source declared in a component file (`type: ...ApiSource`, `attributes: ...`)."""
    file = str(path)
    try:
        text = (path if hasattr(path, "read_text") else Path(path)).read_text(encoding="utf-8")
        document = yaml.compose(text, Loader=_LOADER)
    except yaml.YAMLError as bad:
        line = f"{mark.line + 1}" if (mark := getattr(bad, "problem_mark", None)) else "?"
        raise DeclarationError(f"{file}:{line}: not valid YAML: {getattr(bad, 'problem', bad)}") from None
    if document is None:
        raise DeclarationError(f"{file}:1: the file is empty")
    allowed = ("type", "attributes", "requirements", "post_processing", "template_vars_module")
    top = _Node(document, file, "").mapping(allowed)
    if "attributes" not in top:
        raise DeclarationError(f"{file}:1: missing attributes: the source's declaration")
    return parse_attributes(top["attributes"].node, file)


def declaration_files(folder: Path | Traversable) -> list[Path | Traversable]:
    """The `<name>/defs.yaml` component files under `folder` whose type is a declared source, by folder name (a
    Traversable too: the package's own folder may be inside a zip, as a Glue or EMR job ships it)."""
    found = []
    for child in sorted(folder.iterdir(), key=lambda c: c.name):
        component = child / "defs.yaml"
        if child.is_dir() and component.is_file():
            if re.search(rf"^type:\s*{re.escape(COMPONENT_TYPE)}\s*$", component.read_text("utf-8"), re.MULTILINE):
                found.append(component)
    return found
