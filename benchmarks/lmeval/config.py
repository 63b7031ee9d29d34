"""What ``evaldag run lmeval`` reads: the tasks, their settings and the model options."""

from __future__ import annotations

from pydantic import Field

from ..common import ModelOptions


class LmevalConfig(ModelOptions):
    """lm-evaluation-harness tasks on ``model``.

    ``tasks``: task, group or tag names (its ``--tasks``); ``include_path``: a folder of
    local task YAML files (its ``--include_path``); ``limit``: documents per task (a
    fraction below 1); ``add_bos_token`` / ``prefix_token_id``: HFLM's settings of the
    same name (None: HFLM's defaults). The chat template is ModelOptions' ``template``
    (``--template chat`` and ``--system-prompt``).
    """

    tasks: tuple[str, ...] = Field(min_length=1)
    include_path: str | None = None
    num_fewshot: int | None = Field(None, ge=0)
    limit: float | None = Field(None, gt=0)
    bootstrap_iters: int = Field(100000, ge=0)
    add_bos_token: bool | None = None
    prefix_token_id: int | None = Field(None, ge=0)
