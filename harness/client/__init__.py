"""The measuring client: replays a workload plan against a backend and times every token."""
