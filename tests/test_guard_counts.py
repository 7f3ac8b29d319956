"""The Graph breaks page counts guards and checks apart (Note [Guards and checks] in app/guards_pane.py): the
record's guards (what Dynamo exported as it compiled) and one version's guard tree (what it runs) are different
lists, so no count of the one may be called by the other's name. Rendered through streamlit's AppTest, no
worker."""
from __future__ import annotations

import re

from streamlit.testing.v1 import AppTest

from engine.tools import guard_tree

TREE = "\n".join([  # one version's guard tree as str(guard_manager) prints it: 5 checks
    "| +- TENSOR_MATCH: check_tensor(L['x'], Tensor, DispatchKeySet(CPU), torch.float32, device=None, "
    "requires_grad=False, size=[8, 16], stride=[16, 1])",
    "| +- DIMENSION_DYNAMIC_MARKING_GUARD: hasattr(L['x'], '_dynamo_dynamic_indices') == False",
    "| +- GLOBAL_STATE: ___check_global_state()",
    "| +- ID_MATCH: ___check_obj_id(G['net'], 140000000000000)",
    "| +- TYPE_MATCH: ___check_type_id(G['net'].config, 94000000000000)",
])
GUARDS = ["shape_env", "grad_mode", "global_state", "G['net']: ___check_obj_id(G['net'], 140000000000000)",
          "empty_nn_module_hooks_dict on G['net']._forward_hooks",
          "empty_nn_module_hooks_dict on G['net']._forward_pre_hooks",
          "G['net'].config: ___check_type_id(G['net'].config, 94000000000000)"]  # what Dynamo exported: 7


def _page(prediction: dict, guards: list[str]) -> None:
    from app import guards_pane, whatif_pane

    whatif_pane.version_checks(prediction)
    guards_pane.render(guards)


def test_guards_and_a_versions_checks_are_counted_under_their_own_names():
    parsed = guard_tree.parse(TREE)
    prediction = {"guards": {**parsed, "matters": guard_tree.matters(parsed)}}
    assert len(parsed["raw"]) == 5 and sum(parsed["checks"].values()) == 9  # a tensor check: 5 facets
    at = AppTest.from_function(_page, args=(prediction, GUARDS), default_timeout=60)
    at.run()
    assert not at.exception, at.exception
    texts = [str(m.value) for m in at.markdown] + [str(c.value) for c in at.caption] + [e.label for e in at.expander]
    page = "\n".join(texts)
    called_guards = {int(n) for n in re.findall(r"(\d+)\)?:? guards\b", page, re.IGNORECASE)}
    called_guards |= {int(n) for n in re.findall(r"\*\*Guards\*\* \((\d+)\)", page)}
    assert called_guards == {len(GUARDS)}, page  # every count said as guards is the exported list's
    assert re.search(rf"\b{len(parsed['raw'])} checks\b", page), page  # the tree's count, said as checks
    assert not re.search(rf"\b{len(parsed['raw'])} guards\b", page, re.IGNORECASE), page
    assert "looks at its shape, dtype" in page  # why the kinds add up to more than the checks
