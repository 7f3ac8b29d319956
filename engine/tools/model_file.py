"""Load a model file (or a sample, or pasted code) into a ModelSpec; run it eagerly.

A model file is plain Python that defines `model` and `example_inputs`, and optionally `description`,
`dynamic_inputs` and `tolerance` (see docs/design.md, "The spine"). Everything that can go wrong while loading one
becomes a ModelFileError whose message names the problem, the user's file:line and what to try, because this is
the first thing a user sees when their code is wrong: the app shows the message as is.
"""

from __future__ import annotations

import ast
import linecache
import math
import re
import sys
import textwrap
import traceback
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from samples import sample_names, sample_path


# eq=False: comparing two specs field by field would compare tensors, which has no single truth value;
# a spec is a loaded object, identity is the right equality (and keeps it hashable despite its lists).
@dataclass(frozen=True, eq=False)
class ModelSpec:
    name: str
    filename: str  # as given to compile(): tracebacks, Dynamo graph breaks and provenance all report it
    source: str
    model: Any  # an nn.Module or a plain function
    example_inputs: tuple
    description: str = ""
    dynamic_inputs: list = field(default_factory=list)  # each entry a tuple shaped like example_inputs
    tolerance: dict | None = None  # {"atol": ..., "rtol": ...} for comparing against eager
    loss_fn: Any = None  # training (--train): loss_fn(output, *inputs) -> scalar; default: sum of float outputs


class ModelFileError(Exception):
    """A user-facing problem with a model file: `message` is one readable paragraph, `lineno` the user's line."""

    def __init__(self, message: str, lineno: int | None = None):
        super().__init__(message)
        self.message = message
        self.lineno = lineno


# A model file is code: the record carries its text (for graph breaks and provenance), the app's worker sends
# the record as JSON, so megabytes of source would be megabytes in every record. Larger files are refused
# with the reason, before anything runs.
MAX_SOURCE_BYTES = 2 << 20


def load_model_file(path_or_sample_name: str | Path) -> ModelSpec:
    """Load a .py file by path, or a sample by name (see samples/)."""
    path = _resolve(path_or_sample_name)
    _check_size(path.stat().st_size, str(path))
    return _load(path.read_text(encoding="utf-8"), str(path), name=path.stem)


def _check_size(size: int, filename: str) -> None:
    if size > MAX_SOURCE_BYTES:
        raise ModelFileError(
            f"{filename} is {size / (1 << 20):.1f} MB, more than the {MAX_SOURCE_BYTES >> 20} MB of source Glassbox "
            "reads from a model file. A model file is code: load large data (weights, tables, token lists) from a "
            "file of its own with torch.load or numpy, or make it with torch (torch.randn, torch.arange), and "
            "keep the .py file small.")


def load_model_source(source: str, filename: str = "<pasted>") -> ModelSpec:
    """Load model code given as text (the app's editor); `filename` is what errors and tracebacks will show."""
    name = filename.strip("<>") if filename.startswith("<") else Path(filename).stem
    _check_size(len(source.encode("utf-8", errors="replace")), filename)
    return _load(source, filename, name=name)


def run_eager(spec: ModelSpec, inputs: tuple | None = None):
    """Call the model on its example inputs (or `inputs`) without autograd; errors point at the user's line."""
    inputs = spec.example_inputs if inputs is None else inputs
    try:
        with torch.no_grad():
            return spec.model(*inputs)
    except Exception as exc:
        raise _error_from_exception(exc, spec.filename, spec.source, "while running the model eagerly") from exc


# --- finding the file -------------------------------------------------------------------------------------


def _resolve(path_or_sample_name: str | Path) -> Path:
    text = str(path_or_sample_name)
    path = Path(text).expanduser()
    if path.is_file():
        return path
    looks_like_path = isinstance(path_or_sample_name, Path) or text.endswith(".py") or "/" in text or "\\" in text
    if not looks_like_path and sample_path(text).is_file():
        return sample_path(text)
    what = f"No model file at {text!r}" if looks_like_path else f"There is no sample named {text!r}"
    raise ModelFileError(
        f"{what}. Pass the path to a .py file that defines `model` and `example_inputs`, "
        f"or one of the sample names: {', '.join(sample_names())}."
    )


# --- executing it -----------------------------------------------------------------------------------------


def _load(source: str, filename: str, name: str) -> ModelSpec:
    # fork_rng: a file without its own manual_seed still gets the same weights and inputs on every load, and
    # loading never disturbs the caller's random state.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        namespace = _execute(source, filename, name)
        model = _get_model(namespace, source, filename)
        example_inputs = _get_inputs(namespace, "example_inputs", source, filename)
        dynamic_inputs = _get_dynamic_inputs(namespace, len(example_inputs), source, filename)
    return ModelSpec(
        name=name,
        filename=filename,
        source=source,
        model=model,
        example_inputs=example_inputs,
        description=_get_description(namespace, source, filename),
        dynamic_inputs=dynamic_inputs,
        tolerance=_get_tolerance(namespace, source, filename),
        loss_fn=_get_loss_fn(namespace, source, filename),
    )


def _execute(source: str, filename: str, name: str) -> dict:
    try:
        code = compile(source, filename, "exec", dont_inherit=True)
    except SyntaxError as exc:  # also IndentationError and TabError
        raise _syntax_error(exc, source, filename) from None
    except ValueError as exc:  # e.g. a NUL byte in the text
        raise ModelFileError(f"{filename} cannot be compiled as Python: {exc}.") from None

    # Keep the exact text in linecache: tracebacks and Dynamo's graph-break excerpts then show these lines even
    # for pasted code, or after the file on disk has changed. mtime None means "never re-read from disk".
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
    # Register the module as if it were imported, so dataclasses, pickle and inspect can find it by name.
    module = types.ModuleType("glassbox_model_" + re.sub(r"\W", "_", name))
    module.__file__ = filename
    sys.modules[module.__name__] = module
    try:
        exec(code, module.__dict__)
    except (Exception, SystemExit) as exc:
        raise _error_from_exception(exc, filename, source, "while running the file") from exc
    return module.__dict__


def _syntax_error(exc: SyntaxError, source: str, filename: str) -> ModelFileError:
    lineno = exc.lineno
    line = (exc.text or _source_line(source, lineno)).rstrip()
    stripped = line.lstrip()
    excerpt = f"\n\n    {stripped}" if stripped else ""
    col = (exc.offset or 0) - 1 - (len(line) - len(stripped))  # 0-based, within the stripped line
    if stripped and 0 <= col <= len(stripped):
        same_line_end = exc.end_offset if exc.end_lineno == lineno and exc.end_offset else None
        end = col + 1 if same_line_end is None else same_line_end - 1 - (len(line) - len(stripped))
        excerpt += "\n    " + " " * col + "^" * max(1, min(end, len(stripped) + 1) - col)
    where = f"{filename}:{lineno}" if lineno else filename
    return ModelFileError(
        f"{type(exc).__name__} at {where}: {exc.msg.rstrip('.')}.{excerpt}\n\n"
        "Fix that line and load the file again; if it looks right, check the line before it for an unclosed "
        "bracket or quote.",
        lineno,
    )


# --- turning an exception into a message about the user's line --------------------------------------------


def _error_from_exception(exc: BaseException, filename: str, source: str, doing: str) -> ModelFileError:
    """The one place that maps a traceback to the user's file: the deepest frame whose code came from it."""
    frames = list(traceback.walk_tb(exc.__traceback__))
    user = [(frame, lineno) for frame, lineno in frames if frame.f_code.co_filename == filename]
    lineno = user[-1][1] if user else None
    what = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    if lineno is None:
        # nothing of the user's code ran: the call itself was wrong (most often, the wrong number of inputs)
        return ModelFileError(f"{what} ({doing}; no line of {filename} ran). Check that the inputs match the "
                              "arguments of what was called.", None)
    where = f"raised at {filename}:{lineno}"
    if frames and frames[-1][0].f_code.co_filename != filename:  # it came from a library the user's line called
        inner = frames[-1][0].f_code
        where += f", inside {inner.co_name}() in {Path(inner.co_filename).name}"
    line = _source_line(source, lineno).strip()
    excerpt = f"\n\n    {line}\n\n" if line else " "
    return ModelFileError(
        f"{what} ({where}, {doing}).{excerpt}Check that line and the values it uses (shapes, dtypes, names).",
        lineno,
    )


def _source_line(source: str, lineno: int | None) -> str:
    lines = source.splitlines()
    return lines[lineno - 1] if lineno and 0 < lineno <= len(lines) else ""


def _a(value: Any) -> str:
    """ "an int", "a list": the type of a value, for messages."""
    kind = type(value).__name__
    return f"an {kind}" if kind[0].lower() in "aeiou" else f"a {kind}"


def _definition_line(source: str, name: str) -> int | None:
    """The line of the last top-level statement that binds `name` (where to point an error about its value)."""
    found = None
    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
            found = node.lineno
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(n, ast.Name) and n.id == name for t in targets for n in ast.walk(t)):
                found = node.lineno
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            if any((alias.asname or alias.name.split(".")[0]) == name for alias in node.names):
                found = node.lineno
    return found


def _value_error(what: str, label: str, source: str, filename: str) -> ModelFileError:
    """An error about a value the file defined; `label` may index into it ("dynamic_inputs[2]")."""
    lineno = _definition_line(source, label.split("[")[0])
    where = f"{filename}:{lineno}" if lineno else filename
    return ModelFileError(f"`{label}` (defined at {where}) {what}", lineno)


# --- checking what the file defined ------------------------------------------------------------------------


def _require(namespace: dict, name: str, filename: str, hint: str) -> Any:
    if name in namespace:
        return namespace[name]
    defined = [k for k, v in namespace.items() if not k.startswith("_") and not isinstance(v, types.ModuleType)]
    listing = ", ".join(defined) if defined else "nothing (no public names)"
    raise ModelFileError(f"{filename} does not define `{name}`. It defines: {listing}. {hint}")


def _get_model(namespace: dict, source: str, filename: str) -> Any:
    own_modules = [v.__name__ for v in namespace.values() if isinstance(v, type) and issubclass(v, torch.nn.Module)
                   and v.__module__ == namespace["__name__"]]
    example = f"{own_modules[-1]}()" if own_modules else "MyModule()"
    model = _require(namespace, "model", filename, f"Add `model = {example}` (an nn.Module instance) or a function "
                     "named `model`.")
    if isinstance(model, type) and issubclass(model, torch.nn.Module):
        raise _value_error(f"is the class {model.__name__}, not an instance of it. Write "
                           f"`model = {model.__name__}(...)`.", "model", source, filename)
    if not callable(model):
        raise _value_error(f"is {_a(model)}, which cannot be called. It must be an nn.Module instance "
                           "or a function.", "model", source, filename)
    return model


def _get_inputs(namespace: dict, name: str, source: str, filename: str) -> tuple:
    value = _require(namespace, name, filename, "Add `example_inputs = (torch.randn(...),)`: a tuple of tensors, "
                     "one per argument of the model.")
    return _as_input_tuple(value, name, source, filename)


def _as_input_tuple(value: Any, name: str, source: str, filename: str) -> tuple:
    """A tuple of tensors from a tensor, a tuple/list of tensors, or a zero-argument function returning one."""
    if callable(value) and not isinstance(value, torch.Tensor):
        try:
            value = value()
        except Exception as exc:
            raise _error_from_exception(exc, filename, source, f"while calling {name}()") from exc
    if isinstance(value, torch.Tensor):
        return (value,)
    if not isinstance(value, (tuple, list)):
        raise _value_error(f"is {_a(value)}; it must be a tuple of tensors (or a function returning "
                           "one).", name, source, filename)
    bad = [f"item {i} is {_a(v)}" for i, v in enumerate(value) if not isinstance(v, torch.Tensor)]
    if bad:
        raise _value_error(f"must hold only tensors, but {', '.join(bad)}. Make other arguments defaults of the "
                           "model, or tensors.", name, source, filename)
    return tuple(value)


def _get_dynamic_inputs(namespace: dict, arity: int, source: str, filename: str) -> list[tuple]:
    value = namespace.get("dynamic_inputs", [])
    if callable(value):
        try:
            value = value()
        except Exception as exc:
            raise _error_from_exception(exc, filename, source, "while calling dynamic_inputs()") from exc
    if not isinstance(value, (list, tuple)):
        raise _value_error(f"is {_a(value)}; it must be a list of input tuples, e.g. "
                           "`[(torch.randn(4, 8),), (torch.randn(9, 8),)]`.", "dynamic_inputs", source, filename)
    result = [_as_input_tuple(entry, f"dynamic_inputs[{i}]", source, filename) for i, entry in enumerate(value)]
    for i, inputs in enumerate(result):
        if len(inputs) != arity:
            raise _value_error(f"entry {i} has {len(inputs)} tensors but example_inputs has {arity}; each entry "
                               "must be a full set of model arguments.", "dynamic_inputs", source, filename)
    return result


def _get_description(namespace: dict, source: str, filename: str) -> str:
    text = namespace.get("description", namespace.get("__doc__")) or ""
    if not isinstance(text, str):
        raise _value_error(f"is {_a(text)}; it must be a markdown string.", "description", source,
                           filename)
    return textwrap.dedent(text).strip()


def _get_tolerance(namespace: dict, source: str, filename: str) -> dict | None:
    tolerance = namespace.get("tolerance")
    if tolerance is None:
        return None
    ok = isinstance(tolerance, dict) and set(tolerance) <= {"atol", "rtol"}
    if not ok or not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0
                         for v in tolerance.values()):
        raise _value_error("must be a dict like `dict(atol=1e-4, rtol=1e-4)` with finite, non-negative numbers "
                           "(inf or nan would pass any output).",
                           "tolerance", source, filename)
    return dict(tolerance)


def _get_loss_fn(namespace: dict, source: str, filename: str) -> Any:
    loss_fn = namespace.get("loss_fn")
    if loss_fn is not None and not callable(loss_fn):
        raise _value_error(f"is {_a(loss_fn)}; it must be a function `loss_fn(output, *inputs)` returning a "
                           "one-element tensor.", "loss_fn", source, filename)
    return loss_fn
