"""The owned worker for observation-only events: off the caller's path, never unawaited.

The source page says these events "fire and forget"; the project allows no task
that nothing awaits. Both hold here:
* ``submit`` only checks and enqueues (a bounded queue), so firing an
  observation-only event never waits for a hook and can never block;
* one thread per session runs the queued events in order, each hook with its
  own deadline (``command.run_process``);
* the session owns the worker and ``close`` joins it: it waits for the queue
  to drain up to a deadline, then sets the cancel token, which stops the
  running hook at once (its process group is killed) and drops what is still
  queued; every dropped event is reported and counted, never silent;
* when the queue is full, or the session is closed, the event is dropped.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable

from sandbox_egress.common.process import CancelToken
from sandbox_egress.hookrunner.ax.events import EventInput

DEFAULT_CAPACITY = 256

Handle = Callable[[EventInput, CancelToken], None]
OnDrop = Callable[[EventInput, str], None]


class ObservationWorker:
    def __init__(self, handle: Handle, on_drop: OnDrop, capacity: int = DEFAULT_CAPACITY) -> None:
        self._handle = handle
        self._on_drop = on_drop
        self._queue: queue.Queue[EventInput | None] = queue.Queue(capacity)
        self._cancel = CancelToken()
        self._lock = threading.Lock()
        self._closed = False
        self._thread: threading.Thread | None = None

    def submit(self, inp: EventInput) -> bool:
        """Enqueue without waiting; False (and reported) when the event is dropped."""
        with self._lock:
            if self._closed:
                cause = "the session is closed"
            else:
                if self._thread is None:
                    self._thread = threading.Thread(
                        target=self._loop, name="hookrunner-observe", daemon=True
                    )
                    self._thread.start()
                try:
                    self._queue.put_nowait(inp)
                    return True
                except queue.Full:
                    cause = f"{self._queue.maxsize} observation events are already queued"
        self._on_drop(inp, cause)
        return False

    def _loop(self) -> None:
        while True:
            inp = self._queue.get()
            if inp is None:
                return
            if self._cancel.is_set():
                self._on_drop(inp, "the session closed before it ran")
                continue
            try:
                self._handle(inp, self._cancel)
            except Exception as exc:  # a bug must not stop the worker, nor pass unseen
                self._on_drop(inp, f"internal error: {type(exc).__name__}: {exc}")

    def close(self, timeout: float | None = 5.0) -> None:
        """Let queued events run for up to ``timeout`` seconds (None: each to its own deadline)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            thread = self._thread
        if thread is not None:
            deadline = None if timeout is None else time.monotonic() + timeout
            stopped = self._put_stop(timeout)
            thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
            if thread.is_alive():
                self._cancel.set()  # the running hook's group is killed; the rest is dropped
                if not stopped:
                    self._queue.put(None)
                thread.join()
        self._cancel.close()

    def _put_stop(self, timeout: float | None) -> bool:
        try:
            self._queue.put(None, timeout=timeout)
        except queue.Full:
            return False
        return True
