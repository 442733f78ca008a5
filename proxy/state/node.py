"""The `memory` backend of `--workers N`: one budget per node (issue 34, D218).

The parent of the workers holds the node's memory (`proxy.state.memory.MemoryState`) and
answers on a Unix socket in its own directory (`NodeService`, a thread of the parent);
each worker asks it (`NodeState`) one line of JSON per decision. The service answers each
line under one lock, so a decision is atomic across the workers, on the parent's clock.
An admitted request's announced body is spent with it (`reserve`), so its stream is
metered without a round trip per chunk (`proxy.state.meter`). A worker that cannot reach
the service in time decides in its own memory (`on_error: local`, counted and logged).
"""

from __future__ import annotations

import asyncio
import json
import secrets
import socketserver
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from sandbox_egress.proxy.clauses.budget import Admission, Budget, BudgetKey, Rate
from sandbox_egress.proxy.state import StateUnavailable, bounded
from sandbox_egress.proxy.state.memory import MemoryState

SOCKET_ENV = "EGRESS_STATE_SOCKET"
TIMEOUT_S = 2.0  # a local socket: only a stuck parent is this slow
MAX_LINE = 16384  # a shared value (MAX_VALUE) escaped in JSON fits
T = TypeVar("T")


def _rate(raw: Any) -> Rate | None:
    return None if raw is None else Rate(int(raw[0]), int(raw[1]))


def _pack(rate: Rate | None) -> list[int] | None:
    return None if rate is None else [rate.amount, rate.window_s]


def _spending_key(key: BudgetKey) -> dict[str, Any]:
    return {"sandbox": key.sandbox, "entry": key.entry}


def _rates(rates: tuple[tuple[str, Rate], ...]) -> list[list[Any]]:
    return [[kind, rate.amount, rate.window_s] for kind, rate in rates]


class NodeService:
    """The parent's side: `answer` one request line (also called directly by tests)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.memory = MemoryState()
        self._lock = threading.Lock()
        service = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                for line in iter(lambda: self.rfile.readline(MAX_LINE), b""):
                    self.wfile.write(service.answer(line) + b"\n")

        self._server = socketserver.ThreadingUnixStreamServer(str(path), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def read(self, reader: Callable[[MemoryState], T]) -> T:
        """`reader` over the node's memory, between two answers (the admin API's /usage)."""
        with self._lock:
            return reader(self.memory)

    def answer(self, line: bytes) -> bytes:
        try:
            ask = json.loads(line)
            with self._lock:
                result = self._decide(ask)
        except (ValueError, KeyError, TypeError, IndexError):
            result = {"error": "bad request"}
        return json.dumps(result).encode()

    def _decide(self, ask: dict[str, Any]) -> dict[str, Any]:
        memory, op = self.memory, ask["op"]
        if op == "ping":
            return {"ok": True}
        if op == "lock":
            return {"ok": memory.lock_now(str(ask["key"]), float(ask["ttl"]), str(ask["holder"]))}
        if op == "unlock":
            return {"ok": memory.unlock_now(str(ask["key"]), str(ask["holder"]))}
        if op == "get":
            return {"ok": True, "value": memory.get_now(str(ask["key"]))}
        if op == "put":
            memory.put_now(str(ask["key"]), str(ask["value"]), float(ask["ttl"]))
            return {"ok": True}
        key = BudgetKey(ask["sandbox"], str(ask["entry"]))
        if op in ("below", "charge", "levels"):
            return self._spending(op, key, ask)
        if op == "spend":
            rate = Rate(int(ask["rate"][0]), int(ask["rate"][1]))
            return {"ok": memory.spend_now(key, rate, int(ask["size"]))}
        budget = Budget(_rate(ask["requests"]), _rate(ask["upload"]))
        body = ask["body"]
        admission = memory.admit_now(key, budget, None if body is None else int(body))
        reserved = 0
        if admission.admitted and budget.upload is not None and int(ask["reserve"]) > 0:
            reserved = int(ask["reserve"])
            memory.spend_now(key, budget.upload, reserved)
        return {
            "ok": admission.admitted,
            "wait": admission.retry_after_s,
            "budget": admission.budget,
            "reserved": reserved,
        }

    def _spending(self, op: str, key: BudgetKey, ask: dict[str, Any]) -> dict[str, Any]:
        memory, now = self.memory, self.memory.clock()
        if op == "charge":
            charges = [(str(k), Rate(int(a), int(w)), int(n)) for k, a, w, n in ask["charges"]]
            for kind, rate, amount in charges:
                memory.budgets.charge(key, kind, rate, amount, now)
            return {"ok": True}
        rates = tuple((str(k), Rate(int(a), int(w))) for k, a, w in ask["rates"])
        if op == "levels":
            return {"ok": True, "levels": [memory.budgets.level(key, k, r, now) for k, r in rates]}
        admission = memory.budgets.below(key, rates, now)
        return {
            "ok": admission.admitted,
            "wait": admission.retry_after_s,
            "budget": admission.budget,
        }


class NodeState:
    """A worker's side: one connection to the parent's service, one request at a time."""

    name = "memory"

    def __init__(self, path: str, timeout_s: float = TIMEOUT_S) -> None:
        self._path = path
        self._timeout = timeout_s
        self._lock = asyncio.Lock()
        self._stream: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        self._holder = secrets.token_hex(8)  # this worker, as a lock's holder

    async def _ask(self, ask: dict[str, Any]) -> dict[str, Any]:
        async with self._lock:
            try:
                return await asyncio.wait_for(self._round_trip(ask), self._timeout)
            except (TimeoutError, OSError, ValueError) as exc:
                if self._stream is not None:
                    self._stream[1].close()
                self._stream = None
                raise StateUnavailable(type(exc).__name__) from None

    async def _round_trip(self, ask: dict[str, Any]) -> dict[str, Any]:
        if self._stream is None:
            self._stream = await asyncio.open_unix_connection(self._path)
        reader, writer = self._stream
        writer.write(json.dumps(ask).encode() + b"\n")
        await writer.drain()
        line = await reader.readline()
        if not line:
            raise ConnectionResetError("closed")
        answer: dict[str, Any] = json.loads(line)
        if "error" in answer:
            raise ValueError(answer["error"])
        return answer

    async def admit(
        self, key: BudgetKey, budget: Budget, body: int | None, reserve: int
    ) -> Admission:
        answer = await self._ask(
            {
                "op": "admit",
                "sandbox": key.sandbox,
                "entry": key.entry,
                "requests": _pack(budget.requests),
                "upload": _pack(budget.upload),
                "body": body,
                "reserve": reserve,
            }
        )
        if answer["ok"]:
            return Admission(True, reserved=int(answer["reserved"]))
        return Admission(False, int(answer["wait"]), str(answer["budget"]))

    async def spend(self, key: BudgetKey, rate: Rate, size: int) -> bool:
        ask = {"op": "spend", "sandbox": key.sandbox, "entry": key.entry, "size": size}
        return bool((await self._ask({**ask, "rate": _pack(rate)}))["ok"])

    async def admit_spending(
        self, key: BudgetKey, rates: tuple[tuple[str, Rate], ...]
    ) -> Admission:
        answer = await self._ask({"op": "below", **_spending_key(key), "rates": _rates(rates)})
        if answer["ok"]:
            return Admission(True)
        return Admission(False, int(answer["wait"]), str(answer["budget"]))

    async def charge(self, key: BudgetKey, charges: tuple[tuple[str, Rate, int], ...]) -> None:
        packed = [[k, r.amount, r.window_s, n] for k, r, n in charges]
        await self._ask({"op": "charge", **_spending_key(key), "charges": packed})

    async def levels(self, key: BudgetKey, rates: tuple[tuple[str, Rate], ...]) -> list[float]:
        answer = await self._ask({"op": "levels", **_spending_key(key), "rates": _rates(rates)})
        return [float(v) for v in answer["levels"]]

    def spend_now(self, key: BudgetKey, rate: Rate, size: int) -> bool | None:
        return None

    def remaining(self, key: BudgetKey, kind: str, rate: Rate) -> float | None:
        return None

    async def lock(self, key: str, ttl_s: float) -> bool:
        ask = {"op": "lock", "key": key, "ttl": ttl_s, "holder": self._holder}
        return bool((await self._ask(ask))["ok"])

    async def unlock(self, key: str) -> bool:
        ask = {"op": "unlock", "key": key, "holder": self._holder}
        return bool((await self._ask(ask))["ok"])

    async def get(self, key: str) -> str | None:
        value = (await self._ask({"op": "get", "key": key}))["value"]
        return None if value is None else str(value)

    async def put(self, key: str, value: str, ttl_s: float) -> None:
        await self._ask({"op": "put", "key": key, "value": bounded(value), "ttl": ttl_s})

    async def health(self) -> str:
        try:
            await self._ask({"op": "ping"})
        except StateUnavailable as exc:
            return f"unreachable ({exc})"
        return "ok"

    async def close(self) -> None:
        if self._stream is not None:
            self._stream[1].close()
            self._stream = None
