"""Progress: a bar by default on a terminal, nothing on a pipe unless
`--progress` (then plain lines, not a lone `0%`), nothing with `--no-progress` or `--quiet`;
aggregator stages longer than a second get a bar over their nodes."""

import fcntl
import os
import pty
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest

from evaldag.engine import Result, Rows, metric, run
from evaldag.engine import progress

EVALDAG = str(Path(sys.executable).with_name("evaldag"))


def _on_a_terminal(args: list[str], rows: int = 24, cols: int = 100) -> str:
    """Run evaldag with stdout and stderr on a pseudo-terminal of rows x cols; what the terminal received."""
    main, child = pty.openpty()
    fcntl.ioctl(child, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
    proc = subprocess.Popen([EVALDAG, *args], stdout=child, stderr=child, stdin=subprocess.DEVNULL, close_fds=True)
    os.close(child)
    out = b""
    while True:
        try:
            chunk = os.read(main, 65536)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        out += chunk
    proc.wait(timeout=120)
    os.close(main)
    assert proc.returncode == 0, out.decode(errors="replace")
    return out.decode(errors="replace")


def _toy(tmp_path: Path, name: str, *flags: str) -> list[str]:
    # a fresh cache each time: the model runs, so there are tokens to show
    return ["run", "toy", "--out", str(tmp_path / name), "--cache-dir", str(tmp_path / f"cache-{name}"), *flags]


def test_a_terminal_shows_a_token_bar_by_default(tmp_path):
    assert "evaldag token_stats" in _on_a_terminal(_toy(tmp_path, "tty"))
    # a terminal that reports no size (a bare pty, some CI runners): tqdm alone would draw an empty bar
    assert "evaldag token_stats" in _on_a_terminal(_toy(tmp_path, "tty-bare"), rows=0, cols=0)
    assert "evaldag token_stats" not in _on_a_terminal(_toy(tmp_path, "tty-off", "--no-progress"))
    assert "evaldag token_stats" not in _on_a_terminal(_toy(tmp_path, "tty-quiet", "--quiet"))


def test_a_pipe_shows_nothing_unless_forced_then_plain_lines(tmp_path):
    piped = subprocess.run([EVALDAG, *_toy(tmp_path, "pipe")], capture_output=True, text=True, check=True)
    assert "evaldag token_stats" not in piped.stderr and "%" not in piped.stderr
    forced = subprocess.run([EVALDAG, *_toy(tmp_path, "forced", "--progress")], capture_output=True, text=True, check=True)
    lines = [x for x in forced.stderr.splitlines() if x.startswith("evaldag token_stats")]
    assert lines and "\r" not in forced.stderr
    done, total = lines[-1].split(": ")[1].split(" ")[0].split("/")
    assert done == total and int(total) > 0 and "(100%)" in lines[-1]
    stages = [x for x in forced.stderr.splitlines() if x.startswith("evaldag: stage ")]
    n = len(stages)
    assert n >= 2 and [x.split(":")[1] for x in stages] == [f" stage {k} of {n}" for k in range(1, n + 1)]
    assert "scorers (" in stages[0] and "aggregators" in stages[-1]
    assert not [x for x in piped.stderr.splitlines() if x.startswith("evaldag: stage ")]  # only when progress is shown


@metric("test_slow_sum", version="1", needs=("data",))
def _slow(data):
    time.sleep(1.3)
    return Result(float(sum(data)))


@metric("test_quick_sum", version="1", needs=("data",))
def _quick(data):
    return Result(float(sum(data)))


def test_an_aggregator_stage_longer_than_a_second_gets_a_bar(tmp_path, capsys):
    res = run([_slow(name="slow")], {"data": Rows(lambda: [1, 2])}, cache=tmp_path / "c", progress=True)
    assert res["slow"].agg_value == 3.0
    err = capsys.readouterr().err
    assert err.splitlines()[-1].startswith("evaldag aggregators: 1/1 nodes (100%)")
    run([_quick(name="quick")], {"data": Rows(lambda: [1, 2])}, cache=tmp_path / "c", progress=True)
    assert "evaldag aggregators" not in capsys.readouterr().err  # a stage under a second shows no bar


class Sink:
    """A stream that keeps the lines a bar prints."""

    def __init__(self):
        self.lines = []

    def write(self, s):
        self.lines += [x for x in s.splitlines() if x]

    def flush(self):
        pass


def test_forced_lines_on_a_pipe_come_at_most_every_interval():
    sink = Sink()
    bar = progress.LineBar(100, "evaldag x", "tok", sink, interval=3600)
    for _ in range(10):
        bar.update(10)
    bar.close()
    assert [x.split(",")[0] for x in sink.lines] == ["evaldag x: 10/100 tok (10%)", "evaldag x: 100/100 tok (100%)"]


def test_a_plain_bar_prints_every_interval_while_nothing_finishes():
    """On a pipe a long step (one generation batch) still gives a line every few seconds."""
    import time

    sink = Sink()
    bar = progress.LineBar(100, "evaldag generate", "tok", sink, interval=0.2)
    bar.update(5)
    time.sleep(1.1)  # no update: the heartbeat prints
    beats = len(sink.lines)
    bar.close()
    assert beats >= 4 and all(x.startswith("evaldag generate: 5/100 tok (5%), ") for x in sink.lines[:beats])
    time.sleep(0.3)
    assert len(sink.lines) == beats  # closed: nothing more (5 was already shown)


def test_an_estimate_of_the_rest_after_a_tenth(monkeypatch, capsys):
    clock = [100.0]
    monkeypatch.setattr(progress.time, "monotonic", lambda: clock[0])
    bar = progress.Estimating(progress.NoBar(), "evaldag: generate", 1000, True)
    clock[0] += 20
    bar.update(50)  # 5 %: too early to say
    clock[0] += 20
    bar.update(50)  # 10 % in 40 s: 360 s left
    clock[0] += 20
    bar.update(100)
    bar.close()
    assert capsys.readouterr().err.splitlines() == ["evaldag: generate: about 6.0 min left (100 of 1000 tokens in 40 s)"]
    quick = progress.Estimating(progress.NoBar(), "evaldag: token_stats", 1000, True)
    quick.update(500)
    assert capsys.readouterr().err == ""  # under 10 s left: no forecast


@pytest.mark.parametrize("forced, tty, shown", [(None, True, True), (None, False, False), (True, False, True),
                                                (False, True, False)])
def test_when_a_bar_is_wanted(forced, tty, shown):
    class Stream:
        def isatty(self):
            return tty

    assert progress.wanted(forced, Stream()) is shown


def test_generation_waits_for_a_tenth_before_its_estimate(monkeypatch, capsys):
    """Continuous batching: every sequence runs at once and the first to finish are few, so half a
    minute's rate says hours where minutes remain (SmolLM2: "about 1.8 h left" at 241 of 25103
    tokens, the stage took minutes); a generation's estimate waits for a tenth of its tokens."""
    clock = [100.0]
    monkeypatch.setattr(progress.time, "monotonic", lambda: clock[0])
    bar = progress.Estimating(progress.NoBar(), "evaldag: generate", 25000, True, patient=True)
    clock[0] += 62
    bar.update(241)  # 1 % after a minute: no forecast yet
    assert capsys.readouterr().err == ""
    clock[0] += 43
    bar.update(2259)  # 10 % in 105 s
    assert capsys.readouterr().err == "evaldag: generate: about 15.8 min left (2500 of 25000 tokens in 1.8 min)\n"
    other = progress.Estimating(progress.NoBar(), "evaldag: token_stats", 25000, True)
    clock[0] += 31
    other.update(241)  # token statistics: half a minute is enough
    assert capsys.readouterr().err.startswith("evaldag: token_stats: about ")
