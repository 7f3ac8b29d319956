"""The compare page's presets: the questions people ask of two compiles, each a pair of settings.

Note [Compare presets]
Each preset is a pair of compare settings (KEY=VALUE, engine/tools/compare.py) on the same backend and device:
C++ against Triton under the CPU interpreter compares a compiler with an emulator, and its times mean nothing.
The sidebar's backend and device are added to both sides; an Inductor side takes the device only (it has no
backend choice). "Before vs after an edit" keeps every setting and gives side B the edited code instead.
"""
from __future__ import annotations

FUSION = "fusion on vs off"
TEMPLATES = "GEMM templates on vs off"
EDIT = "this code before vs after an edit"
INDUCTOR = "Glassbox vs Inductor"
CUSTOM = "custom"

PRESETS: dict[str, tuple[list[str], list[str]] | None] = {
    FUSION: (["fusion=on"], ["fusion=off"]),
    TEMPLATES: (["templates=on"], ["templates=off"]),
    EDIT: ([], []),
    INDUCTOR: (["compiler=glassbox"], ["compiler=inductor"]),
    CUSTOM: None,
}


def sides(preset: str, backend: str, device: str) -> tuple[list[str], list[str]] | None:
    """A preset's two sides as compare's KEY=VALUE lists, on the sidebar's backend and device (None: custom)."""
    pair = PRESETS[preset]
    if pair is None:
        return None

    def placed(side: list[str]) -> list[str]:
        inductor = "compiler=inductor" in side
        return side + ([] if inductor else [f"backend={backend}"]) + [f"device={device}"]
    return placed(pair[0]), placed(pair[1])
