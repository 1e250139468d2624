"""Running a test's work in several threads at once (races the test provokes on purpose)."""

from __future__ import annotations

import threading
from collections.abc import Callable


def run_concurrently(target: Callable[[], None], count: int = 2) -> None:
    """``target`` in ``count`` threads started together; returns when every one has ended
    (each reports its own failures: a thread's exception is not raised here)."""
    threads = [threading.Thread(target=target) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
