"""Stand-ins swapped into a generated wrapper's namespace (Note [Stand-ins in the wrapper's namespace])."""
from engine.runtime.stand_ins import kernel_entries, swapped


class Launch:
    """Like a TritonLaunch: its first call binds, putting a faster launcher under its name via `install`."""

    def __init__(self, namespace: dict, key: str):
        self.calls = 0
        self.install = lambda launcher: namespace.__setitem__(key, launcher)

    def __call__(self, *args):
        self.calls += 1
        if self.calls == 1:
            self.install(self.bound)

    def bound(self, *args):
        self.calls += 1


class Counting:
    def __init__(self, original):
        self.original, self.seen = original, 0

    def __call__(self, *args):
        self.seen += 1
        return self.original(*args)


def test_a_launch_that_binds_meanwhile_stays_behind_its_stand_in_and_comes_back_bound():
    namespace = {"kernel_0": None, "other": object()}
    launch = Launch(namespace, "kernel_0")
    namespace["kernel_0"] = launch
    install = launch.install
    with swapped(namespace, ["kernel_0", "missing"], lambda key, original: Counting(original)) as stand_ins:
        assert set(stand_ins) == {"kernel_0"}
        for _ in range(3):  # the wrapper looks the kernel up by name at every launch
            namespace["kernel_0"]()
        assert namespace["kernel_0"] is stand_ins["kernel_0"]
    assert stand_ins["kernel_0"].seen == 3 and launch.calls == 3
    assert namespace["kernel_0"] == launch.bound  # the launcher bound meanwhile, not the unbound object
    assert launch.install is install


def test_originals_come_back_when_the_block_raises():
    namespace = {"op_mm": print}
    try:
        with swapped(namespace, ["op_mm"], lambda key, original: None):
            raise RuntimeError("a stand-in failed")
    except RuntimeError:
        pass
    assert namespace["op_mm"] is print


def test_kernel_entries_name_generated_kernels_and_each_node_of_a_library_call():
    class Node:
        def __init__(self, name):
            self.name = name

    class Kernel:
        def __init__(self, name, kind, nodes=()):
            self.name, self.kind, self.nodes = name, kind, [Node(n) for n in nodes]

    kernels = [Kernel("kernel_0", "pointwise"), Kernel("extern_1", "extern", ["mm", "addmm"])]
    assert kernel_entries(kernels) == {"kernel_0": "kernel_0", "op_mm": "extern_1", "op_addmm": "extern_1"}
