"""Compile the core with mypyc into ``build/native/`` (``make native``; ``make`` targets call it).

Usage: python -m native.build [--out DIR] [--check] [--json] [--quiet]

The modules of ``native.MODULES`` are type-checked and compiled to C by mypyc,
then built by the C compiler into extensions under DIR, beside a manifest that
records the sha256 of every source they were checked against, the Python they
were built for and the mypy release. The build goes to a scratch directory
first and replaces DIR only when it is complete, so a failed or interrupted
build leaves the previous one (or none) in place, never half of one.

``--check`` builds nothing: exit 0 when DIR holds a current build for these
sources and this Python, else 1 with the reason. A build needs mypy (the
``native`` extra, in ``dev`` too), a C compiler and the Python headers; where
it fails, everything still runs on the pure-Python core.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import native
from native import (
    FORMAT,
    GROUP,
    HASHED_PACKAGES,
    MANIFEST,
    MODULES,
    ROOT,
    check,
    platform_tag,
    source_hashes,
)


class BuildError(RuntimeError):
    """mypyc or the C compiler refused; the message carries their output."""


# ``make test`` builds the compiled core beside the tests instead of before them (the
# build is mostly the C compiler, which then fills the moments the tests wait on brokers
# and subprocesses). While it runs, this file lies beside the build directory;
# the tests that run the compiled core wait for it to go (``wait_for_build``).
BUILDING_SUFFIX = ".building"


class BuildStillRunning(BuildError):
    """A build announced by its marker file did not end in time."""


def building_marker(out: Path) -> Path:
    """The file that says a build of ``out`` is under way (``make test`` writes and removes it)."""
    return out.with_name(out.name + BUILDING_SUFFIX)


def wait_for_build(out: Path, timeout_s: float = 600.0, poll_s: float = 0.2,
                   stale_s: float = 900.0) -> float:
    """Return once no build of ``out`` is under way; the seconds waited.

    A marker older than ``stale_s`` (a build takes 20 s alone, up to about 3 minutes
    beside the whole suite) is one a killed ``make`` left behind and is ignored.
    Raises BuildStillRunning when a fresh one outlives ``timeout_s``.
    """
    marker = building_marker(out)
    start = time.monotonic()
    while True:
        try:
            age = time.time() - marker.stat().st_mtime
        except FileNotFoundError:
            return time.monotonic() - start
        if age > stale_s:
            return time.monotonic() - start
        if time.monotonic() - start > timeout_s:
            raise BuildStillRunning(f"{marker} still there after {timeout_s:.0f} s")
        time.sleep(poll_s)


def _compile_jobs() -> int:
    """C compiler processes to run at once: one per core this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def _parallel(compile_serially: Callable[..., list[str]], jobs: int) -> Callable[..., list[str]]:
    """A ``CCompiler.compile`` that runs one compiler process per source file, ``jobs`` at once.

    distutils compiles the sources of one extension one after another, and the
    core's library is one extension of about forty C files (mypyc's
    ``multi_file``): on two cores that leaves one idle for most of the build.
    Each file still goes through the compiler's own ``compile`` (same flags,
    same object names); the object directories are made first, because
    distutils' ``mkpath`` is not safe from several threads.
    """
    def compile(sources: list[str], output_dir: str | None = None, *args: Any, **kwargs: Any) -> list[str]:
        if jobs < 2 or len(sources) < 2:
            return compile_serially(sources, output_dir, *args, **kwargs)
        owner: Any = getattr(compile_serially, "__self__", None)
        if owner is not None:
            for obj in owner.object_filenames(sources, output_dir=output_dir or ""):
                Path(obj).parent.mkdir(parents=True, exist_ok=True)
        # Largest first, so the longest compile does not start last.
        order = sorted(sources, key=lambda s: -Path(s).stat().st_size)
        with ThreadPoolExecutor(jobs) as pool:
            done = dict(zip(order, pool.map(
                lambda s: compile_serially([s], output_dir, *args, **kwargs), order), strict=True))
        return [obj for s in sources for obj in done[s]]
    return compile


def _build_ext_class(jobs: int) -> type:
    """setuptools' build_ext, compiling the files of each extension in parallel."""
    from setuptools.command.build_ext import build_ext

    class ParallelBuildExt(build_ext):  # type: ignore[misc]
        def build_extension(self, ext: Any) -> None:
            serial = self.compiler.compile
            self.compiler.compile = _parallel(serial, jobs)
            try:
                super().build_extension(ext)
            finally:
                self.compiler.compile = serial

    return ParallelBuildExt


def _library_file(directory: Path) -> str:
    found = sorted(p.name for p in directory.glob(f"{GROUP}__mypyc*"))
    if len(found) != 1:
        raise BuildError(f"expected one {GROUP}__mypyc library in {directory}, found {found}")
    return found[0]


def build(out: Path, quiet: bool = False) -> dict[str, object]:
    """Compile ``MODULES`` into ``out`` (replacing what is there); return the manifest written."""
    try:
        import mypy.version
        from mypyc.build import mypycify
        from setuptools import Distribution
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise BuildError(f"the native build needs mypy and setuptools ({e}); "
                         "pip install -e '.[native]'") from e

    def say(msg: str) -> None:
        if not quiet:
            print(f"native: {msg}", file=sys.stderr, flush=True)

    t0 = time.perf_counter()
    out.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f"{out.name}.tmp-", dir=out.parent))
    cwd = os.getcwd()
    log = io.StringIO()
    try:
        # mypy names modules by their path from the directory it runs in, and reads
        # every module there: a copy of the hashed packages alone, so an installed
        # tree (site-packages, in the container image) builds like a checkout.
        # (``native`` itself too: the core's packages import it.)
        src = scratch / "src"
        for package in (*HASHED_PACKAGES, "native"):
            for path in (ROOT / package).rglob("*.py"):
                target = src / path.relative_to(ROOT)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(path, target)
        built = source_hashes(src)
        os.chdir(src)
        say(f"type-checking and translating {len(MODULES)} modules to C (mypyc {mypy.version.__version__})")
        with contextlib.redirect_stdout(log):
            try:
                # multi_file: one C file per module instead of one of 10 MB, so the
                # compiler can run on every core (and gcc is faster on smaller files).
                extensions = mypycify(list(MODULES), opt_level="3", group_name=GROUP,
                                      target_dir=str(scratch / "c"), multi_file=True)
            except SystemExit as e:  # mypyc exits on a type error
                raise BuildError(f"mypyc refused the sources:\n{log.getvalue()}") from e
        jobs = _compile_jobs()
        say(f"compiling {len(extensions)} extensions with the C compiler, {jobs} at once "
            "(about half a minute)")
        dist = Distribution({"name": "allot-core-native", "ext_modules": extensions,
                             "cmdclass": {"build_ext": _build_ext_class(jobs)}})
        cmd = dist.get_command_obj("build_ext")
        cmd.parallel = jobs  # type: ignore[attr-defined]  # the small extensions, side by side
        cmd.build_lib = str(scratch / "lib")  # type: ignore[attr-defined]
        cmd.build_temp = str(scratch / "obj")  # type: ignore[attr-defined]
        cmd.inplace = False  # type: ignore[attr-defined]
        with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
            try:
                dist.run_command("build_ext")
            except (Exception, SystemExit) as e:
                raise BuildError(f"the C build failed: {e}\n{log.getvalue()[-4000:]}") from e
        os.chdir(cwd)
        lib = scratch / "lib"
        if source_hashes() != built:
            raise BuildError("sources changed during the build; run it again")
        manifest: dict[str, object] = {
            "format": FORMAT,
            "platform": platform_tag(),
            "mypy": mypy.version.__version__,
            "library": _library_file(lib),
            "modules": list(MODULES),
            "sources": built,
            "build_seconds": round(time.perf_counter() - t0, 1),
        }
        (lib / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
        old = out.with_name(out.name + ".old")
        shutil.rmtree(old, ignore_errors=True)
        if out.exists():
            out.rename(old)
        lib.rename(out)
        shutil.rmtree(old, ignore_errors=True)
    finally:
        os.chdir(cwd)
        shutil.rmtree(scratch, ignore_errors=True)
    say(f"built {out} in {manifest['build_seconds']} s")
    return manifest


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m native.build", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=None,
                    help=f"build directory (default: ${native.ENV_DIR} or {native.DEFAULT_DIR})")
    ap.add_argument("--check", action="store_true",
                    help="build nothing; exit 0 if the build is current, 1 (with the reason) if not")
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    ap.add_argument("--quiet", action="store_true", help="no progress lines")
    args = ap.parse_args(argv)
    out = (args.out or native.build_dir()).resolve()
    if args.check:
        problem = check(out)
        if args.json:
            print(json.dumps({"directory": str(out), "current": problem is None, "reason": problem}))
        elif problem:
            print(f"native: {problem}", file=sys.stderr)
        else:
            print(f"native: {out} is current")
        return 0 if problem is None else 1
    try:
        manifest = build(out, quiet=args.quiet or args.json)
    except BuildError as e:
        if args.json:
            print(json.dumps({"directory": str(out), "built": False, "error": str(e)}))
        else:
            print(f"native: build failed: {e}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps({"directory": str(out), "built": True, **manifest}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
