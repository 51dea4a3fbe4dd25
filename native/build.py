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
from pathlib import Path

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
                extensions = mypycify(list(MODULES), opt_level="3", group_name=GROUP,
                                      target_dir=str(scratch / "c"))
            except SystemExit as e:  # mypyc exits on a type error
                raise BuildError(f"mypyc refused the sources:\n{log.getvalue()}") from e
        say(f"compiling {len(extensions)} extensions with the C compiler (about a minute)")
        dist = Distribution({"name": "allot-core-native", "ext_modules": extensions})
        cmd = dist.get_command_obj("build_ext")
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
