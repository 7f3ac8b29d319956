"""The runtime: everything that happens once code exists. It builds and loads what codegen printed (the C++
toolchain and its cache, Triton modules), launches kernels, autotunes them at their first launch, chooses
between a GEMM template and the library call, replays CUDA graphs, guards and measures a graph's first call,
and profiles kernels. Codegen prints text and hands the runtime data; the runtime never asks the compiler's
earlier layers a question at launch time (docs/design.md, "The runtime").
"""
