"""The virtual clock that decides which version of every page is served.

Default is real time. Tests jump it (``set(t)``) to see pages change without waiting; demos run it fast
(``speed``) so a day of change happens in minutes. It is piecewise linear in real time so a jump or a
speed change never makes virtual time run backwards unless someone sets it backwards on purpose.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field


@dataclass
class VirtualClock:
    speed: float = 1.0
    _real0: float = field(default_factory=time.time)
    _virt0: float | None = None

    def now(self) -> float:
        real = time.time()
        base = self._real0 if self._virt0 is None else self._virt0
        return base + (real - self._real0) * self.speed

    def set(self, t: float | None = None, speed: float | None = None) -> None:
        """Jump to virtual time ``t`` and/or change the speed factor from now on."""
        current = self.now()
        self._real0 = time.time()
        self._virt0 = current if t is None else float(t)
        if speed is not None:
            if speed < 0:
                raise ValueError("speed must be >= 0")
            self.speed = float(speed)

    def state(self) -> dict[str, float]:
        return {"time": self.now(), "speed": self.speed, "real_time": time.time()}
