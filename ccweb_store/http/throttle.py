"""Login throttling: after ``limit`` wrong operator tokens from one client address within
``window_seconds``, every further token from that address is answered 429 (with
``Retry-After``) until the oldest of those failures is ``window_seconds`` old.

Only failures are counted, in this process's memory: a restart forgets them, and each server
process counts its own. Every place that checks the operator token (``auth.BearerAuth`` and
the console's login form) asks ``LoginThrottle`` first and reports a wrong token to it.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable

#: Wrong tokens one address may send per window before it has to wait.
LOGIN_FAILURE_LIMIT = 10
#: The window, in seconds.
LOGIN_FAILURE_WINDOW_SECONDS = 60.0
#: The most addresses remembered at once; past it, the ones whose failures are all out of
#: the window are forgotten, then the oldest.
MAX_ADDRESSES = 10_000


class LoginThrottle:
    """Wrong-token counts per client address, and how long each address must wait."""

    def __init__(
        self,
        limit: int = LOGIN_FAILURE_LIMIT,
        window_seconds: float = LOGIN_FAILURE_WINDOW_SECONDS,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.limit = limit
        self.window_seconds = window_seconds
        self.clock = clock
        self._failures: dict[str, deque[float]] = {}

    def retry_after(self, address: str) -> int | None:
        """Seconds ``address`` must wait before its next token is checked, or None."""
        failures = self._recent(address)
        if failures is None or len(failures) < self.limit:
            return None
        wait = failures[-self.limit] + self.window_seconds - self.clock()
        return max(1, math.ceil(wait))

    def failed(self, address: str) -> None:
        """Count a wrong token from ``address``."""
        failures = self._recent(address)
        if failures is None:
            if len(self._failures) >= MAX_ADDRESSES:
                self._forget_some()
            failures = self._failures[address] = deque(maxlen=self.limit)
        failures.append(self.clock())

    def _recent(self, address: str) -> deque[float] | None:
        failures = self._failures.get(address)
        if failures is None:
            return None
        cutoff = self.clock() - self.window_seconds
        while failures and failures[0] <= cutoff:
            failures.popleft()
        if not failures:
            del self._failures[address]
            return None
        return failures

    def _forget_some(self) -> None:
        cutoff = self.clock() - self.window_seconds
        stale = [key for key, times in self._failures.items() if times[-1] <= cutoff]
        for key in stale:
            del self._failures[key]
        while len(self._failures) >= MAX_ADDRESSES:
            del self._failures[next(iter(self._failures))]


def client_address(client: tuple[str, int] | None) -> str:
    """The address failures are counted under: the ASGI scope's client host (the proxy's
    ``X-Forwarded-For`` once ``CCWEB_FORWARDED_ALLOW_IPS`` trusts it)."""
    return client[0] if client else "unknown"


def throttled_message(retry_after: int) -> str:
    return (
        f"too many wrong tokens from this address: wait {retry_after} s (Retry-After), then "
        "send the token configured as CCWEB_TOKEN"
    )
