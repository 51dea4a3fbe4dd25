"""The live pipeline on Kafka: the only package that imports aiokafka, Faust or confluent-kafka.

The scheduling worker (``streams.worker``, ``allot worker``) consumes the inbox,
runs the pure core through the processor (``streams.processor``) and appends
every input and decision to the journal, the log of record; the journal is its
only state (claims fence former owners, snapshots bound restart cost). The
records on every topic are the contract in ``streams.records``. docs/live.md
describes the pipeline, its settings and its crash-safety argument.
"""
