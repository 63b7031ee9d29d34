"""Progress bars for the long stages of a run (model work in tokens, aggregator stages).

Why its own module: the executor (tokens) and the runner (aggregator nodes) both show a
bar, and both must agree on when one appears. ``progress`` is three-valued:

* ``None`` (the CLI's default): a bar when stderr is a terminal, nothing when it is piped;
* ``True`` (``--progress``): a bar also on a pipe, where tqdm's carriage-return redraws
  would never reach a log line by line, so a pipe gets plain lines instead, at most one
  every :data:`PIPE_INTERVAL` seconds and one at the end;
* ``False`` (``--no-progress``, ``--quiet``): nothing.

A stage that ends within ``delay`` seconds shows nothing (aggregators: one second), so a
warm rerun prints no bar at all. tqdm is imported only when a bar is really drawn.
"""

from __future__ import annotations

import os
import sys
from collections import Counter
import threading
import time
from typing import Any, Callable, TextIO

import networkx as nx

PIPE_INTERVAL = 5.0  # seconds between the plain lines a forced bar prints on a pipe


def wanted(progress: bool | None, stream: TextIO | None = None) -> bool:
    """Whether a bar is drawn: forced on/off, or (None) only when ``stream`` is a terminal."""
    if progress is not None:
        return bool(progress)
    stream = stream or sys.stderr
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a closed or replaced stream
        return False


def bar(total: float, desc: str, unit: str, progress: bool | None, delay: float = 0.0) -> Any:
    """A bar over ``total`` ``unit``s: tqdm on a terminal, :class:`LineBar` on a pipe, or :class:`NoBar`.

    With ``delay`` the bar appears only once the stage has lasted that long, even in the
    middle of one long step (a timer shows it: tqdm's own ``delay`` waits for an update).
    """
    if not wanted(progress, sys.stderr):
        return NoBar()
    if delay > 0:
        return Delayed(lambda n: _make(total, desc, unit, n), delay)
    return _make(total, desc, unit, 0)


def _make(total: float, desc: str, unit: str, initial: float) -> Any:
    stream = sys.stderr
    if not wanted(None, stream):
        return LineBar(total, desc, unit, stream, initial=initial)
    from tqdm.auto import tqdm

    sized = _sized(stream)  # a terminal reporting no size (a bare pty) would get an empty bar from tqdm
    return tqdm(total=total, initial=initial, unit=unit, unit_scale=unit == "tok", desc=desc, file=stream, leave=False,
                ncols=None if sized else 80, nrows=None if sized else 20)


def _sized(stream: TextIO) -> bool:
    try:
        size = os.get_terminal_size(stream.fileno())
    except (AttributeError, OSError, ValueError):
        return False
    return size.columns > 0 and size.lines > 0


class Delayed:
    """A bar made only after ``delay`` seconds (by a timer thread), counting from the start."""

    def __init__(self, make: Callable[[float], Any], delay: float):
        self.n = 0.0
        self.inner: Any = None
        self.lock = threading.Lock()
        self.make = make
        self.timer = threading.Timer(delay, self._show)
        self.timer.daemon = True
        self.timer.start()

    def _show(self) -> None:
        with self.lock:
            if self.inner is None and self.make is not None:
                self.inner = self.make(self.n)
                self.inner.update(0)  # shown now, not at the next finished step (one node may take seconds)

    def update(self, n: float = 1) -> None:
        with self.lock:
            self.n += n
            if self.inner is not None:
                self.inner.update(n)

    def close(self) -> None:
        self.timer.cancel()
        with self.lock:
            self.make = None  # a timer firing now shows nothing
            if self.inner is not None:
                self.inner.close()


class NoBar:
    def update(self, n: float = 1) -> None:
        pass

    def close(self) -> None:
        pass


class LineBar:
    """A forced bar on a pipe: one plain line per :data:`PIPE_INTERVAL` seconds and one when done.

    The line comes every interval even when nothing finished meanwhile (a heartbeat thread), so
    a log shows a long step is still running instead of going silent for minutes."""

    def __init__(self, total: float, desc: str, unit: str, stream: TextIO, initial: float = 0.0,
                 interval: float | None = None):
        self.total, self.desc, self.unit, self.stream = total, desc, unit, stream
        self.n = float(initial)
        self.t0 = time.monotonic()
        self.interval = PIPE_INTERVAL if interval is None else interval
        self.last: float | None = None  # when the last line was printed
        self.printed: float | None = None  # the count it showed
        self.lock = threading.Lock()
        self.stopped = threading.Event()
        self.beat = threading.Thread(target=self._heartbeat, daemon=True)
        self.beat.start()

    def _heartbeat(self) -> None:
        while not self.stopped.wait(self.interval / 2):
            with self.lock:
                if self.stopped.is_set():
                    return
                if time.monotonic() - (self.last if self.last is not None else self.t0) >= self.interval:
                    self._line()

    def _line(self) -> None:
        pct = f" ({100 * self.n / self.total:.0f}%)" if self.total else ""
        n = int(self.n) if float(self.n).is_integer() else self.n
        total = int(self.total) if float(self.total).is_integer() else self.total
        print(f"{self.desc}: {n}/{total} {self.unit}{pct}, {time.monotonic() - self.t0:.1f}s",
              file=self.stream, flush=True)
        self.last, self.printed = time.monotonic(), self.n

    def update(self, n: float = 1) -> None:
        with self.lock:
            self.n += n
            if self.last is None or time.monotonic() - self.last >= self.interval:
                self._line()

    def close(self) -> None:
        """The final line, unless it was just printed."""
        with self.lock:
            self.stopped.set()
            if self.printed != self.n:
                self._line()


class StageLines:
    """``evaldag: stage k of n: ...`` before each stage of a run, when progress is shown: how
    many nodes, which scorers (the model work) and how many aggregators, so a long run says
    where it is between its bars. ``n`` is the depth of what is left to compute."""

    def __init__(self, pending: list, graph: Any, progress: bool | None):
        self.on = bool(pending) and wanted(progress, sys.stderr)
        self.k = 0
        self.n = 0
        if self.on:
            self.n = sum(1 for _ in nx.topological_generations(graph.subgraph(v.key for v in pending)))

    def say(self, ready: list) -> None:
        if not self.on:
            return
        self.k += 1
        scorers = Counter(v.metric.name for v in ready if v.metric.scorer)
        what = ", ".join(f"{name} x{n}" if n > 1 else name for name, n in sorted(scorers.items()))
        aggs = sum(1 for v in ready if not v.metric.scorer)
        parts = [f"{sum(scorers.values())} scorers ({what})" if scorers else "", f"{aggs} aggregators" if aggs else ""]
        print(f"evaldag: stage {self.k} of {max(self.n, self.k)}: {len(ready)} nodes: "
              + "; ".join(x for x in parts if x), file=sys.stderr, flush=True)


_hushed_everywhere = [False]  # --quiet: every thread (a client's calls run in a pool)


def say(line: str, stream: TextIO | None = None) -> None:
    """One line on stderr about a long stage while it happens (a server retried, throttled):
    through tqdm when a bar is drawn, so the bar is redrawn below it; nothing inside :func:`hushed`."""
    if _hushed_everywhere[0]:
        return
    stream = stream or sys.stderr
    tqdm = sys.modules.get("tqdm.auto")
    live = tqdm is not None and getattr(tqdm.tqdm, "_instances", None)
    if live:
        tqdm.tqdm.write(line, file=stream)
    else:
        print(line, file=stream, flush=True)


class hushed:
    """``with hushed(args.quiet):`` no :func:`say` lines (``--quiet`` prints errors only)."""

    def __init__(self, on: bool = True):
        self.on, self.before = bool(on), False

    def __enter__(self) -> "hushed":
        self.before, _hushed_everywhere[0] = _hushed_everywhere[0], self.on or _hushed_everywhere[0]
        return self

    def __exit__(self, *exc: object) -> None:
        _hushed_everywhere[0] = self.before


def duration(seconds: float) -> str:
    """``42 s``, ``3.5 min``, ``1.2 h``: how a time estimate is said."""
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.1f} min" if seconds < 5400 else f"{seconds / 3600:.1f} h"


class Estimating:
    """A bar that also says, once, how long the rest of its work will take: after a tenth of it
    (or half a minute), from the rate so far. One line, when progress is shown. ``patient``: only
    after a tenth -- generation runs its sequences at once, so the first to finish are few and
    half a minute's rate would say hours where minutes remain (GradNorm's first rows run alone)."""

    def __init__(self, inner: Any, desc: str, total: float, progress: bool | None, patient: bool = False):
        self.inner, self.desc, self.total, self.patient = inner, desc, total, patient
        self.on = total > 0 and wanted(progress, sys.stderr)
        self.t0, self.done, self.said = time.monotonic(), 0.0, False

    def update(self, n: float = 1) -> None:
        self.inner.update(n)
        self.done += n
        elapsed = time.monotonic() - self.t0
        if self.on and not self.said and 0 < self.done < self.total and (self.done >= self.total / 10 or elapsed >= 30 and not self.patient):
            self.said = True
            left = elapsed * (self.total - self.done) / self.done
            if left < 10:  # a short stage needs no forecast
                return
            print(f"{self.desc}: about {duration(left)} left ({int(self.done)} of {int(self.total)} tokens in "
                  f"{duration(elapsed)})", file=sys.stderr, flush=True)

    def close(self) -> None:
        self.inner.close()
