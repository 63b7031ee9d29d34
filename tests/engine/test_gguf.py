"""GGUF files evaldag cannot score are refused before anything loads, in one line.

The files are written here with ``gguf``'s own writer: an architecture transformers'
GGUF loader cannot build, a tensor type ``gguf`` cannot dequantize, a folder with two
GGUF files; and the ``evaldag[gguf]`` extra missing. The real model's GGUF, loaded and
scored, is the real-model tier's (test_realmodel.py).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.conftest_models import TOFU

gguf = pytest.importorskip("gguf")


def _write(path: Path, arch: str, tensor: np.ndarray) -> Path:
    w = gguf.GGUFWriter(str(path), arch)
    w.add_block_count(1)
    w.add_tensor("token_embd.weight", tensor)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def _run(capsys, *argv: str) -> tuple[int, str]:
    from evaldag.engine.cli import main

    capsys.readouterr()
    code = main(["run", "tofu", "--data", str(TOFU), "--quiet", *argv])
    return code, capsys.readouterr().err


def test_an_architecture_transformers_cannot_dequantize_is_one_line(tmp_path, capsys, cache_dir):
    f = _write(tmp_path / "rwkv.gguf", "rwkv7", np.zeros((8, 4), np.float32))
    code, err = _run(capsys, "--model", str(f), "--out", str(tmp_path / "out"))
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert err.startswith(f"evaldag: error: --model {f}: architecture 'rwkv7'") and "llama" in err and "qwen2" in err
    assert not (tmp_path / "out").exists()


def test_a_tensor_type_gguf_cannot_dequantize_is_one_line(tmp_path, capsys, cache_dir):
    f = _write(tmp_path / "ints.gguf", "llama", np.zeros((8, 4), np.int8))  # an I8 tensor: no dequantization
    code, err = _run(capsys, "--model", str(f), "--out", str(tmp_path / "out"))
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert err.startswith(f"evaldag: error: --model {f}: tensor type I8") and "Q4_1" in err and "Q8_0" in err


def test_a_folder_with_two_gguf_files_names_them(tmp_path, capsys, cache_dir):
    folder = tmp_path / "two"
    folder.mkdir()
    for name in ("a.gguf", "b.gguf"):
        _write(folder / name, "llama", np.zeros((8, 4), np.float32))
    code, err = _run(capsys, "--model", str(folder), "--out", str(tmp_path / "out"))
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "2 .gguf files there (a.gguf, b.gguf)" in err and f"{folder}/NAME.gguf" in err


def test_a_folder_with_one_gguf_is_that_file(tmp_path):
    from evaldag.engine.adapters.hf import HFModel
    from evaldag.engine.adapters.hf.hf_gguf import HFGGUFModel

    f = _write(tmp_path / "m.gguf", "llama", np.zeros((8, 4), np.float32))
    for given in (f, tmp_path):
        m = HFModel(given)
        assert isinstance(m, HFGGUFModel) and m.path == str(f)
    assert not isinstance(HFModel(TOFU.parent / "tiny-llama" / "target"), HFGGUFModel)


def test_the_missing_extra_is_one_line_naming_it(tmp_path):
    f = _write(tmp_path / "m.gguf", "llama", np.zeros((8, 4), np.float32))
    code = ("import sys; sys.modules['gguf'] = None  # not importable, as without the extra\n"
            "from evaldag.engine.cli import main\n"
            f"sys.exit(main(['run', 'tofu', '--data', {str(TOFU)!r}, '--model', {str(f)!r}, '--quiet']))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert p.returncode == 2, p.stderr
    assert p.stderr.strip() == (f"evaldag: error: --model {f}: a GGUF checkpoint needs gguf (the evaldag[gguf] extra): "
                                "pip install 'evaldag[gguf]'")
