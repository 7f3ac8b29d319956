"""How to compile: the one option set. Every other shape of it derives from this dataclass: the CLI's flags
(engine/__main__.py), compare's KEY=VALUE keys (engine/tools/compare.py), the app's widgets and shareable URL
(app/), the record's `options` (engine/record.py OptionsRecord) and the keywords of engine.explore() and
engine.compile(). Each field carries its choices and its help in its metadata (`option(...)`).

Note [One option set]
An option added, renamed or given a new choice used to need the same edit in nine places, and they drifted
(compare had no `layout`, the app's choices were copies). Now a field here is the option: its choices validate
every caller, its help is the CLI's and the app's, and its `cli` and `compare` names are the contract those
interfaces keep (tests/test_options.py checks that each interface and the record agree with this file).
Behaviour never comes from the environment, except the documented overrides in README ("Environment").

Standard library and the record only: the app reads the choices without importing torch.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from engine.record import BACKENDS, MODES, OptionsRecord

DEVICES = ("cpu", "cuda")
TEMPLATE_MODES = ("auto", "on", "off")  # GEMM templates (Note [GEMM templates]): a heuristic decides, forced, off
LAYOUTS = ("auto", "channels_last", "contiguous")  # 4D tensors around convolutions (Note [Channels-last convolutions])
PARTITIONS = ("min-memory", "save-library-operands")  # Note [Operands the backward stores] (engine/partition.py)
BOOLEANS = {"true": True, "false": False, "on": True, "off": False, "1": True, "0": False, "yes": True, "no": False}


@dataclass(frozen=True)
class OptionInfo:
    """What an interface needs to show and check one option."""
    help: str
    choices: tuple[str, ...] | None = None  # None: a bool, a number or free text (checked by its owner)
    labels: dict[str, str] | None = None  # choice -> a longer name for people (the app's radio buttons)
    cli: str | None = None  # the CLI flag (`explore`, `report`, ...), or None: not a flag
    compare: str | None = None  # compare's KEY, or None: not a compare key
    on_off: bool = False  # a bool that compare spells on/off (else true/false)
    recorded: bool = True  # in the record's `options` (backend and device are the record's own fields)
    checked: bool = True  # Options() refuses a value outside `choices` (a device may also be "cuda:1", "meta")


def option(default, help: str, **info) -> Any:
    return field(default=default, metadata={"option": OptionInfo(help, **info)})


@dataclass(frozen=True)
class Options:
    """How to compile; passed to every stage (nothing is configured by setting module attributes)."""
    backend: str = option("cpp", "the code generator: C++/OpenMP or Triton", choices=BACKENDS,
                          labels={"cpp": "C++ / OpenMP", "triton": "Triton"}, cli="--backend", compare="backend",
                          recorded=False)
    device: str = option("cpu", "where the model and its kernels run", choices=DEVICES, cli="--device",
                         compare="device", recorded=False, checked=False)
    dynamic: bool | None = option(None, "compile with dynamic shapes (size symbols); unset: as Dynamo decides",
                                  cli="--dynamic", compare="dynamic")
    mode: str = option("default", "torch.compile's mode: default, reduce-overhead (CUDA graphs, device cuda) or "
                                  "max-autotune", choices=MODES, cli="--mode", compare="mode")
    # what-if knobs (engine compare): fusion off, at most max_fused_nodes IR nodes a kernel
    fusion: bool = option(True, "fuse IR nodes into kernels", compare="fusion", on_off=True)
    max_fused_nodes: int | None = option(None, "at most this many IR nodes a kernel", compare="max_nodes")
    templates: str = option("auto", "GEMM templates (matmuls as generated kernels with fused epilogues): auto lets "
                                    "the heuristic decide and say why, on forces them, off keeps library calls",
                            choices=TEMPLATE_MODES, cli="--templates", compare="templates")
    train: bool = option(False, "run a training step: loss (the file's loss_fn, or the sum of the outputs), "
                                "backward; records forward, backward and the partition, checks every gradient",
                         cli="--train")
    layout: str = option("auto", "4D tensors around convolutions: auto (a heuristic), channels_last, contiguous",
                         choices=LAYOUTS)
    # graph rewrites (Note [Rewrite stage]): None = the default passes, "none", "all", "a,b", "-a"; the pipeline
    # resolves it to the pass names that run (engine.rewrite.resolve)
    rewrites: Any = option(None, "graph rewrites before lowering: default, none, all, the passes to run "
                                 "(attention,...) or the ones to turn off (-attention)", cli="--rewrites",
                           compare="rewrites")
    partition: str | None = option(None, "the training partition: min-memory recomputes cheap values to save "
                                         "memory, save-library-operands keeps what a backward library call reads "
                                         "(unset: GLASSBOX_PARTITION, else min-memory)",
                                   choices=PARTITIONS, cli="--partition", compare="partition")
    freezing: bool = option(False, "inference only: parameters and buffers become constants, constant work and "
                                   "convolution + batch norm are folded at compile time (Note [Freezing])",
                            cli="--freeze", compare="freezing", on_off=True)

    def __post_init__(self):
        for name, info in infos().items():
            value = getattr(self, name)
            if info.checked and info.choices is not None and value is not None and value not in info.choices:
                raise ValueError(f"unknown {name} {value!r}; choose one of {', '.join(info.choices)}")
        if self.freezing and self.train:
            raise ValueError("freezing=True is for inference: a training step updates the parameters it would bake in")
        if self.mode == "reduce-overhead" and not self.device.startswith("cuda"):
            raise ValueError('mode="reduce-overhead" records CUDA graphs: it needs device="cuda"')

    def record(self, rewrites: tuple[str, ...], partition: str) -> OptionsRecord:
        """The record's `options`: every recorded field, with what the pipeline resolved: the rewrites that ran
        and the partition's policy."""
        values = {name: getattr(self, name) for name, info in infos().items() if info.recorded}
        values.update(rewrites=list(rewrites), partition=partition)
        return OptionsRecord(**values)


def infos() -> dict[str, OptionInfo]:
    """Each option's OptionInfo, in field order."""
    return {f.name: f.metadata["option"] for f in dataclasses.fields(Options)}


def default(name: str):
    return {f.name: f.default for f in dataclasses.fields(Options)}[name]


def by_compare_key() -> dict[str, str]:
    """compare's KEY -> the option's name (max_nodes -> max_fused_nodes)."""
    return {info.compare: name for name, info in infos().items() if info.compare}


def by_cli_flag() -> dict[str, str]:
    return {info.cli: name for name, info in infos().items() if info.cli}


def cli_dest(name: str) -> str:
    """The argparse attribute of an option's flag (--freeze -> freeze)."""
    return infos()[name].cli.lstrip("-").replace("-", "_")


def cli_argument(name: str, **overrides) -> tuple[tuple[str, ...], dict]:
    """(flags, add_argument keywords) of an option's CLI flag: a bool is a switch, a choice a choices list;
    `overrides` replace what a command does its own way (bench's several modes)."""
    info, value = infos()[name], default(name)
    if isinstance(value, bool) or name == "dynamic":
        keywords: dict = {"action": "store_true", "help": info.help}
    else:
        keywords = {"default": value, "help": info.help}
        if info.choices is not None:
            keywords["choices"] = info.choices
    keywords.update(overrides)
    return (info.cli,), keywords


def add_flag(parser, name: str, **overrides) -> None:
    """Add an option's flag (cli_argument) to an argparse parser; `choices=None` in overrides drops the list."""
    flags, keywords = cli_argument(name, **overrides)
    parser.add_argument(*flags, **{k: v for k, v in keywords.items() if v is not None or k != "choices"})


def cli_args(options: Options, names: tuple[str, ...] | None = None) -> list[str]:
    """The CLI flags that give `options` (those of `names`, else all with a flag): a switch when its bool is on,
    a flag and its value where it differs from the default (the app's worker command lines)."""
    args: list[str] = []
    for name, info in infos().items():
        if info.cli is None or (names is not None and name not in names):
            continue
        value = getattr(options, name)
        if isinstance(default(name), bool) or name == "dynamic":
            args += [info.cli] if value else []
        elif value is not None and value != default(name):
            args += [info.cli, str(value)]
    return args


def compare_description(name: str) -> str:
    """What compare's KEY takes, in words (its usage error lists these)."""
    info, value = infos()[name], default(name)
    if info.choices is not None:
        return ", ".join(info.choices)
    if isinstance(value, bool) or name == "dynamic":
        return "on, off" if info.on_off else "true, false"
    if name == "max_fused_nodes":
        return "a positive integer"
    return info.help.split(": ", 1)[-1]
