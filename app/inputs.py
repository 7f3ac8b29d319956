"""Edit the example inputs' shapes and dtypes without touching the user's code.

The app shows the inputs as text like `float32[64, 256], float32[8]` (the notation the engine uses in
record["runs"][].inputs). When the user changes it, the explored file is the user's code plus an appended block
that rebuilds `example_inputs` with the new shapes and dtypes from the originals (same value ranges, same seed),
so every line number of the user's code stays the same.
"""
from __future__ import annotations

import re

DTYPES = ("float32", "float16", "bfloat16", "float64", "int64", "int32", "int16", "int8", "uint8", "bool")
SPEC = re.compile(r"\s*([a-z0-9]+)\s*\[\s*([0-9,\s]*)\]\s*")


class InputSpecError(ValueError):
    pass


def format_inputs(inputs: list[dict] | None) -> str:
    if not inputs:
        return ""
    return ", ".join(f"{i['dtype']}[{', '.join(str(s) for s in i['shape'])}]" for i in inputs)


def parse_inputs(text: str) -> list[dict]:
    """`float32[64, 256], int64[8]` -> [{"dtype": "float32", "shape": [64, 256]}, ...]; InputSpecError if wrong."""
    specs = []
    position = 0
    text = text.strip()
    while position < len(text):
        match = SPEC.match(text, position)
        if not match:
            raise InputSpecError(f"Could not read the input at {text[position:position + 20]!r}: write each input "
                                 "as dtype[sizes], for example `float32[64, 256]`, separated by commas.")
        dtype, sizes = match.group(1), match.group(2)
        if dtype not in DTYPES:
            raise InputSpecError(f"Unknown dtype {dtype!r}; use one of: {', '.join(DTYPES)}.")
        shape = [int(s) for s in sizes.replace(" ", "").split(",") if s]
        if any(s <= 0 for s in shape) or any(s > 1 << 20 for s in shape):
            raise InputSpecError(f"Sizes must be between 1 and {1 << 20}; got {shape}.")
        numel = 1
        for size in shape:
            numel *= size
        if numel > 64 << 20:
            raise InputSpecError(f"{dtype}{shape} has {numel:,} elements; keep each input under 64M elements.")
        specs.append({"dtype": dtype, "shape": shape})
        position = match.end()
        if position < len(text):
            if text[position] != ",":
                raise InputSpecError(f"Expected a comma after {match.group(0).strip()!r}.")
            position += 1
    return specs


OVERRIDE_TEMPLATE = '''

# --- Glassbox app: example inputs resized to {described} (the code above is unchanged) ---
def _glassbox_example_inputs(_specs={specs!r}, _given=example_inputs):
    import torch as _torch
    _original = _given() if callable(_given) else _given
    _original = (_original,) if isinstance(_original, _torch.Tensor) else tuple(_original)
    if len(_original) != len(_specs):
        raise ValueError(f"the app was given {{len(_specs)}} input shapes but example_inputs has "
                         f"{{len(_original)}} tensors; give one dtype[sizes] per input")
    _generator = _torch.Generator().manual_seed(0)
    _resized = []
    for _old, (_dtype, _shape) in zip(_original, _specs):
        _dtype = getattr(_torch, _dtype)
        if list(_old.shape) == list(_shape):
            _resized.append(_old.to(_dtype))
        elif _dtype == _torch.bool:
            _resized.append(_torch.rand(_shape, generator=_generator) < 0.5)
        elif not _dtype.is_floating_point:
            _low, _high = (int(_old.min()), int(_old.max()) + 1) if _old.numel() else (0, 2)
            _resized.append(_torch.randint(_low, max(_high, _low + 1), _shape, generator=_generator, dtype=_dtype))
        elif _old.numel() and bool((_old == _old.flatten()[0]).all()):
            _resized.append(_torch.full(_shape, float(_old.flatten()[0]), dtype=_dtype))
        else:
            _resized.append(_torch.randn(_shape, generator=_generator).to(_dtype))
    return tuple(_resized)


example_inputs = _glassbox_example_inputs
'''


def with_inputs(source: str, specs: list[dict]) -> str:
    """The user's code with `example_inputs` rebuilt to `specs` (appended, so line numbers stay the same)."""
    if not specs:
        return source
    pairs = [(s["dtype"], tuple(s["shape"])) for s in specs]
    return source.rstrip("\n") + "\n" + OVERRIDE_TEMPLATE.format(described=format_inputs(specs), specs=pairs)
