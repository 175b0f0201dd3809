"""The tests' client of the BNPL source (the synthetic API or a scripted stand-in), from its declaration."""

from __future__ import annotations

import functools
from pathlib import Path

import etr_assets
from etr_assets.sources.declaration import SourceDeclaration, load_declaration
from etr_assets.sources.http_fetch import SourceClient

BNPL_DEFS = Path(etr_assets.__file__).parent / "defs/sources/bnpl/defs.yaml"


@functools.cache
def bnpl_declaration() -> SourceDeclaration:
    return load_declaration(BNPL_DEFS)


def bnpl_client(url: str, token: str, page_size: int = 100, **kw) -> SourceClient:
    """The declared BNPL source's client at `url` with `token`; `kw`: SourceClient's overrides (attempts, backoff,
    max_delay, timeout, max_pages)."""
    return SourceClient(bnpl_declaration(), url, {"token": token}, page_size=page_size, **kw)
