"""The product tools as verbs (Note [Tool verbs] in engine/tools/verbs.py): `python -m engine sweep KIND` and
`bench KIND` reach each tool with its own flags, a wrong kind is a usage error, and `bench FILE_OR_SAMPLE`
keeps its meaning."""
import importlib

import pytest

from engine.__main__ import main
from engine.tools.verbs import TOOLS, tool_module


@pytest.mark.parametrize("verb,kind", [(verb, kind) for verb, kinds in TOOLS.items() for kind in kinds])
def test_each_verb_reaches_its_tool_with_the_tools_own_flags(verb, kind, capsys):
    assert callable(importlib.import_module(TOOLS[verb][kind]).main)
    with pytest.raises(SystemExit) as exit_info:
        main([verb, kind, "--help"])
    assert exit_info.value.code == 0
    assert "usage:" in capsys.readouterr().out


def test_a_tool_verb_is_only_the_word_right_after_the_verb():
    assert tool_module(["bench", "gemm", "--device", "cpu"]) == "engine.tools.bench_gemm"
    assert tool_module(["sweep", "hostile"]) == "engine.tools.sweep_hostile"
    assert tool_module(["bench", "softmax", "--json"]) is None  # a sample: the CLI's own bench
    assert tool_module(["explore", "gemm"]) is None
    assert tool_module(["bench"]) is None


@pytest.mark.parametrize("argv", [["sweep"], ["sweep", "everything"]])
def test_a_sweep_without_a_known_kind_is_a_usage_error_that_lists_the_kinds(argv, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    error = capsys.readouterr().err
    assert "kind" in error and (len(argv) == 1 or all(kind in error for kind in TOOLS["sweep"]))


def test_a_tools_wrong_flag_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["sweep", "hostile", "--no-such-flag"])
    assert exit_info.value.code == 2
    assert "--no-such-flag" in capsys.readouterr().err
