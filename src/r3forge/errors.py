"""Exceptions that name what is wrong and where (file:line, field, config key)."""


class R3ForgeError(Exception):
    """Base class of every error r3forge raises on purpose."""


class ConfigError(R3ForgeError, ValueError):
    """A config file or CLI flag is invalid: the message names the file:line and key."""


class DataFormatError(R3ForgeError, ValueError):
    """An input data file is malformed: the message names the file, the line (or record) and the field."""

    def __init__(self, path: str, line: int | None, message: str):
        self.path, self.line = str(path), line
        where = f"{path}:{line}" if line is not None else str(path)
        super().__init__(f"{where}: {message}")


class ModelPrepareError(R3ForgeError, RuntimeError):
    """An embedded model could not be materialized or verified."""
