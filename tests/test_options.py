"""One option set (Note [One option set] in engine/options.py): the CLI, compare, the app, the record and the
Python API all take their options from engine/options.py, and the environment changes behaviour only through
the overrides the README lists."""
from __future__ import annotations

import dataclasses
import inspect
import re
from pathlib import Path

import pytest

from engine import options
from engine.options import Options
from engine.record import OptionsRecord

ROOT = Path(__file__).resolve().parents[1]


def _explore_parser():
    from engine.__main__ import build_parser

    parser = build_parser()
    commands = next(a for a in parser._actions if a.dest == "command")
    return commands.choices["explore"]


def test_every_flagged_option_is_an_explore_flag_with_its_choices():
    actions = {flag: action for action in _explore_parser()._actions for flag in action.option_strings}
    for name, info in options.infos().items():
        if info.cli is None:
            continue
        action = actions[info.cli]
        assert action.dest == options.cli_dest(name)
        if info.choices is not None and name != "mode":  # --mode takes several, comma-separated
            assert tuple(action.choices) == info.choices, name


def test_the_cli_refuses_a_choice_the_options_do_not_have(capsys):
    parser = _explore_parser()
    with pytest.raises(SystemExit):
        parser.parse_args(["softmax", "--templates", "sometimes"])
    assert "auto" in capsys.readouterr().err
    args = parser.parse_args(["softmax", "--freeze", "--backend", "triton"])
    assert args.freeze and args.backend == "triton" and args.templates == "auto"


def test_compare_keys_are_the_options_compare_names():
    from engine.tools import compare

    option_keys = {info.compare for info in options.infos().values() if info.compare}
    assert set(compare.KEYS) == option_keys | {"compiler", "file"}
    assert {f.name for f in dataclasses.fields(compare.Side)} == set(compare.KEYS)
    side = compare.parse_side(["templates=off", "freezing=on", "max_nodes=3", "backend=triton"])
    assert (side.templates, side.freezing, side.max_nodes, side.backend) == ("off", True, 3, "triton")
    with pytest.raises(compare.SettingError, match="auto, on, off"):
        compare.parse_side(["templates=sometimes"])
    assert compare.Side(fusion=False, dynamic=True).label() == "dynamic=true, fusion=off"


def test_the_record_options_are_the_recorded_options():
    recorded = {name for name, info in options.infos().items() if info.recorded}
    assert {f.name for f in dataclasses.fields(OptionsRecord)} == recorded
    defaults = {f.name: f.default for f in dataclasses.fields(Options)}
    for f in dataclasses.fields(OptionsRecord):
        if f.name != "rewrites":  # the record holds the passes that ran; the option, the setting
            assert f.default == defaults[f.name], f.name
    record = Options(templates="off", train=True).record(("attention",), "min-memory")
    assert record.templates == "off" and record.train and record.rewrites == ["attention"]
    assert record.partition == "min-memory"


def test_the_partition_option_wins_over_its_environment_override(monkeypatch):
    from engine.partition import partition_policy

    monkeypatch.delenv("GLASSBOX_PARTITION", raising=False)
    assert partition_policy(None) == "min-memory"
    monkeypatch.setenv("GLASSBOX_PARTITION", "save-library-operands")
    assert partition_policy(None) == "save-library-operands"
    assert partition_policy("min-memory") == "min-memory"
    with pytest.raises(ValueError, match="min-memory, save-library-operands"):
        Options(partition="fastest")


def test_explore_and_compile_take_the_options_with_their_defaults():
    from engine import pipeline

    explore = inspect.signature(pipeline.explore).parameters
    compile_ = inspect.signature(pipeline.compile).parameters
    for f in dataclasses.fields(Options):
        assert explore[f.name].default == f.default, f.name
        if f.name in compile_:
            assert compile_[f.name].default == f.default, f.name
    with pytest.raises(ValueError, match="auto, channels_last, contiguous"):
        Options(layout="sideways")
    with pytest.raises(ValueError, match="cpp, triton"):
        Options(backend="rust")


def test_the_app_offers_the_options_choices():
    from app import share, state

    for name in ("backend", "device", "mode"):
        assert share.CHOICES[name] == options.infos()[name].choices
    assert tuple(state.BACKENDS) == options.infos()["backend"].choices
    assert state.modes_for("cuda")[-1] == "reduce-overhead" and "reduce-overhead" not in state.modes_for("cpu")
    args = options.cli_args(Options(backend="triton", device="cpu", dynamic=True, freezing=True, mode="max-autotune"))
    parsed = _explore_parser().parse_args(["softmax", *args])
    assert (parsed.backend, parsed.dynamic, parsed.freeze, parsed.mode) == ("triton", True, True, ("max-autotune",))


def test_every_environment_variable_read_is_a_documented_override():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("## Environment"):]
    section = section[:section.find("\n## ", 1)] if "\n## " in section[1:] else section
    read = set()
    for package in ("engine", "app"):
        for path in (ROOT / package).rglob("*.py"):
            read |= set(re.findall(r"\bGLASSBOX_[A-Z_]+", path.read_text(encoding="utf-8")))
    missing = sorted(name for name in read if name not in section)
    assert not missing, f"read but not listed in README's Environment section: {missing}"
