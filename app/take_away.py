"""Take a kernel away: the code stage's "download reproducer" (Note [Kernel reproducers] in engine/reproducer.py).

The file is written from the record alone (engine/tools/repro_file.py), the same file `python -m engine repro`
writes: no worker, no compile here."""
from __future__ import annotations

import streamlit as st

from app.safe_text import file_name, md_text
from engine.record import Exploration, GraphRecord
from engine.tools.repro_file import ReproError, repro_text


def _one_graph(record: Exploration, graph: GraphRecord) -> dict:
    """What repro_text reads: the model's name and backend, and this one graph (not the whole record)."""
    return {"model": record.model, "backend": record.backend, "device": record.device, "graphs": [graph.to_json()]}


def download_pane(record: Exploration, graph: GraphRecord, key: str) -> None:
    kernels = [k for k in graph.kernels if k.repro and "unsupported" not in k.repro]
    if not kernels:
        st.caption("No kernel of this graph can be taken away as a reproducer (library calls, eager calls and GEMM "
                   "templates have none).")
        return
    names = [k.name for k in kernels]
    chosen = st.selectbox("Kernel to take away", names, key=f"{key}_repro_kernel",
                            help="A standalone Python file: the kernel's source loaded by Glassbox's loader, random "
                                 "inputs in the recorded layouts, the eager reference from the same ATen ops, a "
                                 "check and a timing loop")
    data = _one_graph(record, graph)
    try:
        one = repro_text(data, graph.index, chosen)
        whole = repro_text(data, graph.index, None)
    except ReproError as error:
        st.caption(str(error))
        return
    middle, right = st.columns(2)
    middle.download_button("Download reproducer", one, file_name=file_name("repro", record.model, chosen) + ".py",
                           mime="text/x-python", key=f"{key}_repro_download", icon=":material/download:")
    right.download_button(f"Whole graph {graph.index}", whole, help=f"all {len(names)} kernels of the graph",
                          file_name=file_name("repro", record.model, f"graph{graph.index}") + ".py", mime="text/x-python",
                          key=f"{key}_repro_graph_download", icon=":material/download:")
    kernel = kernels[names.index(chosen)]
    reference = kernel.repro.get("reference") or {}
    if "error" in reference:
        st.caption(f"{md_text(chosen)}: no eager reference ({md_text(reference['error'])}); the file runs and "
                   "times it only.")
    else:
        st.caption(f"{md_text(chosen)}: checked against eager on {len(reference.get('outputs') or [])} output(s); "
                   f"`python {file_name('repro', record.model, chosen)}.py` from a Glassbox checkout")
