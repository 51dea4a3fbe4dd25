"""The live dashboard: a static page (vanilla JS, SVG and canvas; no build step) over the state API.

``server.route(path)`` serves ``/dashboard/`` and its files from ``static/``;
the worker's HTTP server (``streams.metrics.MetricsServer``) mounts it beside
``/api/...``, so ``allot up`` prints its address. The page reads
``/api/queue``, ``/api/usage``, ``/api/gantt``, ``/api/hosts`` and
``/api/explain/ID`` (``streams.state_api``).
"""
