"""A --load-pass file whose pass crashes (tests/ir/test_passmanager.py)."""

from tkir.passmanager import Pass


class Boom(Pass):
    name = "boom"

    def run(self, module, options):
        raise ValueError("something broke")
