"""The layers import only downward, and no module imports itself back through others (imports inside functions
included: a cycle hidden in a function is still a cycle).

    record, words                the record's data types, and its text in a user's words (standard library only)
    ir < lowering < schedule < runtime < codegen < run, capture, decompose, rewrite < report < pipeline < reference
                                 the compiler core; the runtime (engine/runtime: build, load, launch, tune,
                                 replay, measure what codegen printed) imports only ir/, the record and itself,
                                 and codegen (which prints text and never runs it) nothing of the runtime: the
                                 two meet only in the data of engine/ir/artifacts.py
    tools                        engine/tools/*: may use the core, never the reverse
    visualizers                  record -> DOT / HTML / figures: from the engine, only engine.record and
                                 engine.words (the record's text as the CLI says it to a user)
    app, engine/__main__.py      the entry points, above everything: the Streamlit UI, and the command line
                                 (whose `report` command renders the record with visualizers/html_report.py)
    tests                        import the engine, never scripts/ (one-off diagnostics, Note [Tool verbs])

Run `python tests/test_layering.py` to print the import graph (module -> what it imports).
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("engine", "visualizers", "app")

# (prefix, rank): a module may import modules of its own rank or lower. Longest prefix wins.
RANKS = [
    ("engine.record", 0), ("engine.options", 0), ("engine.words", 0),
    ("engine.ir", 1),
    ("engine.lowering", 2),
    ("engine.schedule", 3),
    ("engine.runtime", 4),
    ("engine.codegen", 5),
    ("engine.run", 6), ("engine.verdict", 6), ("engine.capture", 6), ("engine.break_fixes", 6),
    ("engine.decompose", 6), ("engine.rewrite", 6), ("engine.shadow64", 6), ("engine.train_verdict", 6),
    ("engine.eager_spread", 6),
    ("engine.report", 7),
    ("engine.pipeline", 8), ("engine", 8),
    ("engine.reference", 9),
    ("engine.tools", 10),
    ("visualizers", 11),
    ("app", 12), ("engine.__main__", 12),
]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            found[module_name(path)] = path
    return found


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """Our modules that `name` imports, anywhere in the file (functions included). `from a import b` counts as
    a.b when that is a module, else as a."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def import_graph() -> dict[str, set[str]]:
    found = modules()
    known = set(found)
    return {name: imports_of(name, path, known) for name, path in found.items()}


def rank(name: str) -> int:
    best = max((prefix for prefix, _ in RANKS if name == prefix or name.startswith(prefix + ".")), key=len)
    return dict(RANKS)[best]


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                item = stack.pop()
                on_stack.discard(item)
                component.append(item)
                if item == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return components


def test_no_import_cycles():
    found = cycles(import_graph())
    assert not found, "import cycles (imports inside functions count):\n" + "\n".join(" <-> ".join(c) for c in found)


def test_layers_import_only_downward():
    upward = [f"{source} (rank {rank(source)}) imports {target} (rank {rank(target)})"
              for source, targets in import_graph().items() for target in sorted(targets)
              if rank(target) > rank(source)]
    assert not upward, "upward imports:\n" + "\n".join(upward)


RUNTIME_MAY_IMPORT = ("engine.ir", "engine.record", "engine.runtime")


def test_the_runtime_imports_only_the_ir_the_record_and_itself():
    """The runtime runs what codegen printed; what it needs from the compiler travels as data on the kernel
    artifacts, so it never asks lowering/, schedule/ or codegen/ a question at launch time."""
    wrong = [f"{source} imports {target}" for source, targets in import_graph().items()
             if source.startswith("engine.runtime") for target in sorted(targets)
             if not any(target == p or target.startswith(p + ".") for p in RUNTIME_MAY_IMPORT)]
    assert not wrong, "\n".join(wrong)


def test_codegen_imports_nothing_of_the_runtime():
    """Codegen hands the runtime data (engine/ir/artifacts.py: kernel launches, tune plans, template kernels,
    the wrapper's library calls and allocators); the runtime binds it. Neither asks the other a question."""
    wrong = [f"{source} imports {target}" for source, targets in import_graph().items()
             if source.startswith("engine.codegen") for target in sorted(targets)
             if target.startswith("engine.runtime")]
    assert not wrong, "\n".join(wrong)


# What running code looks like: codegen/ prints text and never runs it (CUDA graphs, loading, launching and
# timing are the runtime's).
RUNNING_NAMES = {"CUDAGraph", "replay", "perf_counter", "do_bench", "Event", "elapsed_time", "synchronize", "CDLL",
                 "build_library", "load_library", "load_source", "exec_module", "TritonLaunch", "TemplateLaunch",
                 "bind_launch", "measure", "measure_overhead"}
RUNNING_MODULES = {"time", "ctypes", "timeit", "triton.testing"}


def test_codegen_holds_no_cuda_graph_launch_or_timing_code():
    found = []
    for path in sorted((ROOT / "engine" / "codegen").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            name = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else \
                node.name if isinstance(node, (ast.FunctionDef, ast.ClassDef)) else None
            if name in RUNNING_NAMES:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} {name}")
            modules = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module] if isinstance(node, ast.ImportFrom) and node.module else []
            found += [f"{path.relative_to(ROOT)}:{node.lineno} imports {m}" for m in modules
                      if m in RUNNING_MODULES or m.startswith("engine.runtime")]
    assert not found, "running code in codegen/:\n" + "\n".join(found)


# the record, and its text said as the CLI says it (so the app and the CLI word a reason alike)
VISUALIZERS_MAY_IMPORT = ("engine.record", "engine.words")


def test_visualizers_read_only_the_record():
    wrong = [f"{source} imports {target}" for source, targets in import_graph().items()
             if source.startswith("visualizers") for target in targets
             if target.startswith("engine") and target not in VISUALIZERS_MAY_IMPORT]
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("name, allowed", [
    ("record.py", {"__future__", "dataclasses", "json", "math", "types", "typing"}),
    ("words.py", {"__future__", "re", "typing"}),
])
def test_the_record_and_its_words_need_only_the_standard_library(name, allowed):
    tree = ast.parse((ROOT / "engine" / name).read_text(encoding="utf-8"))
    imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                 and node.module}
    assert imported <= allowed, imported


def test_the_checker_sees_imports_inside_functions(tmp_path):
    # the layering test is only as good as its parser: a function-level import must count
    known = {"engine.ir.a", "engine.codegen.b"}
    path = tmp_path / "a.py"
    path.write_text("def f():\n    from engine.codegen.b import thing\n    return thing\n")
    assert imports_of("engine.ir.a", path, known) == {"engine.codegen.b"}
    assert cycles({"x": {"y"}, "y": {"z"}, "z": {"x"}, "w": {"x"}}) == [["x", "y", "z"]]


def script_paths_in(source: str) -> list[str]:
    """The strings in test code (docstrings aside) that name the scripts/ folder: a path to import or run."""
    tree = ast.parse(source)
    docstrings = {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Expr)
                  and isinstance(node.value, ast.Constant)}
    return [node.value for node in ast.walk(tree) if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and id(node) not in docstrings and re.search(r"(^|[/\\])scripts([/\\]|$)", node.value)]


def test_tests_import_no_script():
    """scripts/ keeps one-off diagnostics; a tool worth a test is an engine module (Note [Tool verbs] in
    engine/tools/verbs.py), which tests import like any other."""
    found = [f"{path.relative_to(ROOT)}: {text!r}" for path in sorted((ROOT / "tests").glob("*.py"))
             if path.name != Path(__file__).name  # this file: the checks of the checker below
             for text in script_paths_in(path.read_text(encoding="utf-8"))]
    assert not found, "tests reaching into scripts/:\n" + "\n".join(found)
    assert script_paths_in('"""scripts/x.py, said"""\nsys.path.insert(0, str(ROOT / "scripts"))') == ["scripts"]
    assert script_paths_in('subprocess.run(["python", "scripts/x.py"])') == ["scripts/x.py"]


if __name__ == "__main__":
    for source, targets in sorted(import_graph().items()):
        print(f"{source} -> {', '.join(sorted(targets)) or '-'}")
    for component in cycles(import_graph()):
        print("CYCLE:", " <-> ".join(component))
