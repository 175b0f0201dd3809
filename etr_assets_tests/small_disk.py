"""A real disk that fills: a small tmpfs mounted on a test's folder (the suite runs as root, as CI does).

Filling it with a ballast file makes every later write there fail with ENOSPC, in Python and in the JVM alike, the
way a full disk does; deleting the ballast frees the space. Where mounting is not permitted the test is skipped,
saying why.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

BALLAST = ".ballast"  # a hidden name: no raw-zone or catalog listing takes it for a batch or a namespace


class SmallDisk:
    def __init__(self, folder: Path):
        self.folder = folder

    @property
    def free(self) -> int:
        stat = os.statvfs(self.folder)
        return stat.f_bavail * stat.f_frsize

    def fill(self, leave: int = 0) -> None:
        """Take all the free space but `leave` bytes (rounded by the filesystem to its pages)."""
        with open(self.folder / BALLAST, "ab") as ballast:
            os.posix_fallocate(ballast.fileno(), ballast.seek(0, os.SEEK_END), max(self.free - leave, 0))

    def free_space(self) -> None:
        (self.folder / BALLAST).unlink(missing_ok=True)


@contextlib.contextmanager
def small_disk(folder: Path, size: str = "64m") -> Iterator[SmallDisk]:
    """A tmpfs of `size` on `folder` (created, and empty) for the duration of the block."""
    folder.mkdir(parents=True, exist_ok=True)
    if shutil.which("mount") is None:
        pytest.skip("no mount command here: a full disk is simulated with a small tmpfs, which needs one")
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)], capture_output=True, text=True
    )
    if mounted.returncode != 0:
        why = mounted.stderr.strip() or f"exit code {mounted.returncode}"
        pytest.skip(
            f"cannot mount a small tmpfs to fill ({why}): needs root with CAP_SYS_ADMIN, as the suite has in CI"
        )
    try:
        yield SmallDisk(folder)
    finally:
        if subprocess.run(["umount", str(folder)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(folder)], capture_output=True)  # still busy: detach it now
