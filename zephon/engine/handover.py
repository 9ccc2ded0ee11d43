"""Handing a running stream over to another engine without stopping it.

The candidate engine is made from the lanes' states at the unit where the switch was decided
(the states a checkpoint taken there would hold), so its stream continues that one exactly. It
runs on a thread of its own beside the engine that keeps delivering: every unit the running
engine delivers meanwhile, the candidate makes too and drops. The first time the candidate holds
the next unit before the running engine has delivered it, it takes over (``take``): the caller
closes the old engine and goes on with the candidate's iterator. A candidate that fails, ends
or is not faster never takes over; the running engine goes on as if nothing had happened.

A process engine's iterator mostly waits on its coordinator's pipe (no GIL held), and an inline
candidate computes on this thread while the caller's loop works, so the race costs the running
engine little beyond the CPU the candidate uses.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any


class EngineRace:
    def __init__(self, make: Callable[[], Any], limit_s: float, engine: Any = None) -> None:
        """``make()`` builds the candidate on the race's thread (an inline engine re-derives
        the records the lanes' buffers held there); ``engine``: one built already."""
        self.limit_s = limit_s
        self.started = time.monotonic()
        self.cond = threading.Condition()
        self.engine = engine
        self.it: Iterator | None = None
        self.behind = 0  # units the running engine delivered since the race began
        self.made = 0  # units the candidate made so far (all but ``pending`` dropped)
        self.pending: Any = None  # the candidate's unit ``made``, not delivered by the other
        self.state = "running"  # -> "taken" | "dropped" | "failed"
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(make,), daemon=True,
                                       name="zephon-engine-race")
        self.thread.start()

    def _run(self, make: Callable[[], Any]) -> None:
        try:
            engine = self.engine if self.engine is not None else make()
            with self.cond:
                self.engine = engine
                dropped = self.state != "running"
            if dropped:  # dropped while it was being made
                engine.close()
                return
            it = iter(engine)
            self.it = it
            while True:
                unit = next(it, None)
                with self.cond:
                    if self.state != "running":
                        return
                    if unit is None:  # the stream ended before the candidate caught up
                        self.state = "failed"
                        self.error = None
                        self.cond.notify_all()
                        return
                    self.made += 1
                    if self.made <= self.behind:
                        continue  # delivered by the running engine already
                    self.pending = unit
                    self.cond.notify_all()
                    self.cond.wait_for(lambda: self.state != "running"
                                       or self.made <= self.behind)
                    if self.state != "running":
                        return
                    self.pending = None  # the running engine delivered it meanwhile
        except BaseException as e:  # it will be raised, if at all, by the running engine
            with self.cond:
                if self.state == "running":
                    self.state, self.error = "failed", e
                self.cond.notify_all()

    def delivered(self) -> None:
        """The running engine delivered one more unit."""
        with self.cond:
            self.behind += 1
            self.cond.notify_all()

    def take(self) -> tuple[Any, Iterator] | None:
        """(the candidate, its iterator starting at the next unit) when it has that unit ready;
        the race is then over."""
        with self.cond:
            if self.state == "running" and self.pending is not None \
                    and self.made == self.behind + 1:
                self.state = "taken"
                unit, self.pending = self.pending, None
                self.cond.notify_all()
                return self.engine, itertools.chain([unit], self.it)
        return None

    @property
    def lost(self) -> bool:
        """The candidate failed, or ran out of time without catching up."""
        if self.state == "failed":
            return True
        return self.state == "running" and time.monotonic() - self.started > self.limit_s

    def why_lost(self) -> str:
        if self.state == "failed" and self.error is not None:
            return f"failed ({type(self.error).__name__}: {self.error})".splitlines()[0][:200]
        if self.state == "failed":
            return "did not catch up before the stream ended"
        return (f"had made {self.made} of the {self.behind} units delivered meanwhile after "
                f"{time.monotonic() - self.started:.0f}s: not faster")

    def drop(self) -> None:
        """End the race without a takeover: the candidate is closed."""
        with self.cond:
            if self.state == "taken":
                return
            self.state = "dropped" if self.state == "running" else self.state
            self.cond.notify_all()
            engine = self.engine
        if engine is not None:
            try:
                engine.close()
            except Exception:  # it is being thrown away
                pass
        self.thread.join(timeout=5.0)
