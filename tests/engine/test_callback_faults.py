"""EvaldagCallback never ends training: when its own files cannot be written (a file where its
folder goes, a full disk), each failure is one warning line and the Trainer runs every step.
A real transformers Trainer on the tiny Llama, on CPU (tests/tiny_trainer.py)."""

from __future__ import annotations

import builtins
import errno
import os
import re
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

pytest.importorskip("transformers")

from evaldag.engine.integrations import EvaldagCallback  # noqa: E402

sys.path.insert(0, str(Path(__file__).parents[1]))
from tiny_trainer import OPTIONS, make_trainer  # noqa: E402

SHORT = {**OPTIONS, "metrics": ["forget_Q_A_Prob"], "retain_model": None}  # no retain side: fast


def _lines(err: str) -> list[str]:
    return [x for x in err.splitlines() if x.startswith("evaldag: ")]


def test_a_file_where_the_callbacks_folder_goes_costs_one_line_per_failure_and_training_goes_on(tmp_path, capfd):
    trainer = make_trainer(tmp_path / "out", steps=4)
    cb = EvaldagCallback.for_trainer(trainer, "tofu", every_n_steps=2, cache_dir=str(tmp_path / "cache"),
                                     select="min forget_Q_A_Prob", **SHORT)
    evald = tmp_path / "out" / "evaldag"
    shutil.rmtree(evald)
    evald.write_text("not a folder\n")  # made after the callback was attached
    capfd.readouterr()
    trainer.train()
    err = capfd.readouterr().err
    assert "Traceback" not in err
    assert trainer.state.global_step == 4  # every step trained
    assert [(h["step"], h["exit"], h["summary"]) for h in cb.history] == [(2, 2, {}), (4, 2, {})]
    assert evald.read_text() == "not a folder\n"
    lines = _lines(err)
    for step in (2, 4):
        assert f"evaldag: warning: the evaluation at step {step} failed (exit 2); training goes on" in lines
        assert (f"evaldag: warning: EvaldagCallback at step {step}: cannot write {evald / 'sweep.json'}: "
                "File exists; training goes on") in lines
    assert len(lines) == 6, lines  # per step: the run's own error line, its exit, the sweep file
    # attached while the file is there (before the first step): refused at once, in one line
    again = make_trainer(tmp_path / "out", steps=4)
    with pytest.raises(ValueError, match=rf"^EvaldagCallback: cannot write {re.escape(str(evald))}: Not a directory$"):
        EvaldagCallback.for_trainer(again, "tofu", every_n_steps=2, cache_dir=str(tmp_path / "cache"), **SHORT)


def _mount_tmpfs(where: Path, size: str) -> bool:
    where.mkdir()
    if os.geteuid() != 0 or not shutil.which("mount"):
        return False
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], capture_output=True)
    return done.returncode == 0


def _fill(folder: Path) -> None:
    """Write zeros under ``folder`` until its file system has no byte left."""
    fd = os.open(folder / "filler", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        for chunk in (65536, 4096, 1):
            try:
                while True:
                    os.write(fd, b"\0" * chunk)
            except OSError as e:
                assert e.errno == errno.ENOSPC
    finally:
        os.close(fd)


def _no_space_below(monkeypatch, root: Path) -> None:
    """Without a tmpfs to fill: every file created below ``root`` fails as a full disk does."""
    real_open, real_os_open = builtins.open, os.open

    def below(path) -> bool:
        try:
            return Path(os.fspath(path)).resolve().is_relative_to(root.resolve())
        except TypeError:
            return False

    def full(path):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    def opener(path, mode="r", *a, **k):
        if below(path) and any(c in mode for c in "wax+"):
            full(path)
        return real_open(path, mode, *a, **k)

    def os_opener(path, flags, *a, **k):
        if below(path) and flags & (os.O_CREAT | os.O_WRONLY | os.O_RDWR):
            full(path)
        return real_os_open(path, flags, *a, **k)

    monkeypatch.setattr(builtins, "open", opener)
    monkeypatch.setattr(os, "open", os_opener)


@pytest.mark.parametrize("disk", ["tmpfs", "patched"])
def test_a_full_disk_costs_one_line_per_failure_and_training_goes_on(tmp_path, capfd, monkeypatch, disk):
    """The callback's folder and its cache on a 2 MB tmpfs filled to the last byte after the
    callback was attached (or, where no tmpfs can be mounted, every file made there failing with
    ENOSPC); the Trainer's checkpoints elsewhere. Every evaluation, sweep file and checkpoint
    alias fails; training runs its 4 steps and saves both checkpoints."""
    small = tmp_path / "small"
    mounted = disk == "tmpfs" and _mount_tmpfs(small, "2m")
    if disk == "tmpfs" and not mounted:
        pytest.skip("no tmpfs can be mounted here (not root, or no mount): the patched writer stands in")
    try:
        trainer = make_trainer(tmp_path / "out", steps=4, save_steps=2)
        cb = EvaldagCallback.for_trainer(trainer, "tofu", on_save=True, output_dir=str(small),
                                         cache_dir=str(small / "cache"), **SHORT)
        if mounted:
            _fill(small)
        else:
            _no_space_below(monkeypatch, small)
        capfd.readouterr()
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            trainer.train()
        err = capfd.readouterr().err
    finally:
        monkeypatch.undo()
        if mounted:
            subprocess.run(["umount", str(small)], check=True)
    assert "Traceback" not in err
    assert trainer.state.global_step == 4
    assert all((tmp_path / "out" / f"checkpoint-{s}" / "model.safetensors").is_file() for s in (2, 4))
    assert [(h["step"], h["exit"]) for h in cb.history] == [(2, 2), (4, 2)]
    lines = _lines(err)
    assert all(x.startswith(("evaldag: error: ", "evaldag: warning: ")) for x in lines), lines
    for step in (2, 4):
        assert f"evaldag: warning: the evaluation at step {step} failed (exit 2); training goes on" in lines
        sweep = [x for x in lines if x.startswith(f"evaldag: warning: EvaldagCallback at step {step}: cannot write "
                                                  f"{small / 'evaldag' / 'sweep.json'}: No space left on device")]
        assert len(sweep) == 1 and sweep[0].endswith("; training goes on"), lines
        alias = [x for x in lines if x.startswith(f"evaldag: warning: EvaldagCallback at step {step}: cannot write "
                                                  f"{small / 'cache'}/")]
        assert len(alias) == 1, lines  # the checkpoint alias, not recorded
    assert [str(w.message) for w in seen if "filehash" in str(w.message)] == []  # folded into the one line
