"""Serve the dashboard's static files (``/dashboard/`` -> ``static/index.html``)."""

from __future__ import annotations

from pathlib import Path

STATIC = Path(__file__).resolve().parent / "static"
TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
         ".css": "text/css; charset=utf-8"}


def route(path: str) -> tuple[int, str, bytes] | None:
    """The answer for ``path`` if it is the dashboard's, else None."""
    if path in ("/", "/dashboard"):
        return 302, "text/plain", b"/dashboard/\n"
    if not path.startswith("/dashboard/"):
        return None
    name = path[len("/dashboard/"):] or "index.html"
    if "/" in name or name.startswith("."):
        return 404, "text/plain", b"not found\n"
    f = STATIC / name
    if not f.is_file() or f.suffix not in TYPES:
        return 404, "text/plain", b"not found\n"
    return 200, TYPES[f.suffix], f.read_bytes()
