"""Graph rewrites: named passes over the ATen graph between decompose and lower (Note [Rewrite stage]).

Note [Rewrite stage]
Some of the largest wins on real models are not kernels but rewrites of the graph before lowering: two matmuls
around a softmax become one attention call. Each pass is registered by decorator (registry.py), runs in the
order of the imports below, and records every match (the nodes, their FX origins and user lines, the
replacement, why) and every near-miss (why not) into graphs[].rewrites[]; `rewrites=` turns passes off one by
one (registry.resolve), so `compare --a rewrites=none` shows what they buy.

Note [Where rewrites run]
An inference graph is rewritten as AOTAutograd hands it to us, just before lowering. A training graph cannot
be: AOTAutograd has already traced the joint forward+backward graph, whose backward differentiates the
matmuls and the softmax node by node, so replacing the forward's nodes would leave a backward that reads
values no longer computed. A pass that must change what is differentiated (attention: its gradient should be
SDPA's own backward) is marked before_joint, and for a graph that will train, the decompose stage traces the
Dynamo graph to ATen once without autograd, runs those passes on that forward graph, and gives AOTAutograd the
rewritten graph to trace the joint from (decompose.trace_forward); the record keeps them on the forward graph.
That forward is functional ATen, and some of its ops have no derivative (aten.copy, which an in-place slice write
becomes: RecurrentGemma's scan): where AOTAutograd cannot trace the joint graph from it, the graph is traced as
Dynamo captured it, unrewritten, and the record says why.
"""
from engine.rewrite import freezing, attention, padding  # noqa: F401,I001  (registration order is pipeline order)
from engine.rewrite.registry import REWRITES, Outcome, RewriteGraph, register_rewrite, resolve, run_rewrites

__all__ = ["REWRITES", "Outcome", "RewriteGraph", "register_rewrite", "resolve", "run_rewrites"]
