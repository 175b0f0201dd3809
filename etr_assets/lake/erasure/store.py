"""Erasure requests waiting for the `gdpr_erasure` job: one JSON file per reference in the raw zone's storage, never
in Dagster; once proven it keeps the keyed hashes only, so a reference is not carried out twice."""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import json
from urllib.parse import quote

from etr_assets.errors import ErasureError
from etr_assets.lake.erasure.request import ErasureRequest, validate_customer_ids, validate_reference
from etr_assets.sources.raw_zone import RawStorage

REQUESTS_FOLDER = "_gdpr_requests"
PENDING, DONE = "pending", "done"


def request_key(reference: str) -> str:
    """The request's file under the raw zone: its reference, percent-encoded (a hash if that is too long)."""
    name = quote(validate_reference(reference), safe="-_.")
    if len(name) > 180 or name.startswith("."):
        name = "sha256-" + hashlib.sha256(reference.strip().encode()).hexdigest()
    return f"{REQUESTS_FOLDER}/{name}.json"


def launch_hint(reference: str) -> str:
    config = {"ops": {"gdpr_request": {"config": {"request_reference": reference}}}}
    return (
        "launch the job `gdpr_erasure` with only the reference: in the UI, Jobs -> gdpr_erasure -> Launchpad, "
        f"or `dg launch --job gdpr_erasure --config-json '{json.dumps(config)}'`"
    )


@dataclasses.dataclass(frozen=True)
class RecordedRequest:
    reference: str
    customers: int
    uri: str


class RequestStore:
    """Pending erasure requests, one JSON file per reference, in the raw zone's storage (local folder or S3)."""

    def __init__(self, storage: RawStorage):
        self.storage = storage

    def uri(self, reference: str) -> str:
        return self.storage.uri(request_key(reference))

    def _read(self, reference: str) -> dict | None:
        key = request_key(reference)
        if not self.storage.exists(key):
            return None
        try:
            return json.loads(self.storage.read_bytes(key))
        except ValueError:
            raise ErasureError(f"erasure request {reference!r}: {self.uri(reference)} is not valid JSON") from None

    @staticmethod
    def _refuse_done(reference: str, stored: dict) -> None:
        if stored.get("status") == DONE:
            raise ErasureError(
                f"erasure request {reference!r} was already carried out (run {stored.get('run_id', '?')}, "
                f"{stored.get('done_at', '?')}); its ids are no longer kept: record a new reference to erase again"
            )

    def record(self, reference: str, customer_ids, where: str = "ids") -> RecordedRequest:
        """Write a pending request; refuse bad ids and a reference already recorded or carried out."""
        reference = validate_reference(reference)
        ids = validate_customer_ids(customer_ids, where)
        if (stored := self._read(reference)) is not None:
            self._refuse_done(reference, stored)
            raise ErasureError(
                f"erasure request {reference!r} is already recorded and waiting ({self.uri(reference)}): "
                + launch_hint(reference)
            )
        body = {
            "reference": reference,
            "status": PENDING,
            "recorded_at": dt.datetime.now(dt.UTC).isoformat(),
            "customer_ids": list(ids),
        }
        self.storage.write_bytes(request_key(reference), json.dumps(body).encode())
        return RecordedRequest(reference, len(ids), self.uri(reference))

    def pending_ids(self, reference: str) -> tuple[int, ...]:
        """The ids of a pending request. Errors name the reference, never an id."""
        reference = validate_reference(reference)
        if (stored := self._read(reference)) is None:
            raise ErasureError(
                f"no erasure request {reference!r} in {self.uri(reference)}: record it first with "
                f"`etr erase --reference {reference} ID...` (the ids never go into the run's config)"
            )
        self._refuse_done(reference, stored)
        try:
            return validate_customer_ids(stored.get("customer_ids"))
        except ErasureError:
            raise ErasureError(
                f"erasure request {reference!r} ({self.uri(reference)}) holds no valid list of customer ids: "
                "record it again with `etr erase`"
            ) from None

    def close(self, request: ErasureRequest, run_id: str = "") -> None:
        """After the proof: rewrite the request with the keyed hashes only, so the ids are kept nowhere."""
        body = {
            "reference": request.request_id,
            "status": DONE,
            "done_at": dt.datetime.now(dt.UTC).isoformat(),
            "run_id": run_id or request.run_id,
            "customers": len(request.customer_ids),
            "subject_hashes": sorted(request.hash_of(i) for i in request.customer_ids),
        }
        self.storage.write_bytes(request_key(request.request_id), json.dumps(body).encode())


def open_request_store(raw_root: str, *, s3_endpoint: str = "", region: str = "") -> RequestStore:
    """The request store of the raw zone at `raw_root` (a folder or s3://bucket/prefix)."""
    from etr_assets.sources.s3_storage import open_raw_zone

    return RequestStore(open_raw_zone(raw_root, s3_endpoint=s3_endpoint, region=region).storage)
