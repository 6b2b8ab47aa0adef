"""tkir kernels as PyTorch operators: `tkir.torch.op` registers a compiled kernel as a `torch.library`
custom op (with a fake implementation, so `torch.compile(fullgraph=True)` traces through it), and
`tkir.torch.autograd` ties a forward and a backward op into a `torch.autograd.Function` (docs/torch.md).

    softmax = tkir.torch.op("examples/softmax.tk", outputs=["Y"], D=1024)
    y = softmax(x)                       # allocates Y (shape and dtype from the launch description)
    softmax.out(x, y)                    # the out variant: every kernel argument, outputs written in place

The op's name is `tkir::<kernel>_<hash of the consts>` (`name=` overrides it); its inputs are the
kernel's tensor parameters other than `outputs`, in order, then its scalars. The shapes of the outputs
come from their dims in the launch description, with the size names bound from the inputs' shapes;
the fake implementation computes the same shapes without launching. Launches go through the runtime
(tkir.backend.runtime.Kernel) on torch's current stream of the inputs' device.

torch is imported inside the functions that need it, so this module (and its pure parts: naming,
signatures, output shapes, the autograd wiring plan) loads without torch; nor does it load the backend
until an op is built.
"""

from __future__ import annotations

import hashlib
import keyword
import re
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tkir import symexpr

if TYPE_CHECKING:
    from tkir.api import CompiledKernel
    from tkir.backend.launch import LaunchDescription

NAMESPACE = "tkir"  # the torch.library namespace of every op registered here
HASH_CHARS = 8  # hex digits of the consts' sha256 in a derived op name
SCHEMA_TYPES = {"i32": "int", "u32": "int", "i64": "int", "f32": "float"}  # scalar dtype -> schema type
TORCH_DTYPES = {"bf16": "bfloat16", "f16": "float16", "f32": "float32", "i32": "int32", "u32": "uint32",
                "e4m3": "float8_e4m3fn", "e5m2": "float8_e5m2"}  # tkir dtype -> torch.<name>
GRAD_PREFIXES = ("D", "d")  # the gradient of tensor T is named DT (or dT) in a backward kernel


class TorchOpError(ValueError):
    """A kernel that cannot be made an op as asked, or arguments an op refuses before any launch."""


# --- the pure parts (no torch) -------------------------------------------------------------------------

def op_name(kernel: str, consts: dict[str, int | float]) -> str:
    """The op name derived from a kernel name and its constants: `<kernel>_<8 hex digits>`, the digits a
    sha256 of the constants sorted by name (so equal constants give one name, in any order)."""
    text = ",".join(f"{k}={consts[k]!r}" for k in sorted(consts))
    digest = hashlib.sha256(text.encode()).hexdigest()[:HASH_CHARS]
    base = re.sub(r"\W", "_", kernel) or "kernel"
    if base[0].isdigit():
        base = "k_" + base
    return f"{base}_{digest}"


def check_op_name(name: str) -> str:
    """`name` if it is usable as an op name (a Python identifier, no keyword, no leading underscore or
    dot); else a TorchOpError."""
    if not name.isidentifier() or keyword.iskeyword(name) or name.startswith("_"):
        raise TorchOpError(f"op name {name!r} must be an identifier not starting with '_' (it becomes "
                           f"{NAMESPACE}::{name})")
    return name


@dataclass(frozen=True)
class OpSignature:
    """How an op's arguments map to a kernel's: `inputs` (tensor names, in kernel order, outputs left
    out), `outputs` (in the order given to `op`), `scalars` (name, dtype), and each tensor's dims and dtype
    from the launch description."""

    kernel: str
    tensors: tuple[str, ...]  # every tensor parameter, in kernel order
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    scalars: tuple[tuple[str, str], ...]
    dims: dict[str, tuple[str | int, ...]]
    dtypes: dict[str, str]

    @classmethod
    def of(cls, launch: LaunchDescription, outputs: Sequence[str]) -> OpSignature:
        """The signature of `launch` with `outputs` allocated by the op; a TorchOpError names an output
        that is not a tensor parameter, or an output dim that no input's shape gives."""
        names = [t.name for t in launch.tensors]
        outs = tuple(outputs)
        if isinstance(outputs, str) or not outs:
            raise TorchOpError(f"{launch.kernel}: outputs= must be a non-empty list of tensor names (of "
                               f"{', '.join(names)})")
        bad = [o for o in outs if o not in names]
        if bad or len(set(outs)) != len(outs):
            raise TorchOpError(f"{launch.kernel}: outputs {outs} must be distinct tensor parameters of the "
                               f"kernel ({', '.join(names)}); {', '.join(bad) or 'one is repeated'}")
        inputs = tuple(n for n in names if n not in outs)
        if not inputs:
            raise TorchOpError(f"{launch.kernel}: every tensor is an output; an op needs an input tensor to "
                               "take its device (and sizes) from")
        sig = cls(kernel=launch.kernel, tensors=tuple(names), inputs=inputs, outputs=outs,
                  scalars=tuple((s.name, s.dtype) for s in launch.scalars),
                  dims={t.name: tuple(t.dims) for t in launch.tensors},
                  dtypes={t.name: t.dtype for t in launch.tensors})
        return sig

    def unsized(self) -> str | None:
        """Why the op cannot allocate its outputs (an output dim that no input's dims give), or None."""
        known = {d for n in self.inputs for d in self.dims[n] if isinstance(d, str) and d.isidentifier()}
        for o in self.outputs:
            for d in self.dims[o]:
                free = symexpr.names(d) - known if isinstance(d, str) else set()
                if free:
                    return (f"{self.kernel}: output '{o}' has dims {list(self.dims[o])}, and "
                            f"{', '.join(sorted(free))} is no dim of an input, so the op cannot size it; call "
                            "the out variant (op.out) with the output passed in")
        return None

    def schema(self) -> str:
        """The functional op's schema: inputs then scalars, returning the outputs."""
        args = [f"Tensor {n}" for n in self.inputs] + [f"{SCHEMA_TYPES[t]} {n}" for n, t in self.scalars]
        ret = "Tensor" if len(self.outputs) == 1 else "(" + ", ".join("Tensor" for _ in self.outputs) + ")"
        return f"({', '.join(args)}) -> {ret}"

    def out_schema(self) -> str:
        """The out variant's schema: every kernel argument in kernel order, the outputs mutated, no result."""
        alias = {o: f"(a{i}!)" for i, o in enumerate(self.outputs)}
        args = [f"Tensor{alias.get(n, '')} {n}" for n in self.tensors]
        args += [f"{SCHEMA_TYPES[t]} {n}" for n, t in self.scalars]
        return f"({', '.join(args)}) -> ()"

    def bind_sizes(self, shapes: Sequence[Sequence[Any]]) -> dict[str, Any]:
        """The size names bound from the inputs' shapes (in `inputs` order); a TorchOpError for a wrong
        rank, a fixed dim of another length, or a name given two values. The lengths may be torch
        SymInts (torch.compile with dynamic shapes): they are compared, never converted."""
        if len(shapes) != len(self.inputs):
            raise TorchOpError(f"{self.kernel}: takes {len(self.inputs)} tensors ({', '.join(self.inputs)}), "
                               f"got {len(shapes)}")
        sizes: dict[str, Any] = {}
        where: dict[str, str] = {}
        for name, shape in zip(self.inputs, shapes, strict=True):
            dims = self.dims[name]
            if len(shape) != len(dims):
                raise TorchOpError(f"{self.kernel}: argument '{name}' has {len(shape)} dims {list(shape)}, "
                                   f"expected {len(dims)} ({list(dims)})")
            for axis, (d, got) in enumerate(zip(dims, shape, strict=True)):
                if isinstance(d, int):
                    if got != d:
                        raise TorchOpError(f"{self.kernel}: argument '{name}' dim {axis} is {got}, expected {d}")
                elif d.isidentifier():
                    if d in sizes and sizes[d] != got:
                        raise TorchOpError(f"{self.kernel}: argument '{name}' dim {axis} ({d}) is {got}, but "
                                           f"{where[d]} gave {d} = {sizes[d]}")
                    sizes.setdefault(d, got)
                    where.setdefault(d, f"argument '{name}' dim {axis}")
        return sizes

    def output_shapes(self, shapes: Sequence[Sequence[Any]]) -> list[tuple[Any, ...]]:
        """The shape of each output (in `outputs` order) for inputs of `shapes`: its dims evaluated with
        the sizes bound from the inputs (tkir.symexpr for expressions like `D / 2`)."""
        why = self.unsized()
        if why is not None:
            raise TorchOpError(why)
        sizes = self.bind_sizes(shapes)
        return [tuple(_dim(self.kernel, d, sizes) for d in self.dims[o]) for o in self.outputs]

    def kernel_args(self, inputs: Sequence[Any], outputs: Sequence[Any], scalars: Sequence[Any]) -> list[Any]:
        """The kernel's arguments in its order, from the op's inputs, the outputs and the scalars."""
        given = dict(zip(self.inputs, inputs, strict=True)) | dict(zip(self.outputs, outputs, strict=True))
        return [given[n] for n in self.tensors] + list(scalars)


def _dim(kernel: str, d: str | int, sizes: dict[str, Any]) -> Any:
    if isinstance(d, int):
        return d
    if d in sizes:
        return sizes[d]
    try:
        return symexpr.evaluate(d, {k: int(v) for k, v in sizes.items()})
    except symexpr.SymExprError as e:
        raise TorchOpError(f"{kernel}: {e}") from None


@dataclass(frozen=True)
class AutogradPlan:
    """How a backward op's arguments come from a forward op's: what the forward saves, and for each
    backward input and scalar where it comes from; for each forward input, which backward output is its
    gradient (None: no gradient)."""

    save: tuple[tuple[str, int], ...]  # ("input" | "output", index into the forward's inputs / outputs)
    backward_inputs: tuple[tuple[str, int], ...]  # ("grad", output index) | ("saved", index into `save`)
    backward_scalars: tuple[int, ...]  # index into the forward's scalars
    input_grads: tuple[int | None, ...]  # per forward input: index into the backward's outputs

    @classmethod
    def of(cls, forward: OpSignature, backward: OpSignature, save: Sequence[str] | None = None) -> AutogradPlan:
        """The wiring by names: a backward input named D<out> (or d<out>) is the gradient of the forward
        output <out>; any other backward input is a forward input or output the forward saves (`save`,
        default: exactly those); a backward output named D<in> is the gradient of forward input <in>;
        backward scalars are the forward's scalars of the same names."""
        what = f"autograd({forward.kernel}, {backward.kernel})"
        saveable = {n: ("input", i) for i, n in enumerate(forward.inputs)}
        saveable |= {n: ("output", i) for i, n in enumerate(forward.outputs)}
        grad_of = {p + o: i for i, o in enumerate(forward.outputs) for p in GRAD_PREFIXES}
        wanted = [n for n in backward.inputs if n not in grad_of]
        names = list(save) if save is not None else wanted
        for n in names:
            if n not in saveable:
                raise TorchOpError(f"{what}: save={names}: '{n}' is no input or output of {forward.kernel} "
                                   f"({', '.join(saveable)})")
        missing = [n for n in wanted if n not in names]
        if missing:
            raise TorchOpError(f"{what}: the backward reads {', '.join(missing)}, which the forward does not "
                               f"save (save={names}); a backward input is D<output> or a saved tensor")
        b_inputs = []
        for n in backward.inputs:
            b_inputs.append(("grad", grad_of[n]) if n in grad_of else ("saved", names.index(n)))
        f_scalars = [s for s, _ in forward.scalars]
        b_scalars = []
        for s, _ in backward.scalars:
            if s not in f_scalars:
                raise TorchOpError(f"{what}: backward scalar '{s}' is no scalar of {forward.kernel} "
                                   f"({', '.join(f_scalars) or 'none'})")
            b_scalars.append(f_scalars.index(s))
        grads: list[int | None] = []
        for n in forward.inputs:
            hits = [j for j, o in enumerate(backward.outputs) if o in (p + n for p in GRAD_PREFIXES)]
            grads.append(hits[0] if hits else None)
        known = {p + n for n in forward.inputs for p in GRAD_PREFIXES}
        stray = [o for o in backward.outputs if o not in known]
        if stray:
            raise TorchOpError(f"{what}: backward outputs {', '.join(stray)} name no forward input's gradient "
                               f"(D<input> of {', '.join(forward.inputs)})")
        return cls(save=tuple(saveable[n] for n in names), backward_inputs=tuple(b_inputs),
                   backward_scalars=tuple(b_scalars), input_grads=tuple(grads))


@dataclass(frozen=True)
class Backward:
    """A backward pass made of several ops (or any torch code): `fn(*inputs, *scalars)` returns the
    tensors named `outputs` (one tensor, or a tuple in that order). `autograd` wires it by these names as
    it wires a backward op by its kernel's parameter names: inputs D<out> are gradients of the forward's
    outputs, other inputs are saved forward tensors, outputs D<in> are gradients of forward inputs."""

    fn: Callable[..., Any]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    scalars: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return getattr(self.fn, "__name__", "backward")

    @property
    def signature(self) -> OpSignature:
        """The names as an OpSignature (no dims or dtypes: the ops inside check their own)."""
        return OpSignature(kernel=self.name, tensors=self.inputs + self.outputs, inputs=self.inputs,
                           outputs=self.outputs, scalars=tuple((s, "") for s in self.scalars), dims={}, dtypes={})

    def __call__(self, *args: Any) -> Any:
        return self.fn(*args)


def backward(*, inputs: Sequence[str], outputs: Sequence[str], scalars: Sequence[str] = ()
             ) -> Callable[[Callable[..., Any]], Backward]:
    """A decorator making a Python function a `Backward` for `autograd`:

        @tkir.torch.backward(inputs=["X", "W", "DY"], outputs=["DX", "DW"])
        def rmsnorm_backward(x, w, dy):
            dx, partial = rmsnorm_bwd(x, w, dy)
            return dx, col_sum(partial)
    """
    for what, names in (("inputs", inputs), ("outputs", outputs), ("scalars", scalars)):
        if isinstance(names, str) or not all(isinstance(n, str) and n.isidentifier() for n in names):
            raise TorchOpError(f"backward: {what}= must be a list of names, got {names!r}")

    def wrap(fn: Callable[..., Any]) -> Backward:
        return Backward(fn, tuple(inputs), tuple(outputs), tuple(scalars))

    return wrap


# --- torch ---------------------------------------------------------------------------------------------

_REGISTERED: dict[str, TkirOp] = {}  # qualified op name -> its op (registered once per process)
_REGISTER_LOCK = threading.Lock()


class TkirOp:
    """A kernel registered as the torch op `tkir::<name>` (and `tkir::<name>_out`, the out variant).

    `op(*inputs, *scalars)` allocates the outputs and returns them (one tensor, or a tuple in `outputs`
    order); `op.out(*kernel_args)` takes every kernel argument in the kernel's order, writes the outputs
    in place and returns them. `op.default` and `op.out_op` are the torch op overloads."""

    def __init__(self, kernel: CompiledKernel, signature: OpSignature, name: str, digest: str):
        self.kernel, self.signature, self.name, self.digest = kernel, signature, name, digest
        self.qualname = f"{NAMESPACE}::{name}"
        self._functional, self._out = _register(kernel, signature, self.qualname)
        self.default = self._functional._opoverload
        self.out_op = self._out._opoverload

    def __repr__(self) -> str:
        return f"TkirOp({self.qualname}: {self.signature.schema()})"

    def __call__(self, *args: Any) -> Any:
        return self.default(*args)

    def out(self, *args: Any) -> Any:
        """The kernel called on all its arguments (outputs passed in, written in place): returns them."""
        self.out_op(*args)
        picked = [args[self.signature.tensors.index(o)] for o in self.signature.outputs]
        return picked[0] if len(picked) == 1 else tuple(picked)


def op(kernel_or_path: CompiledKernel | str | Path, *, outputs: Sequence[str], name: str | None = None,
       **consts: int | float) -> TkirOp:
    """Register a kernel (a CompiledKernel, or a .tk path compiled with `consts`) as the torch op
    `tkir::<name>`; `name` defaults to op_name(kernel, consts). Asking again for the same name and kernel
    returns the op already registered; the same name for another kernel is a TorchOpError."""
    from tkir.api import CompiledKernel, compile

    if isinstance(kernel_or_path, CompiledKernel):
        if consts:
            raise TorchOpError("constants go to tkir.compile: pass them with a path, not with a compiled kernel")
        kernel = kernel_or_path
    else:
        kernel = compile(str(kernel_or_path), **consts)
    launch = kernel.launch
    signature = OpSignature.of(launch, outputs)
    opname = check_op_name(name) if name is not None else op_name(launch.kernel, kernel.consts)
    digest = hashlib.sha256(str(kernel.asm["ptx"]).encode() + repr(signature).encode()).hexdigest()
    qualname = f"{NAMESPACE}::{opname}"
    with _REGISTER_LOCK:
        known = _REGISTERED.get(qualname)
        if known is not None:
            if known.digest != digest:
                raise TorchOpError(f"{qualname} is registered already for another kernel or other outputs; "
                                   "pass name= to register this one under its own name")
            return known
        made = _REGISTERED[qualname] = TkirOp(kernel, signature, opname, digest)
    return made


def _register(kernel: CompiledKernel, sig: OpSignature, qualname: str) -> tuple[Any, Any]:
    """The functional op and the out variant, each with its fake implementation."""
    import torch

    n_in = len(sig.inputs)
    n_tensors = len(sig.tensors)

    def dtype_of(name: str) -> Any:
        return getattr(torch, TORCH_DTYPES.get(sig.dtypes[name], sig.dtypes[name]))

    def allocate(inputs: Sequence[Any]) -> list[Any]:
        shapes = sig.output_shapes([tuple(t.shape) for t in inputs])
        return [inputs[0].new_empty(s, dtype=dtype_of(o)) for o, s in zip(sig.outputs, shapes, strict=True)]

    def functional(*args: Any) -> Any:
        inputs, scalars = args[:n_in], args[n_in:]
        outs = allocate(inputs)
        kernel(*sig.kernel_args(inputs, outs, scalars))  # the runtime checks, then launches on torch's stream
        return outs[0] if len(outs) == 1 else tuple(outs)

    def functional_fake(*args: Any) -> Any:
        outs = allocate(args[:n_in])
        return outs[0] if len(outs) == 1 else tuple(outs)

    def out_variant(*args: Any) -> None:
        kernel(*args)

    def out_fake(*args: Any) -> None:
        tensors = dict(zip(sig.tensors, args[:n_tensors], strict=True))
        shapes = [tuple(tensors[n].shape) for n in sig.inputs]
        if sig.unsized() is not None:  # an output only the caller can size: the inputs are checked
            sig.bind_sizes(shapes)
            return
        want = sig.output_shapes(shapes)
        for o, shape in zip(sig.outputs, want, strict=True):
            if tuple(tensors[o].shape) != shape:
                raise TorchOpError(f"{sig.kernel}: output '{o}' has shape {list(tensors[o].shape)}, expected "
                                   f"{list(shape)}")

    f = torch.library.custom_op(qualname, functional, mutates_args=(), schema=sig.schema())
    f.register_fake(functional_fake)
    o = torch.library.custom_op(qualname + "_out", out_variant, mutates_args=sig.outputs, schema=sig.out_schema())
    o.register_fake(out_fake)
    return f, o


def autograd(forward: TkirOp, backward: TkirOp | Backward, *, save: Sequence[str] | None = None) -> type:
    """A torch.autograd.Function subclass whose `apply(*inputs, *scalars)` runs `forward` and, in the
    backward pass, `backward` (an op, or a `Backward` of several), wired by names (AutogradPlan.of):
    backward inputs D<output> get the gradients of the forward's outputs, its other inputs are the
    forward's tensors of those names (saved with save_for_backward; `save` lists them, default: what
    the backward reads), and its outputs D<input> are the gradients of the forward's inputs."""
    import torch

    plan = AutogradPlan.of(forward.signature, backward.signature, save)
    f_sig = forward.signature
    n_in = len(f_sig.inputs)
    n_out = len(f_sig.outputs)

    class Function(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, *args: Any) -> Any:
            outs = forward(*args)
            tup = outs if n_out > 1 else (outs,)
            ctx.save_for_backward(*(args[i] if kind == "input" else tup[i] for kind, i in plan.save))
            ctx.scalars = args[n_in:]
            return outs

        @staticmethod
        def backward(ctx: Any, *grads: Any) -> Any:
            saved = ctx.saved_tensors
            args = []
            for kind, i in plan.backward_inputs:
                if kind == "saved":
                    args.append(saved[i])
                else:  # the runtime takes C-contiguous tensors (an unused output's gradient comes as
                    args.append(grads[i].contiguous())  # zeros: Function materializes grads by default)
            args += [ctx.scalars[j] for j in plan.backward_scalars]
            res = backward(*args)
            res = res if isinstance(res, tuple) else (res,)
            return (*(None if j is None else res[j] for j in plan.input_grads), *(None for _ in ctx.scalars))

    Function.__name__ = Function.__qualname__ = f"{forward.name}_autograd"
    return Function


def registered() -> dict[str, Callable[..., Any]]:
    """The ops registered in this process, by qualified name."""
    return dict(_REGISTERED)
