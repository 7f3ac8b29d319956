"""Sample models, one per file, discovered by file name.

Each sample file defines `model`, `example_inputs` and `description` (and optionally `dynamic_inputs`,
`tolerance`); engine/model_file.py loads them. This module stays import-light (no torch) so listing the
samples is instant, e.g. for the app's sidebar.
"""

from pathlib import Path

SAMPLES_DIR = Path(__file__).resolve().parent
DEFAULT_SAMPLE = "scale_bias_relu"


def sample_names() -> list[str]:
    """Every sample file's name (without .py), sorted; files starting with "_" are helpers, not samples."""
    return sorted(p.stem for p in SAMPLES_DIR.glob("*.py") if not p.name.startswith("_"))


def sample_path(name: str) -> Path:
    return SAMPLES_DIR / f"{name}.py"
