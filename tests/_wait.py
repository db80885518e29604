"""Waiting for a condition, never for a fixed time: the one loop every slow test uses."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

__all__ = [
    "wait_until",
]


def wait_until(
    check: Callable[[], Any],
    timeout: float,
    what: str | Callable[[], str],
    pause: Callable[[float], None] = time.sleep,
) -> Any:
    """Poll ``check`` until it returns something truthy; fail describing ``what`` after timeout.

    With Playwright's sync API, pass ``pause=lambda s: page.wait_for_timeout(s * 1000)``:
    events (responses, navigations) are only delivered while a Playwright call runs.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            detail = what() if callable(what) else what
            raise AssertionError(f"not within {timeout:g} s: {detail}")
        pause(0.25)
