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


class BackendError(R3ForgeError, RuntimeError):
    """A generation backend failed: the message names the backend, the endpoint and what to do."""


class RequestFailed(BackendError):
    """One request of a batch failed after its retries; `reason` is a short code: `bad_response` (truncated
    or malformed answer), `timeout`, `connection`, `rate_limited` (HTTP 429) or `http_<status>`."""

    def __init__(self, reason: str, message: str):
        self.reason = reason
        super().__init__(message)


class PartialFailure(BackendError):
    """Some requests of a `generate` call failed after their retries and the others did not: `results[i]` is
    request i's result, or its `RequestFailed`. A caller that can use the others (the synthesis engine)
    catches this; any other caller fails as on any `BackendError`."""

    def __init__(self, results: list):
        self.results = results
        failed = [r for r in results if isinstance(r, RequestFailed)]
        reasons: dict[str, int] = {}
        for r in failed:
            reasons[r.reason] = reasons.get(r.reason, 0) + 1
        first = f"; the first: {failed[0]}" if failed else ""
        super().__init__(
            f"{len(failed)} of {len(results)} requests failed after their retries {reasons}{first}"
        )
