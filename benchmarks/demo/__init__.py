"""Assets behind ``evaldag demo``: fictitious-author data in TOFU's format and three tiny
checkpoints, built by ``tests/asset_builders/demo/make_assets.py`` in the repository
(see docs/demo-assets.md).

Importing this package imports neither torch nor transformers.
"""

from pathlib import Path

ASSETS = Path(__file__).resolve().parent / "assets"
DATA = ASSETS / "data"              # <subset>.json (JSON lines) + README.md
TOKENIZER = ASSETS / "tokenizer"    # the tokenizer alone (each model folder holds a copy)
MODEL_NAMES = ("target", "unlearned", "retain")


def model_path(name: str) -> Path:
    """Folder of one demo checkpoint (model + tokenizer), for ``from_pretrained``."""
    if name not in MODEL_NAMES:
        raise ValueError(f"unknown demo model {name!r}; expected one of {', '.join(MODEL_NAMES)}")
    return ASSETS / "models" / name
