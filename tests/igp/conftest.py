"""Shared by the IGP probe tests: a wrapper that counts the real backend's generate calls."""

from __future__ import annotations

import pytest

from r3forge.backends import HFLocalBackend


class CountingBackend:
    """The real backend, counting its generate calls and requests."""

    def __init__(self, backend: HFLocalBackend) -> None:
        self.backend, self.calls, self.requests, self.name = backend, 0, 0, backend.name

    def generate(self, requests):
        self.calls, self.requests = self.calls + 1, self.requests + len(requests)
        return self.backend.generate(requests)

    def close(self) -> None:
        self.backend.close()


@pytest.fixture(scope="session")
def counting_backend() -> type[CountingBackend]:
    """The `CountingBackend` class: wrap a real backend to count its calls."""
    return CountingBackend
