"""The published JSON Schema of every event (docs/events.schema.json).

Run ``python -m events.schema`` to regenerate; a test fails when the published
file is stale, so the contract in docs/ is always the one the code speaks.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import msgspec

from events.union import AnyEvent

SCHEMA_PATH = Path(__file__).resolve().parent.parent / "docs" / "events.schema.json"


def event_schema() -> dict[str, Any]:
    """The JSON Schema (2020-12) of the event union, as a dict."""
    schema = msgspec.json.schema(AnyEvent)
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://allot.dev/schemas/events.schema.json",
        "title": "allot event",
        "description": (
            "Every event on the allot log. Discriminated by `type`; "
            "`v` is the schema version of that type."
        ),
        **schema,
    }


def render() -> str:
    """The schema file's exact text."""
    return json.dumps(event_schema(), indent=2, sort_keys=True) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Write (or with --check, verify) docs/events.schema.json."""
    args = sys.argv[1:] if argv is None else argv
    text = render()
    if "--check" in args:
        current = SCHEMA_PATH.read_text() if SCHEMA_PATH.exists() else ""
        if current != text:
            print(f"{SCHEMA_PATH} is stale; run python -m events.schema", file=sys.stderr)
            return 1
        return 0
    SCHEMA_PATH.write_text(text)
    print(f"wrote {SCHEMA_PATH}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
