"""Worker wiring: settings from the environment, the Temporal connection, the worker."""
