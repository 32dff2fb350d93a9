"""Triton's interpreter (TRITON_INTERPRET=1), computing as the GPU does, for the judges that run
engines' Triton kernels on the CPU (triton_judge.py, sglang_judge.py). Importing this module
applies the corrections; nothing of the kernels is changed."""
import numpy as np
import torch
import triton.language as tl
from triton._C.libtriton import ir
from triton.runtime import interpreter

TORCH_FLOATS = {tl.float32: torch.float32, tl.float16: torch.float16, tl.bfloat16: torch.bfloat16,
                tl.float8e4nv: torch.float8_e4m3fn, tl.float8e5: torch.float8_e5m2}
_BITS = {32: (np.int32, torch.int32), 16: (np.int16, torch.int16), 8: (np.uint8, torch.uint8)}


def _as_torch(bits, dtype):
    np_int, _ = _BITS[dtype.primitive_bitwidth]
    t = torch.from_numpy(np.ascontiguousarray(bits).view(np_int).copy())
    return t.view(TORCH_FLOATS[dtype])


def _as_bits(t, dtype):
    _, torch_int = _BITS[dtype.primitive_bitwidth]
    unsigned = getattr(np, f"uint{dtype.primitive_bitwidth}")
    return t.contiguous().view(torch_int).numpy().view(unsigned)


def _as_float32(handle):
    if handle.dtype.scalar in (tl.bfloat16, tl.float8e4nv, tl.float8e5):
        values = _as_torch(handle.data, handle.dtype.scalar).float().numpy()
        return values.reshape(handle.data.shape)
    return handle.data


def interpret_like_the_gpu():
    """Triton's interpreter holds bfloat16 as uint16 and fp8 as uint8 bits. Its tl.dot and its
    arithmetic on bfloat16 operate on those bits (triton-lang/triton#11584, closed as unsupported),
    and its float32 -> bfloat16 cast truncates where the GPU rounds to nearest even. SGLang's MHA
    decode kernel multiplies bfloat16 q and K elementwise, and both kernels cast the softmax weights
    to V's dtype for the P.V dot and store float32 results into bfloat16 outputs. So: bfloat16
    arithmetic is done on the values and rounded back to bfloat16; casts between float32, float16,
    bfloat16 and fp8 round to nearest even (torch's conversions, as the GPU's cvt.rn); dots take
    float32 copies of bfloat16 and fp8 operands, which hold them exactly. Nothing of the kernels is
    changed."""
    builder = interpreter.InterpreterBuilder
    convert = interpreter._convert_float

    def convert_float(data, src, dst, rounding_mode):
        if src in TORCH_FLOATS and dst in TORCH_FLOATS and rounding_mode != ir.ROUNDING_MODE.RTZ:
            out = _as_torch(data, src).to(TORCH_FLOATS[dst])
            return _as_bits(out, dst).reshape(np.shape(data))
        return convert(data, src, dst, rounding_mode)

    interpreter._convert_float = convert_float

    binary_op = builder.binary_op
    arithmetic = (np.add, np.subtract, np.multiply, np.divide, np.minimum, np.maximum)

    def bf16_binary_op(self, lhs, rhs, op):
        if lhs.dtype.scalar == tl.bfloat16 and rhs.dtype.scalar == tl.bfloat16 and op in arithmetic:
            value = op(_as_float32(lhs), _as_float32(rhs)).astype(np.float32)
            bits = _as_bits(torch.from_numpy(value).to(torch.bfloat16), tl.bfloat16)
            return interpreter.TensorHandle(bits.reshape(value.shape), tl.bfloat16)
        return binary_op(self, lhs, rhs, op)

    builder.binary_op = bf16_binary_op
    for name, op in (("create_fadd", np.add), ("create_fsub", np.subtract),
                     ("create_fmul", np.multiply), ("create_fdiv", np.divide)):
        setattr(builder, name, (lambda o: lambda self, lhs, rhs: self.binary_op(lhs, rhs, o))(op))

    def create_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
        out = np.matmul(_as_float32(a), _as_float32(b), dtype=d.data.dtype) + d.data
        return interpreter.TensorHandle(out, d.dtype.scalar)

    builder.create_dot = create_dot


interpret_like_the_gpu()
