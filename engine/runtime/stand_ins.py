"""A generated wrapper's kernels swapped for stand-ins for a while, and put back.

Note [Stand-ins in the wrapper's namespace]
The profiler, the first-call measurement and the numerics bisect run the unchanged generated wrapper with the
kernels it looks up by name (its namespace entries) replaced by stand-ins that time, skip or copy them. Two
rules keep what they see true. The entries are read when the stand-ins go in, not earlier: a kernel's first
launch may have put a bound launcher under its name (Note [Bound Triton launches]). And a Triton launch that
binds while it is swapped out installs its launcher into what will be put back, not over its stand-in: else
the rest of that call runs past the stand-in unseen (the bisect then calls a wrong kernel clean), and the
launch object, put back afterwards, keeps the slower unbound path.
"""
from __future__ import annotations

import contextlib
import functools
from typing import Any, Callable, Iterator


def wrapper_function(call: Callable) -> Callable:
    """The generated `call` function itself (a CUDA-graph replay keeps it as `.call`)."""
    return getattr(call, "call", call)


def kernel_entries(kernels) -> dict[str, str]:
    """Namespace key -> kernel name, for every scheduled kernel the wrapper launches or calls: a generated
    kernel under its own name, a library or eager call as `op_<node>` for each of its nodes."""
    entries = {}
    for kernel in kernels:
        if kernel.kind in ("pointwise", "reduction", "template"):
            entries[kernel.name] = kernel.name
        else:
            for node in kernel.nodes:
                entries[f"op_{node.name}"] = kernel.name
    return entries


@contextlib.contextmanager
def swapped(namespace: dict, keys, stand_in: Callable[[str, Any], Any]) -> Iterator[dict]:
    """Within the block, each of `keys` found in `namespace` is `stand_in(key, original)`; the originals (as
    the block leaves them: a launcher bound meanwhile replaces its launch object) are put back after it.
    Yields the stand-ins by key."""
    originals = {key: namespace[key] for key in keys if key in namespace}
    redirected = {}
    for key, original in originals.items():
        install = getattr(original, "install", None)
        if install is not None:  # a TritonLaunch: Note [Bound Triton launches]
            redirected[key] = (original, install)
            original.install = functools.partial(originals.__setitem__, key)
    stand_ins = {key: stand_in(key, original) for key, original in originals.items()}
    namespace.update(stand_ins)
    try:
        yield stand_ins
    finally:
        for original, install in redirected.values():
            original.install = install
        namespace.update(originals)
