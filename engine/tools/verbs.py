"""The product tools as verbs of the command line: the sweeps and benches whose tables are committed to
reports/ (issue 30).

    python -m engine sweep opinfo|models|explore|hostile [FLAGS]
    python -m engine bench gemm|train|gpu [FLAGS]

Note [Tool verbs]
Each tool is a module of engine/tools with `main(argv) -> int` and flags of its own; the CLI hands it the rest
of the command line, so a tool's flags and its `--help` are its own and `python -m engine bench FILE_OR_SAMPLE`
keeps its meaning (no sample is called gemm, train or gpu). The kind comes right after the verb. Modules are
imported only when their verb runs: a sweep pulls in torch's OpInfo database, a bench the model zoo.
"""
from __future__ import annotations

import importlib

TOOLS: dict[str, dict[str, str]] = {
    "sweep": {"opinfo": "engine.tools.sweep_opinfo", "models": "engine.tools.sweep_models",
              "explore": "engine.tools.sweep_explore",
              "hostile": "engine.tools.sweep_hostile"},
    "bench": {"gemm": "engine.tools.bench_gemm", "train": "engine.tools.bench_train",
              "gpu": "engine.tools.bench_gpu"},
}


def tool_module(argv: list[str]) -> str | None:
    """The module that runs `argv` (the command line after `python -m engine`), or None for the CLI's own."""
    if len(argv) >= 2 and argv[1] in TOOLS.get(argv[0], {}):
        return TOOLS[argv[0]][argv[1]]
    return None


def run_tool(module: str, argv: list[str]) -> int:
    """Run one tool on its own flags; its exit code is the command's."""
    code = importlib.import_module(module).main(argv)
    return int(code or 0)
