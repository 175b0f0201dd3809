"""Every error this package raises on purpose, in one place (as pyiceberg keeps its exceptions): each derives from
`EtrError` and keeps a standard base (ValueError for bad input, RuntimeError for a failure on the way), so callers can
catch either. This module imports nothing, so every layer may use it."""


class EtrError(Exception):
    """Every project error says what was wrong and where, in one line."""


# --- the lake: loads, specs, evolution, sessions, commits, audits, time travel, erasure ---------------------------


class BadInputError(EtrError, ValueError):
    """Input that cannot be loaded as declared; the message names the batch, the file and the problem."""


class ErasureError(EtrError, ValueError):
    """A request that cannot be carried out as given; the message names the value and where it came from."""


class UnsafeEvolution(EtrError, ValueError):
    """The spec asks for a change that would lose or reinterpret data; nothing was altered."""


class ResourceExhausted(EtrError, RuntimeError):
    """The Spark driver ran out of heap, or a disk it writes to filled up; one line naming what to raise."""


class MetadataUnreadable(EtrError, RuntimeError):
    """The table exists but its current metadata cannot be read; the message says which file and why."""


class CommitConflictError(EtrError, RuntimeError):
    """Every attempt lost to a concurrent writer."""


class JarNotFound(EtrError, RuntimeError):
    """A jar the profile needs is missing; the message says how to get it."""


class NotAnIcebergSession(EtrError, RuntimeError):
    """A live Spark session made without the Iceberg SQL extensions; the message says how to make one."""


class SpecError(EtrError, ValueError):
    """A table spec is malformed; the message names the table and the field."""


class NoSuchSnapshot(EtrError, LookupError):
    """The table has no snapshot matching the request; the message names the table and what was asked."""


class NotAnAncestor(EtrError, ValueError):
    """A rollback target that is not in the current snapshot's history; the message names both snapshots."""


class AuditFailed(EtrError, RuntimeError):
    """Blocking checks failed on the audit branch; main was not touched."""

    def __init__(self, message: str, branch: str, results: list):  # the CheckOutcomes of the audit
        super().__init__(message)
        self.branch, self.results = branch, results


# --- settings and run requests -------------------------------------------------------------------------------


class RunRequestError(EtrError, ValueError):
    """A day or range that etr_pipeline has no partitions for; the message is the one line to show."""


class SettingsError(EtrError, ValueError):
    """A setting is missing or malformed; the message names the variable."""


# --- sources: declarations, their APIs, the raw zone ----------------------------------------------------------


class DeclarationError(EtrError, ValueError):
    """A mistake in a source declaration: `file:line: field: what is wrong`."""


class DraftError(EtrError, ValueError):
    """The sample cannot be drafted from: one line naming the file."""


class ApiError(EtrError, RuntimeError):
    """The API refused or failed; the message names the endpoint, the status and the attempts made."""

    def __init__(self, message: str, *, endpoint: str, status: int | None = None):
        super().__init__(message)
        self.endpoint, self.status = endpoint, status


class SourceConfigError(EtrError, ValueError):
    """A declared source cannot be connected as configured: `file:line: field: what is missing`."""


class RawZoneError(EtrError, RuntimeError):
    """A raw-zone read or write failed; the message names the batch or file."""
