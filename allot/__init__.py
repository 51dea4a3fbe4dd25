"""The ``allot`` command: one entry point for the simulator, the audit, explain and the demo."""
