# SPDX-License-Identifier: Apache-2.0
"""Type stub of the attnref Python module (python/*.cpp). Shapes in brackets, as in the C++
headers. Arrays are numpy arrays (any strides, read in place), objects with __dlpack__ on the
CPU (torch tensors), sequences numpy converts, or view_as results."""
import os
from typing import Any, List, Literal, Optional, Sequence, Tuple, TypedDict, Union, overload

import numpy as np
import numpy.typing as npt

__version__: str

ArrayLike = Any  # numpy.ndarray, a CPU tensor with __dlpack__, a sequence, or a TypedArray
Profile = Literal["reference", "jax"]
Tier = Literal["shape", "metadata", "data"]
KvLayout = Literal["jax", "nhd", "hnd"]
AlibiConvention = Literal["signed", "absolute"]
SoftCapOrder = Literal["cap_then_alibi", "alibi_then_cap"]
MaskSpec = Union[
    None,
    Literal["causal", "full"],
    Tuple[Literal["causal"], int],  # ("causal", offset)
    Tuple[Literal["local"], Optional[int], Optional[int]],  # ("local", left, right)
    Tuple[Literal["local"], Optional[int], Optional[int], int],  # ... and offset
    Tuple[Literal["chunked"], int],  # ("chunked", size)
    ArrayLike,  # bool [1 or num_q_heads, q_seq_len, kv_seq_len] or [q_seq_len, kv_seq_len]
]

class Cause(TypedDict):
    what: str  # "sm_scale 1/sqrt(D) = 0.125 was used instead of 1"
    max_abs: float  # the largest |got - reference| under that change
    reproduce: str  # the keyword arguments that reproduce got, e.g. "soft_cap=30"

class Report(TypedDict):
    """A compare_* result: totals, likely causes (most specific first), where the mismatches
    are, notes (hypotheses cut or not tried) and the whole report as attnref-run prints it."""

    ok: bool
    count: int
    mismatches: int
    lse_mismatches: int
    max_abs: float
    max_rel: float
    lse_max_abs: float
    ignored_padding: int
    padding_only: bool
    causes: List[Cause]
    where: List[str]
    notes: List[str]
    text: str

class ShapeError(ValueError):
    """A check failed; str(e) is 'error[<code>] <message> (hint: <hint>)'."""

    code: str  # snake_case ErrorCode name, e.g. "gqa_not_divisible" (docs/errors.md)
    jax_check: str  # the JAX check mirrored ("P2", "S5", "R16"), "" for attnref's own
    message: str
    hint: str
    field: str  # the tensor or option named, "" if none
    values: Tuple[int, int, int, int, int, int, int, int]
    reals: Tuple[float, float]

class TypedArray:
    """An unsigned-integer array read as the bit patterns of another dtype."""

    @property
    def array(self) -> Any: ...
    @property
    def dtype(self) -> str: ...

def view_as(array: ArrayLike,
            dtype: Literal["bfloat16", "float8_e4m3fn", "float8_e5m2"]) -> TypedArray:
    """Tags a uint16 array as bfloat16 bits (q or K/V pages of paged and ragged; splash q, k, v,
    dout), or a uint8 array as fp8 e4m3fn or e5m2 bits (K/V pages; with optional scales).
    No copy."""

def check_config(num_q_heads: int, num_kv_heads: int, head_dim: int, *,
                 head_dim_v: Optional[int] = None, page_size: Optional[int] = None) -> None: ...

def engines(config: Union[None, dict, str, "os.PathLike[str]"] = None, arch: str = "sm90", *,
            page_size: int = 16, num_q_heads: Optional[int] = None,
            num_kv_heads: Optional[int] = None, head_dim: Optional[int] = None,
            head_dim_v: Optional[int] = None, dtype: Optional[str] = None,
            kv_dtype: Optional[str] = None, sliding_window: Optional[int] = None,
            soft_cap: bool = False, alibi: bool = False, sinks: bool = False,
            fa2_uneven_k_disabled: bool = False, engine_version: Optional[str] = None) -> dict: ...

def check_paged(q: ArrayLike, k_pages: ArrayLike, v_pages: ArrayLike, lengths: ArrayLike,
                page_indices: ArrayLike, *, kv_layout: KvLayout = "jax",
                k_scales: Optional[ArrayLike] = None, v_scales: Optional[ArrayLike] = None,
                soft_cap: Optional[float] = None, sm_scale: float = 1.0,
                mask_value: Optional[float] = None, pages_per_compute_block: int = 1,
                megacore_mode: Optional[Literal["kv_head", "batch"]] = None,
                round_kv_to_bf16: bool = False, sliding_window: Optional[int] = None,
                sinks: Optional[ArrayLike] = None, alibi_slopes: Optional[ArrayLike] = None,
                alibi_convention: AlibiConvention = "signed",
                soft_cap_order: SoftCapOrder = "cap_then_alibi",
                profile: Profile = "reference",
                tiers: Sequence[Tier] = ("shape", "metadata")) -> None:
    """q [batch, num_q_heads, head_dim]; k_pages, v_pages [num_kv_heads, total_pages,
    page_size, head_dim] (kv_layout "jax"), [total_pages, page_size, num_kv_heads, head_dim]
    ("nhd") or [total_pages, num_kv_heads, page_size, head_dim] ("hnd"); lengths [batch];
    page_indices [batch, pages_per_sequence]; k_scales, v_scales: float32, the pages' shape
    with a last dim of 1 or head_dim (int8 pages); sliding_window w: the last w keys;
    sinks, alibi_slopes [num_q_heads] (any float dtype, read as float32)."""

@overload
def paged_attention(q: ArrayLike, k_pages: ArrayLike, v_pages: ArrayLike, lengths: ArrayLike,
                    page_indices: ArrayLike, *, return_lse: Literal[False] = ...,
                    **options: Any) -> npt.NDArray[Any]: ...
@overload
def paged_attention(q: ArrayLike, k_pages: ArrayLike, v_pages: ArrayLike, lengths: ArrayLike,
                    page_indices: ArrayLike, *, return_lse: Literal[True],
                    **options: Any) -> Tuple[npt.NDArray[Any], npt.NDArray[np.float32]]:
    """The options of check_paged but profile and tiers, plus num_threads: int = 1.
    Returns out [batch, num_q_heads, head_dim] (q's dtype) and lse [batch, num_q_heads]."""

def compare_paged(got: ArrayLike, q: ArrayLike, k_pages: ArrayLike, v_pages: ArrayLike,
                  lengths: ArrayLike, page_indices: ArrayLike, *, atol: float = 1e-5,
                  rtol: float = 1e-5, got_lse: Optional[ArrayLike] = None,
                  ignore_padding: bool = False, **options: Any) -> Report:
    """Compares another kernel's out [batch, num_q_heads, head_dim] (and lse [batch,
    num_q_heads]) with the reference under the options of paged_attention (but return_lse
    and num_threads); names the likely causes of a mismatch."""

def check_splash(q: ArrayLike, k: ArrayLike, v: ArrayLike, *, mask: Union[MaskSpec, Sequence[MaskSpec]] = None,
                 q_segment_ids: Optional[ArrayLike] = None,
                 kv_segment_ids: Optional[ArrayLike] = None, sinks: Optional[ArrayLike] = None,
                 sliding_window: Optional[int] = None,
                 alibi_slopes: Optional[ArrayLike] = None,
                alibi_convention: AlibiConvention = "signed",
                soft_cap_order: SoftCapOrder = "cap_then_alibi", soft_cap: Optional[float] = None,
                 sm_scale: float = 1.0,
                 mask_value: Optional[float] = None, block_q: int = 128, block_kv: int = 128,
                 block_kv_compute: Optional[int] = None, backward: bool = False,
                 profile: Profile = "reference",
                 tiers: Sequence[Tier] = ("shape", "metadata")) -> None:
    """q [num_q_heads, q_seq_len, head_dim_qk]; k [num_kv_heads, kv_seq_len, head_dim_qk] or
    MQA [kv_seq_len, head_dim_qk]; v likewise with head_dim_v; q_segment_ids [q_seq_len],
    kv_segment_ids [kv_seq_len] int32; sinks, alibi_slopes [num_q_heads] (read as float32);
    sliding_window w: row i sees keys (i - w, i] on top of the mask."""

@overload
def splash_attention(q: ArrayLike, k: ArrayLike, v: ArrayLike, *,
                     return_lse: Literal[False] = ..., **options: Any) -> npt.NDArray[Any]: ...
@overload
def splash_attention(q: ArrayLike, k: ArrayLike, v: ArrayLike, *, return_lse: Literal[True],
                     **options: Any) -> Tuple[npt.NDArray[Any], npt.NDArray[np.float32]]:
    """The options of check_splash but backward, profile and tiers, plus num_threads.
    Returns out [num_q_heads, q_seq_len, head_dim_v] and lse [num_q_heads, q_seq_len]."""

def compare_splash(got: ArrayLike, q: ArrayLike, k: ArrayLike, v: ArrayLike, *,
                   atol: float = 1e-5, rtol: float = 1e-5, got_lse: Optional[ArrayLike] = None,
                   **options: Any) -> Report:
    """Compares another kernel's out [num_q_heads, q_seq_len, head_dim_v] (and lse) with the
    reference under the options of splash_attention (but return_lse and num_threads)."""

def splash_attention_backward(
        q: ArrayLike, k: ArrayLike, v: ArrayLike, dout: ArrayLike, **options: Any
) -> Tuple[npt.NDArray[Any], npt.NDArray[Any], npt.NDArray[Any], Optional[npt.NDArray[np.float32]]]:
    """dout [num_q_heads, q_seq_len, head_dim_v]; the options of splash_attention but
    return_lse. Returns (dq [num_q_heads, q_seq_len, head_dim_qk], dk (k's shape), dv (v's
    shape), dsinks [num_q_heads] float32 or None without sinks)."""

def check_ragged(q: ArrayLike, kv_pages: Union[ArrayLike, Tuple[ArrayLike, ArrayLike]],
                 kv_lens: ArrayLike, page_indices: ArrayLike, cu_q_lens: ArrayLike,
                 num_seqs: Union[int, ArrayLike], *, kv_layout: KvLayout = "jax",
                 sliding_window: Optional[int] = None, soft_cap: Optional[float] = None,
                 sm_scale: float = 1.0, mask_value: Optional[float] = None,
                 k_scale: Optional[float] = None, v_scale: Optional[float] = None,
                 num_kv_pages_per_block: Optional[int] = None,
                 num_queries_per_block: Optional[int] = None,
                 vmem_limit_bytes: Optional[int] = None, sinks: Optional[ArrayLike] = None,
                 alibi_slopes: Optional[ArrayLike] = None,
                alibi_convention: AlibiConvention = "signed",
                soft_cap_order: SoftCapOrder = "cap_then_alibi", profile: Profile = "reference",
                 tiers: Sequence[Tier] = ("shape", "metadata")) -> None:
    """q [max_num_batched_tokens, num_q_heads, head_dim]; kv_pages JAX's combined
    [total_pages, page_size, 2 * num_kv_heads, head_dim] or a (k_pages, v_pages) pair in
    kv_layout; kv_lens [max_num_seqs]; page_indices [max_num_seqs, pages_per_seq];
    cu_q_lens [max_num_seqs + 1]; num_seqs an int or [1]; sinks, alibi_slopes [num_q_heads]
    (read as float32)."""

@overload
def ragged_paged_attention(q: ArrayLike, kv_pages: Any, kv_lens: ArrayLike,
                           page_indices: ArrayLike, cu_q_lens: ArrayLike, num_seqs: Any, *,
                           return_lse: Literal[False] = ..., **options: Any) -> npt.NDArray[Any]: ...
@overload
def ragged_paged_attention(q: ArrayLike, kv_pages: Any, kv_lens: ArrayLike,
                           page_indices: ArrayLike, cu_q_lens: ArrayLike, num_seqs: Any, *,
                           return_lse: Literal[True],
                           **options: Any) -> Tuple[npt.NDArray[Any], npt.NDArray[np.float32]]:
    """The options of check_ragged but profile and tiers, plus num_threads. Returns out
    [max_num_batched_tokens, num_q_heads, head_dim] and lse [max_num_batched_tokens,
    num_q_heads] (-inf on padding rows)."""

def compare_ragged(got: ArrayLike, q: ArrayLike, kv_pages: Any, kv_lens: ArrayLike,
                   page_indices: ArrayLike, cu_q_lens: ArrayLike, num_seqs: Any, *,
                   atol: float = 1e-5, rtol: float = 1e-5, got_lse: Optional[ArrayLike] = None,
                   ignore_padding: bool = False, **options: Any) -> Report:
    """Compares another kernel's out [max_num_batched_tokens, num_q_heads, head_dim] (and
    lse) with the reference under the options of ragged_paged_attention (but return_lse and
    num_threads); ignore_padding leaves out rows past cu_q_lens[num_seqs]."""

def merge_attention_states(out_a: ArrayLike, lse_a: ArrayLike, out_b: ArrayLike,
                           lse_b: ArrayLike, *, num_threads: int = 1
                           ) -> Tuple[npt.NDArray[Any], npt.NDArray[np.float32]]:
    """out_a, out_b [rows, heads, head_dim], one dtype (float16, float32, float64 or bfloat16);
    lse_a, lse_b [rows, heads] float32. Returns the state over both key sets: out [rows, heads,
    head_dim] (their dtype; float32 holding bfloat16 values for bfloat16 states), lse [rows,
    heads]."""

class BuildInfo(TypedDict):
    version: str
    isa: Literal["baseline", "avx2", "avx512"]
    cpu_isa: Literal["baseline", "avx2", "avx512"]
    isa_forced: Optional[str]
    extension: str

def build_info() -> BuildInfo:
    """What this process runs: the version, the instruction-set level of the kernels (isa), the
    best level this CPU runs (cpu_isa), ATTNREF_ISA if set, and the extension imported."""

def get_include() -> str:
    """The directory holding attnref/attnref.hpp, in an installed wheel."""

def get_cmake_dir() -> str:
    """The directory holding attnrefConfig.cmake (cmake -Dattnref_DIR=...), in an installed
    wheel."""
