"""The host monitor: health checks of one host's GPUs, turned into ``host.faulted`` / ``host.repaired``.

``allot monitor --host NAME`` runs a health check every interval
(``monitor.checks``: the default queries ``nvidia-smi``; any object with the
``Check`` protocol plugs in), feeds each verdict to a hysteresis state machine
(``monitor.hysteresis``: pure, time enters as data) and publishes the
transitions it decides on the inbox (``monitor.runner``), signed when a key is
given. docs/monitor.md describes the checks, the thresholds and the flags.
"""
