"""The live stream processors (Faust on Kafka): not built yet.

This folder will hold the thin edges that run the pure core against Kafka:
decode records from the inbox topic (malformed bytes to a dead-letter topic),
``Engine.process`` each input, publish the input and its derived events to the
journal (the log of record), tick every second, and rebuild state on restart by
folding the journal (derived event ids are deterministic, so a cycle cut short
by a crash is re-run and deduplicated). The plan is in docs/architecture.md;
nothing here is imported by the rest of allot yet.
"""
