"""The one retry policy of r3forge's HTTP clients (the OpenAI-compatible backend and the retriever client):
which answers are retried, how long to wait, and a server's `Retry-After`.

    backoff = Backoff(max_retries=5, base_s=0.5, max_s=10.0)
    for attempt in range(backoff.max_retries + 1):
        ...                                   # call; return on success; on a retryable failure:
        if attempt < backoff.max_retries:
            time.sleep(backoff.delay(attempt, retry_after(response.headers)))

Exponential backoff with "equal jitter" (half the step fixed, half random: synchronized clients spread out),
capped; a server's Retry-After (capped) replaces it.
"""

from __future__ import annotations

import email.utils
import random
import time
from collections.abc import Mapping
from dataclasses import dataclass, field


def retryable_status(status: int) -> bool:
    """408 / 409 / 429 and 5xx are worth another try; any other 4xx is the caller's mistake.

    >>> [s for s in (400, 404, 408, 409, 429, 500, 503) if retryable_status(s)]
    [408, 409, 429, 500, 503]
    """
    return status in (408, 409, 429) or status >= 500


def retry_after(headers: Mapping[str, str]) -> float | None:
    """Seconds from `retry-after-ms` or `retry-after` (seconds or an HTTP date); None when absent or unreadable."""
    try:
        if (ms := headers.get("retry-after-ms")) is not None:
            return max(0.0, float(ms) / 1000)
        if (value := headers.get("retry-after")) is None:
            return None
        try:
            return max(0.0, float(value))
        except ValueError:
            when = email.utils.parsedate_to_datetime(value)
            return max(0.0, when.timestamp() - time.time())
    except (TypeError, ValueError):
        return None


@dataclass
class Backoff:
    """How many retries and how long before each."""

    max_retries: int
    base_s: float = 0.5  # the first step; doubled each retry
    max_s: float = 30.0  # cap of the step
    max_retry_after_s: float = 60.0  # cap on a server's Retry-After
    seed: int | None = None  # of the jitter (None: unseeded)
    _rng: random.Random = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if self.max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {self.max_retries}")
        self._rng = random.Random(self.seed)

    def delay(self, attempt: int, server_says: float | None = None) -> float:
        """Seconds to wait after failed attempt `attempt` (0-based).

        >>> b = Backoff(max_retries=3, base_s=1.0, max_s=4.0, seed=0)
        >>> all(s / 2 <= b.delay(a) <= s for a, s in ((0, 1.0), (1, 2.0), (2, 4.0), (5, 4.0)))
        True
        >>> 2.0 <= b.delay(0, server_says=2.0) <= 2.1
        True
        """
        if server_says is not None:
            return min(server_says, self.max_retry_after_s) + 0.1 * self._rng.random()
        step = min(self.max_s, self.base_s * 2**attempt)
        return step * (0.5 + 0.5 * self._rng.random())
