"""CUDA graphs: a compiled graph recorded once and replayed (mode="reduce-overhead", and max-autotune on a GPU).

CudaGraphCall wraps a graph's call. What it does differs by the graph's phase and the mode, and that choice is
one ReplayPolicy (replay_policy), made when the graph is built; each recording's state is one Recording.
"""
from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any, Callable

import torch

# Note [CUDA graph replay]
# A small model is launch bound: Python and the driver spend more time starting kernels than the GPU spends
# running them. CudaGraphCall runs the compiled graph eagerly once (Triton compiles its kernels, libraries
# warm up), records the second call into a torch.cuda.CUDAGraph, and from then on copies the inputs into the
# recorded input buffers and replays: one launch for the whole graph.
# Parameters and buffers are recorded in place, not copied (Note [Which inputs a CUDA graph reads in place]);
# if one of them later moves, the graph is recorded again.
# Aliasing: the returned outputs are the graph's own output tensors, overwritten by the next replay (as in
# torch.compile's mode="reduce-overhead"). Clone an output to keep it across calls.
#
# Note [Which inputs a CUDA graph reads in place]
# A recorded graph reads each input either in place, from the address it had when recorded (the pointer check
# guards that it is still there), or from a static copy that every replay refills. In place is right for what
# stays put by nature: parameters and buffers, which AOTAutograd marks while it compiles (static_inputs), and
# the outputs of a recording, which live in the graph's own memory. An activation or an incoming gradient can
# land at the same address on the warm-up and recording calls by the allocator's chance, and move on the next
# call: read in place, it would make the graph record again (and a test's replay count depend on the
# allocator). So it is copied, as torch.compile's CUDA graph trees copy every input that is not static.
# Where AOTAutograd says nothing (static_inputs None: a CudaGraphCall built by hand), an input that kept its
# address through the warm-up counts as static.
#
# Note [Inputs that come back]
# An inference graph is often called with the very same tensors again: a benchmark loop, a serving loop that
# fills one preallocated input buffer, a model's frozen prefix. Its refills then copy what is already there.
# For a small call that is most of the difference from eager: proj_residual (a bf16 Linear 4096 -> 4096 at
# 512 rows plus a residual) spent 33.2 us a replay on the H200, 6 us of it copying the two 4 MiB inputs into
# the recording, and the copies' two launches cost host time in a call that is host-bound already. So an
# inference graph (`guess_in_place`) first guesses that its inputs come back: its first recording reads in
# place every input that kept its address through the warm-up, activations included. That is exact for as
# long as the guess holds, since the recording keeps those input tensors alive: no other tensor can be handed
# that memory while it lives, so an input at a recorded address is the very storage that was recorded, read
# with whatever values it holds now; and the graph never writes an input (AOTAutograd returns a mutated input's
# new value, and its runtime wrapper copies it back). The first call whose pointers differ ends the guess for
# good: the recording is dropped (and with it the hold on the old inputs), and the graph records again the
# usual way, copying what AOTAutograd did not mark static. So a loop over fresh inputs pays one extra
# recording, once, and a test's replay counts do not depend on where the allocator puts an activation beyond
# that one miss. Training graphs do not guess: their inputs are saved activations and gradients, which the
# rules of Note [Training under CUDA graphs] already read in place where that is right.
#
# Note [Cheap replay checks]
# A replay must cost little on the host, and a real model passes every parameter and buffer as an input
# (MobileNetV3-Small: 245 tensors): a key of every input's shape, strides, dtype and device took ~0.9 ms a
# call on the CPU, more than the GPU's whole replay (~0.45 ms on the H200), and reduce-overhead ran at twice
# Inductor's time. What a replay checks is what can change between calls of one compiled graph: Dynamo's
# guards hold its inputs' dtypes, devices, strides and static sizes to those it was compiled for, so only the
# values of the graph's size symbols (dynamic shapes) key the recordings, read from the inputs exactly as the
# wrapper reads them; and the recorded-in-place inputs' data pointers are compared in one C++ call
# (torch._C._tensors_data_ptrs_at_indices_equal, the check Inductor's CUDA graph trees use; a Python loop
# where a torch lacks it). The copied inputs (usually the one activation) go in with one foreach copy.
#
# Note [Training under CUDA graphs]
# In training, AOTAutograd calls a forward graph, keeps some of its outputs for the backward (the saved
# activations), and later calls the backward graph with them and the incoming gradients. Two rules make that
# fast and correct:
# - A recorded graph's outputs stay where the recording put them (the graph's own memory), so an input that is
#   one of them, as every saved activation is when the forward was replayed, is read in place, not copied:
#   `_record` treats it like an input that kept its address through the warm-up. If it later arrives from
#   elsewhere (the forward ran plainly, below), its pointer check fails and the graph is recorded again with
#   that input copied, as for any input that moved.
# - A replay overwrites the previous replay's outputs. A training graph (`keep_live_outputs`) therefore replays
#   only when nothing but this object holds them any more (each output's use count is back to what it was
#   right after recording); else the call runs plainly, into fresh memory. In a forward, autograd keeps the
#   last replay's saved activations until that step's backward has run (two forwards before one backward:
#   gradient accumulation, or a graph kept with retain_graph). In a backward, autograd holds a gradient
#   output until every contribution to that tensor has arrived and been added (two forwards' backwards add up
#   before .grad is set), and then copies it into .grad, so in an ordinary step the next replay finds its
#   outputs free. Outputs that are views of in-place inputs (a transposed weight saved for the backward) live
#   in the input's memory, which no replay writes: they need no such care.
#
# Note [Gradients a replay hands over]
# A backward's outputs are the parameters' gradients, and autograd's AccumulateGrad takes a gradient over as
# the parameter's .grad only when nothing else holds it; else it clones it. This object holds every recorded
# output (a replay returns them), so each step cloned every gradient: 12 copies a step of the transformer
# block (aten::copy_ under AccumulateGrad in `bench train --profile`), the parameters' size in device
# traffic and a clone's host time each. A backward (`hand_over_outputs`) therefore registers its recorded
# outputs as cached tensors (torch._C._add_cached_tensor, as torch.compile's CUDA graph trees do), whose one
# extra reference autograd does not count: the parameter's .grad becomes the recorded output's memory (a
# detached alias of it). The rule above keeps that correct once it counts aliases: a handed-over output's
# storage has as many holders as right after recording, or the backward runs plainly, so a replay never
# overwrites a gradient someone keeps (a tensor's use count alone misses an alias, a storage's misses a second
# holder of the same tensor: both are checked). An ordinary step clears the gradients (zero_grad's
# set_to_none) before the next backward and replays. A loop that keeps them (zero_grad(set_to_none=False), or
# gradients summed over several backwards) would run plainly from then on, so at the first such call the
# recording hands its held outputs over for good: they become the holders' tensors, this object forgets that
# recording and records again later, this time without handing over (AccumulateGrad clones, as before).
#
# Note [What a replayed training step does]
# Per step, outside the two replays, a reduce-overhead training step (forward and backward recorded, as
# above) does this much work on the device: one foreach copy of the activation into the forward's recording
# and one of the incoming gradient into the backward's. Parameters, buffers and the saved activations are read
# where they are; the gradients become .grad without a clone; no sync, no allocation, no zeroing (a buffer a
# graph zeroes is zeroed inside it). Torch.compile's CUDA graph trees (torch/_inductor/cudagraph_trees.py)
# do the same per replay: a C++ pointer check of the static inputs, one foreach copy of the others (a
# backward's static inputs are all but its tangents: compile_fx's count_tangents), the replay, and outputs
# registered as cached tensors. The forward and the backward are separate graphs there too, with the loss and
# autograd in Python between them. Two differences remain, neither device time: the trees rebuild each
# output's tensor object per replay (host time, theirs), and they record a model's forward and backward into
# one memory pool where each recording here has its own (memory, ours: the backward cannot reuse the
# forward's dead intermediates). In either, the forward reads and saves its static copy of the activation
# rather than the caller's tensor, so a count of saved bytes that leaves the inputs out (`bench
# train`) counts that copy in reduce-overhead mode and not in the default mode: the transformer
# block's +16 MiB (B*T*D in bf16) on the H200, Inductor's as ours; the saved set is the same in both modes.
# tests/test_training_cuda_graphs.py checks all of this on the CPU stand-in. So a reduce-overhead step is as
# fast as its kernels: the default mode's step is launch bound (Inductor's 2.34 ms there against its 1.52 ms
# replayed, on the H200), which hides their device time, and the replayed step shows it.


# Note [Replay or launch, timed]
# A CUDA graph saves host time (one launch for the graph) and costs device time (each replay first copies the
# inputs it does not read in place). A graph bound by its kernels (a few large GEMMs) gains nothing from the
# launches it saves and pays the copy, so replaying it is slower. Inductor's max-autotune replays every graph;
# ours measures, since max-autotune is the mode that times its choices: at the first call that could replay,
# an inference graph (ReplayPolicy.choose_by_timing) times TIMED_CALLS replays, copies included, against
# TIMED_CALLS plain calls on the device's clock and keeps the faster for good (`choice`; a graph launched
# plainly drops its recordings). Training graphs replay (their replays hand tensors over: Note [Training
# under CUDA graphs]), and reduce-overhead replays because the user asked for CUDA graphs.
# Who takes a tie within REPLAY_MARGIN: the plain call when the replay copies inputs (its outputs are not
# overwritten by the next call, and no recording holds memory); the replay when it copies nothing (it runs the
# very same kernels, so the device clock cannot tell them apart, and it costs less host time, which this
# timing does not see). If the inputs later move, the choice is timed again. Measurements behind these rules:
# reports/runtime_measurements.md, "Replay or launch".
TIMED_CALLS = 10
REPLAY_MARGIN = 0.05


def device_ms_per_call(fn: Callable[[], Any], calls: int = TIMED_CALLS) -> float:
    """Milliseconds a call of `fn` adds to the stream in a run of `calls` calls (CUDA events), after one warm-up
    call: the host's pace when it is behind the GPU, the kernels' when it is ahead."""
    fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(calls):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / calls


def _pointers_equal_python(tensors, pointers, indices) -> bool:
    return all(tensors[i].data_ptr() == pointers[i] for i in indices)


pointers_equal = getattr(torch._C, "_tensors_data_ptrs_at_indices_equal", None) or _pointers_equal_python
storage_use_count = torch._C._storage_Use_Count  # holders of a storage: any tensor or view over it


# Note [Call sites]
# One compiled graph can run at several places of a model: Dynamo compiles the code between two graph breaks of
# a layer once and calls it for each of the model's layers (DeBERTa's attention, cut by `.item()`). Where its
# recording reads another recording's output in place (the hidden state that the graph before it left in its
# own memory), that output lives at another address for each layer, so one recording per graph matched one
# layer and every other call recorded again: DeBERTa recorded 8 graphs a call and ran at twice eager's time.
# So once a recording reads such inputs (`chained`), recordings are kept per call site, keyed by the addresses
# of those inputs as well as the sizes, up to MAX_CALL_SITES of them; a further site launches plainly.
MAX_CALL_SITES = 64


# Note [Refilling inputs]
# Before each replay the copied inputs (Note [Which inputs a CUDA graph reads in place]) are written into the
# recording's buffers. One torch._foreach_copy_ does that in one launch, which suits many small inputs; but its
# kernel gives each thread block one chunk of 64K elements, so a few large tensors get few blocks and copy
# slowly beside the graph's own work. So an input of LARGE_COPY_BYTES or more gets its own copy_ (ATen's
# elementwise copy, which spreads over the whole GPU), and the smaller ones still go in one foreach launch;
# the extra launches are cheap, a replayed call's host being ahead of the GPU. The measurements:
# reports/runtime_measurements.md, "Refilling inputs"; tests/test_cuda_graph_replay.py checks the split.
LARGE_COPY_BYTES = 1 << 20


def refill(entry: Recording, args: list) -> None:
    """Copy a replay's copied inputs into the recording's buffers (Note [Refilling inputs])."""
    for static, i in entry.large:
        static.copy_(args[i])
    statics, indices = entry.small
    if statics:
        torch._foreach_copy_(statics, [args[i] for i in indices])


@dataclass(frozen=True)
class ReplayPolicy:
    """How a graph's CUDA graph behaves, one choice per phase and mode (replay_policy)."""
    keep_live_outputs: bool = False  # replay only when no one holds the last replay's outputs (training)
    hand_over_outputs: bool = False  # a backward's gradients become .grad without a clone
    choose_by_timing: bool = False  # time replay against plain launches once and keep the faster
    guess_in_place: bool = False  # first read every input that kept its address in place


def replays_cuda_graphs(mode: str, backend: str, device: str) -> bool:
    """Whether each compiled graph is recorded and replayed as a CUDA graph (Note [CUDA graph replay]):
    mode="reduce-overhead", and mode="max-autotune" on a GPU, as torch.compile's max-autotune does (its
    options turn triton.cudagraphs on; "max-autotune-no-cudagraphs" is Inductor's mode without them). Timed
    without them, our max-autotune ran each call's launches from the host where Inductor's replayed one graph.
    An inference graph under max-autotune then times replays against plain launches once and keeps the faster
    (Note [Replay or launch, timed])."""
    return mode == "reduce-overhead" or (mode == "max-autotune" and backend == "triton"
                                         and device.startswith("cuda"))


def replay_policy(phase: str, mode: str) -> ReplayPolicy:
    """The policy of a graph of `phase` (inference, forward, backward) under `mode`: training graphs keep
    their live outputs (Note [Training under CUDA graphs]) and a backward hands its gradients over (Note
    [Gradients a replay hands over]); inference graphs guess that their inputs come back (Note [Inputs that
    come back]) and, under max-autotune, time replay against launch (Note [Replay or launch, timed])."""
    inference = phase == "inference"
    return ReplayPolicy(keep_live_outputs=not inference, hand_over_outputs=phase == "backward",
                        choose_by_timing=mode == "max-autotune" and inference, guess_in_place=inference)


@dataclass
class Recording:
    """One recorded CUDA graph of a CudaGraphCall and what its replays need."""
    graph: Any  # torch.cuda.CUDAGraph
    fixed: list[int]  # inputs read in place, at `pointers` (Note [Which inputs a CUDA graph reads in place])
    pointers: list  # every input's data pointer at the recording
    copied: list[int]  # inputs copied into `statics` before each replay
    statics: list  # the recording's own copies of the copied inputs
    large: list  # (static, input index): refilled one by one (Note [Refilling inputs])
    small: tuple  # ([statics], [input indices]): refilled by one foreach copy
    outputs: list  # the recording's output tensors, returned by every replay
    inputs: list  # the arguments the recording ran on (statics in the copied positions)
    guarded: list  # (output, use count right after recording) (Note [Training under CUDA graphs])
    handed_over: list  # outputs registered as cached tensors (Note [Gradients a replay hands over])
    storages: list  # the handed-over outputs' storages, held so their use counts hold still
    aliased: list  # (storage handle, use count right after recording)
    guessed: bool  # reads an input in place that AOTAutograd did not mark static (Note [Inputs that come back])
    host: list[int]  # outputs on the CPU, copied for each caller (Note [Host work under CUDA graphs])


class CudaGraphCall:
    """`call`, replayed as a CUDA graph (Note [CUDA graph replay]); `sizes` are the graph's size symbols as
    (input position, dim or None), which key the recordings (Note [Cheap replay checks])."""

    def __init__(self, call: Callable, sizes: list[tuple[int, int | None]] = (), policy: ReplayPolicy = ReplayPolicy(),
                 static_inputs: frozenset[int] | None = None, warmup_calls: int = 1, host_outputs: bool = False):
        self.call = call
        self.host_outputs = host_outputs  # the graph returns CPU tensors (Note [Host work under CUDA graphs])
        self.policy = policy
        self.guess_in_place = policy.guess_in_place  # Note [Inputs that come back]: off once the guess fails
        self.choice: dict | None = None  # once timed: replay_ms, plain_ms, replays (Note [Replay or launch, timed])
        self.launch_plainly = False
        self.hand_over_outputs = policy.hand_over_outputs  # Note [Gradients a replay hands over]: off on giving up
        self.cached: dict[int, torch.Tensor] = {}  # id -> an output registered as a cached tensor
        weakref.finalize(self, _uncache, self.cached)
        self.static_inputs = static_inputs  # Note [Which inputs a CUDA graph reads in place]
        self.sizes = tuple(sizes)
        self.warmup_calls = warmup_calls
        self.graphs: dict[tuple, Recording] = {}
        self.seen: dict[tuple, list] = {}  # key -> data pointers of the warm-up calls
        self.chained: dict[tuple, list[int]] = {}  # sizes -> inputs that are a recording's outputs (Note [Call sites])
        self.sites: dict[tuple, int] = {}  # sizes -> recordings made per call site
        self.plain_calls = 0  # calls run without the graph because the last replay's outputs were still in use
        self._boxed_call = True
        _recorders.add(self)

    def _key(self, args) -> tuple:
        # a 0-d tensor at a size's place is a host scalar the code read with .item() (Note [CPU scalars on the GPU])
        return tuple((args[p].item() if isinstance(args[p], torch.Tensor) else args[p]) if d is None
                     else args[p].size(d) for p, d in self.sizes)

    def _site(self, sizes: tuple, args: list) -> tuple:
        """A call site's key (Note [Call sites]): the sizes and where the chained inputs are."""
        return sizes, tuple(args[i].data_ptr() if isinstance(args[i], torch.Tensor) else None
                            for i in self.chained[sizes])

    @property
    def output_pointers(self) -> set[int]:
        """Where the live recordings keep their outputs (Note [Training under CUDA graphs]); derived, so a
        recording dropped or recorded again takes its addresses with it (the allocator may reuse them)."""
        return {p for entry in self.graphs.values() for p in _output_pointers(entry.outputs)}

    def __call__(self, boxed: list):
        if self.launch_plainly:  # Note [Replay or launch, timed]
            return self.call(boxed)
        args = list(boxed)
        boxed.clear()  # the boxed calling convention: the caller's list no longer holds the inputs
        sizes = key = self._key(args) if self.sizes else ()
        if sizes in self.chained:  # Note [Call sites]: the recording of the place the chained inputs come from
            key = self._site(sizes, args)
            if key not in self.graphs and self.sites.get(sizes, 0) >= MAX_CALL_SITES:
                self.plain_calls += 1
                return self.call(list(args))
        entry = self.graphs.get(key)
        same = entry is not None and pointers_equal(args, entry.pointers, entry.fixed)
        if entry is not None and not same and entry.guessed:
            self._end_guess(key)  # Note [Inputs that come back]
        if same:
            if self.policy.choose_by_timing and self.choice is None:
                return self._choose(entry, args)
            if any(t._use_count() > n for t, n in entry.guarded) or any(  # Note [Training under CUDA graphs]
                    storage_use_count(c) > n for c, n in entry.aliased):
                self.plain_calls += 1
                if entry.handed_over:
                    self._give_up(key)  # Note [Gradients a replay hands over]
                return self.call(list(args))
            refill(entry, args)
            entry.graph.replay()
            return handed_out(entry)
        pointers = [a.data_ptr() if isinstance(a, torch.Tensor) else None for a in args]
        history = self.seen.setdefault(key, [])
        history.append(pointers)
        if len(history) <= (0 if key != sizes and self.graphs else self.warmup_calls):  # a new site: warm already
            return self.call(list(args))
        return self._record(key, args, history, sizes)

    def _record(self, key, args, history, sizes=()):
        static = None if self.guess_in_place else self.static_inputs  # Note [Inputs that come back]
        fixed = [i for i, p in enumerate(history[-1]) if p is not None and (_is_graph_output(p) or (
                 all(h[i] == p for h in history) and (static is None or i in static)))]
        chained = [] if self.policy.keep_live_outputs else [  # training reads its saved outputs: one site
            i for i in fixed if _is_graph_output(history[-1][i])
            and not (self.static_inputs is not None and i in self.static_inputs)]
        if chained and sizes not in self.chained:  # Note [Call sites]: from now on, a recording per call site
            self.chained[sizes] = chained
            key = self._site(sizes, args)
        if key != sizes:
            self.sites[sizes] = self.sites.get(sizes, 0) + 1
        copied = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor) and i not in set(fixed)]
        statics = [args[i].clone() for i in copied]
        large = [n for n, i in enumerate(copied) if statics[n].nbytes >= LARGE_COPY_BYTES]  # Note [Refilling inputs]
        small = [n for n in range(len(copied)) if n not in large]
        static_args = list(args)
        for i, static in zip(copied, statics):
            static_args[i] = static
        graph = torch.cuda.CUDAGraph()
        torch.cuda.synchronize()
        with torch.cuda.graph(graph):
            outputs = self.call(list(static_args))
        in_place = {args[i].untyped_storage().data_ptr() for i in fixed}
        guarded = [(t, t._use_count()) for t in outputs if self.policy.keep_live_outputs
                   and isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() not in in_place]
        # each tensor once: a graph may return one tensor as two outputs (two gradients that are the same value)
        handed_over = list({id(t): t for t, _ in guarded}.values()) if self.hand_over_outputs else []
        # a handed-over output's holder may keep an alias of it (Note [Gradients a replay hands over]): its
        # storage's holders are counted too, the storage's Python object held so that the count holds still
        storages = list({t.untyped_storage()._cdata: t.untyped_storage() for t in handed_over}.values())
        aliased = [(storage._cdata, storage_use_count(storage._cdata)) for storage in storages]
        if handed_over:  # Note [Gradients a replay hands over]
            torch._C._set_cached_tensors_enabled(True)  # a process-wide switch, off until someone needs it
        for t in handed_over:
            torch._C._add_cached_tensor(t)
            self.cached[id(t)] = t
        self.graphs[key] = Recording(
            graph=graph, fixed=fixed, pointers=history[-1], copied=copied, statics=statics,
            large=[(statics[n], copied[n]) for n in large],
            small=([statics[n] for n in small], [copied[n] for n in small]),
            outputs=outputs, inputs=static_args, guarded=guarded, handed_over=handed_over, storages=storages,
            aliased=aliased, guessed=self.guess_in_place and self.static_inputs is not None
            and not set(fixed) <= self.static_inputs,
            host=[n for n, t in enumerate(outputs) if self.host_outputs and isinstance(t, torch.Tensor)
                  and t.device.type == "cpu"])
        graph.replay()  # capturing does not run the work: run it once for this call's results
        return handed_out(self.graphs[key])

    def _choose(self, entry: Recording, args: list) -> list:
        """Note [Replay or launch, timed]: time replays against plain calls once, keep the faster, and answer
        this call the chosen way."""
        def replay():
            refill(entry, args)
            entry.graph.replay()

        replay_ms = device_ms_per_call(replay)
        plain_ms = device_ms_per_call(lambda: self.call(list(args)))
        margin = REPLAY_MARGIN if entry.copied else -REPLAY_MARGIN  # who takes a tie: the one with less host work
        self.choice = {"replay_ms": replay_ms, "plain_ms": plain_ms,
                       "replays": replay_ms < plain_ms * (1 - margin)}
        if self.choice["replays"]:
            replay()
            return handed_out(entry)
        self.launch_plainly = True
        self.graphs.clear()  # the recordings' memory goes back to the allocator
        return self.call(list(args))

    def _end_guess(self, key) -> None:
        """Note [Inputs that come back]: an input moved, so the guess is over: drop the recording that read it in
        place and record again, copying it, from this call on; a timed choice is timed again on the new one."""
        self.graphs.pop(key)
        self.guess_in_place = False
        self.choice = None

    def _give_up(self, key) -> None:
        """Note [Gradients a replay hands over]: the recording's outputs that someone still holds are theirs now;
        forget the recording and record again after a warm-up call, handing nothing over."""
        entry = self.graphs.pop(key)
        _uncache({id(t): self.cached.pop(id(t)) for t in entry.handed_over})
        self.seen[key] = []
        self.hand_over_outputs = False


def handed_out(entry: Recording) -> list:
    """A replay's outputs: the recording's own, copies of those on the CPU (Note [Host work under CUDA graphs]
    in lowering/graph.py)."""
    outputs = list(entry.outputs)
    for n in entry.host:
        outputs[n] = outputs[n].clone()
    return outputs


def _output_pointers(outputs) -> set[int]:
    return {t.data_ptr() for t in outputs if isinstance(t, torch.Tensor)}


def _uncache(cached: dict) -> None:
    """Unregister cached tensors (Note [Gradients a replay hands over]). Inductor's CUDA graph trees turn the
    process-wide switch off when they reset, which leaves the registrations in place but refuses removals; an
    entry left behind would make a later tensor at the same address look cached, so the switch is turned on
    for the removal and back off."""
    if not cached:
        return
    was_on = all(torch._C._is_cached_tensor(t) for t in cached.values())  # ours are registered: off if not seen
    torch._C._set_cached_tensors_enabled(True)
    for t in cached.values():
        torch._C._remove_cached_tensor(t)
    torch._C._set_cached_tensors_enabled(was_on)
    cached.clear()


_recorders: weakref.WeakSet = weakref.WeakSet()  # every live CudaGraphCall


def _is_graph_output(pointer: int) -> bool:
    """Whether `pointer` is where a live recording keeps one of its outputs (Note [Training under CUDA graphs])."""
    return any(pointer in recorder.output_pointers for recorder in _recorders)
