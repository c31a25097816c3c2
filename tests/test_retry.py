"""`r3forge.retry`: the HTTP clients' one retry policy."""

import email.utils
import time

import httpx
import pytest

from r3forge.retry import Backoff, retry_after, retryable_status


def test_retry_after_header_forms():
    assert retry_after(httpx.Headers({"retry-after-ms": "250", "retry-after": "9"})) == 0.25
    assert retry_after(httpx.Headers({"retry-after": "2"})) == 2.0
    date = email.utils.formatdate(time.time() + 30, usegmt=True)
    assert 25 < retry_after(httpx.Headers({"retry-after": date})) <= 30
    assert retry_after(httpx.Headers({})) is None
    assert retry_after(httpx.Headers({"retry-after": "soon"})) is None


def test_backoff_doubles_with_equal_jitter_caps_and_defers_to_the_server():
    b = Backoff(max_retries=4, base_s=0.5, max_s=2.0, max_retry_after_s=5.0, seed=1)
    for attempt, step in ((0, 0.5), (1, 1.0), (2, 2.0), (3, 2.0)):
        delays = [b.delay(attempt) for _ in range(200)]
        assert step / 2 <= min(delays) and max(delays) <= step and max(delays) - min(delays) > step / 4
    assert 5.0 <= b.delay(0, server_says=600.0) <= 5.1  # a server's Retry-After, capped
    assert Backoff(3, seed=7).delay(1) == Backoff(3, seed=7).delay(1)
    assert not retryable_status(404) and retryable_status(503)
    with pytest.raises(ValueError, match="max_retries"):
        Backoff(max_retries=-1)
