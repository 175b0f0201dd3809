"""Compiles the local profile's warehouse file system (java/PosixLocalFileSystem.java: no `chmod` process per file,
docs/stack.md) with the JDK's javac into a jar named by the source's hash; `./dev setup` runs it. Without it, sessions
keep Hadoop's LocalFileSystem. (`compile_jar` also builds the s3 profile's classes: lake/s3a_io.py.)

    python -m etr_assets.lake.local_fs   # compile it now (nothing to do when the jar is there)
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from etr_assets.lake.session import LOCAL_FS_SOURCE, local_fs_jar, local_fs_jar_path


def build() -> Path:
    """Compile the class against pyspark's Hadoop jars into `local_fs_jar_path()`."""
    return compile_jar([LOCAL_FS_SOURCE], [], local_fs_jar_path())


def compile_jar(sources: list[Path], classpath: list[str], jar: Path) -> Path:
    """`sources` compiled with javac against pyspark's jars and `classpath` into `jar` (written whole, then renamed);
    older jars of its name before the hash removed."""
    import pyspark

    javac = shutil.which("javac")
    if javac is None:
        raise FileNotFoundError("javac (a JDK 17) is needed to compile " + ", ".join(s.name for s in sources))
    jars = os.pathsep.join([str(Path(pyspark.__file__).parent / "jars" / "*"), *classpath])
    with tempfile.TemporaryDirectory(prefix="etr-javac-") as scratch:
        out = Path(scratch) / "classes"
        done = subprocess.run(
            [javac, "--release", "17", "-cp", jars, "-d", str(out), *map(str, sources)],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(f"javac failed on {', '.join(map(str, sources))}: {done.stderr.strip()[-2000:]}")
        jar.parent.mkdir(parents=True, exist_ok=True)
        partial = jar.with_name(f".{jar.name}.{Path(scratch).name}")
        with zipfile.ZipFile(partial, "w") as archive:
            for compiled in sorted(out.rglob("*.class")):
                archive.write(compiled, compiled.relative_to(out).as_posix())
        partial.replace(jar)
    for stale in jar.parent.glob(jar.name.rsplit("-", 1)[0] + "-*.jar"):
        if stale != jar:
            stale.unlink(missing_ok=True)
    return jar


def build_once(built: Path | None, build_jar, what: str) -> int:
    """A setup step's exit status: 0 when the jar is `built` or compiled now by `build_jar`; 1, saying why, if not."""
    if built is None:
        try:
            print(f"==> compiled {build_jar()}", file=sys.stderr)
        except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
            print(f"{what} not built ({exc})", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(build_once(local_fs_jar(), build, "the local file system without chmod processes was"))
