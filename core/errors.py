"""Errors the harness reports to the user as one line, without a traceback."""


class HarnessError(Exception):
    """A problem the user can fix; the CLI prints ``error: <message>`` and exits non-zero."""


class DiskFull(HarnessError):
    """The run folder's disk filled: what was written stays readable, nothing more can be."""


class ConfigError(HarnessError):
    """The configuration is invalid; raised before any model loads."""


class BackendUnavailable(HarnessError):
    """A backend's engine is not installed; the message names the pip extra."""


class ModelError(HarnessError):
    """A model could not be found, fetched or converted."""


class EngineFailed(HarnessError):
    """The engine stopped serving during the run (e.g. its server exited); results so far are kept."""
