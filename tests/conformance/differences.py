# SPDX-License-Identifier: Apache-2.0
"""The deliberate differences between attnref (profile="jax") and JAX 0.10.2, as data: per row
of cases.py, what JAX does, what attnref does instead, and why. test_verdicts.py holds each row
to its entry; scripts/conformance.sh prints the table into docs/conformance.md.

An expectation is "accepted" or (kind, JAX check or "", text that the message contains)."""

ACCEPTED = "accepted"

# Every JAX check id of docs/errors.md that a verdict row exercises, or NOT_REACHED explains.
CATALOGUE_CHECKS = (
    [f"P{i}" for i in range(1, 11)] + [f"R{i}" for i in range(1, 19)] +
    ["S1", "S2", "S3", "S4", "S5", "S6", "S7", "S8", "S9", "S10", "S11", "S15", "S16", "S17",
     "S18", "S19", "S20", "S21", "M3", "M4", "M5", "M6", "M7", "K2", "K3", "K4", "K5", "K11",
     "K12"])

NOT_REACHED = {
    "S1": "attnref's Python module has no use_fused_bwd_kernel option (C++ SplashBlockSizes has)",
    "S15": "the module always sets the backward blocks (to the forward ones)",
    "S16": "the backward blocks are the forward ones, whose M3 check (bq divides Sq) fires first",
    "S17": "as S16, with M4 (bkv divides Skv)",
    "S18": "the dkv compute block is the forward one, which S7 already bounds by bkv",
    "S19": "as S18 (S7 is the same rule on the same blocks)",
    "S20": "block_kv_dq is block_kv, a multiple of 128 whenever S7 and S8 pass",
    "M5": "the module takes no q_seq_shards (one device); C++ SplashSharding has them",
    "M6": "as M5",
    "M7": "the module takes no head_shards (one device); C++ SplashSharding has them",
    "K2": "the module builds masks from specs, never with JAX's mask operators (or, and)",
    "K3": "as K2",
    "K4": "an empty list of masks; JAX's MultiHeadMask([]) fails before any shape is known",
    "K5": "the module gives every head mask the (Sq, Skv) of q and k",
    "K11": "the module takes no shard count for computable masks",
}

# Reasons shared by several rows.
_X64_OFF = "jax.jit turns numpy int64 into int32 when jax_enable_x64 is off (JAX's default)"
_LAX_DIV = "lax.div requires arguments to have the same dtypes, got int32, int64."
_X64_ON = ("JAX 0.10.2's kernel does not trace with jax_enable_x64 on, whatever the input (its "
           "index arithmetic mixes int32 and int64); the checks JAX makes before tracing (P7, "
           "R1..R6) still answer. attnref answers as JAX with x64 off")
_INDEX_DTYPE = ("JAX never checks page_indices' dtype; attnref reads int32 page tables (int64 "
                "too outside the jax profile): pass page_indices.astype(np.int32)")
_KV_DTYPES = ("JAX's paged kernel never compares the two pools' dtypes and computes with each; "
              "attnref's kernels read K and V of one element type: cast both pools to one")
_F16_Q = ("JAX never compares q's dtype with the pages'; attnref's float16 kernel reads float16 "
          "or int8 pages (float32 and bfloat16 queries read every float page type)")
_UNREAD = ("both reject; attnref reads its arguments before it checks them, and it has no "
           "type for int16 or uint32 arrays, so it names the dtype instead of JAX's check")
_UNPACKING = "JAX fails in Python tuple unpacking; attnref names the tensor and its rank"
_QKV_DTYPES = ("JAX's kernel mixes dtypes in its products; attnref's splash kernels take q, k "
               "and v of one dtype: cast them to one")
_WRONG_AXES = ("JAX reads q_seq_len from the wrong axis and fails on a block size (M3); "
               "attnref names the tensor and its rank")

DIFFERENCES = {
    # ---- paged
    ("paged", "P4 ppcb 2 over 3 pages"): dict(
        jax=("ValueError", "", "pages_per_compute_block must be divisible by pages per "
             "sequence. Got 2 and 3."),
        attnref=("ShapeError", "P4", "pages_per_sequence must be divisible by "
                 "pages_per_compute_block. Got 3 pages per sequence and "
                 "pages_per_compute_block 2."),
        reason="JAX's text states the rule reversed; attnref states the rule it checks"),
    ("paged", "P7 int64 lengths"): dict(
        jax=ACCEPTED,
        attnref=("ShapeError", "P7", "The dtype of `lengths` must be int32. Got int64"),
        reason="jax.jit turns numpy int64 into int32 when x64 is off (JAX's default), so P7 "
               "never sees it; attnref checks the dtype passed, which a jax.Array of int64 "
               "(x64 on) also fails in JAX"),
    ("paged", "own: 0 KV heads"): dict(
        jax=("ZeroDivisionError", "", "integer modulo by zero"),
        attnref=("ShapeError", "", "num_kv_heads must be positive. Got 0."),
        reason="JAX divides by zero; attnref names the field"),
    ("paged", "own: ppcb 0"): dict(
        jax=("ZeroDivisionError", "", "integer modulo by zero"),
        attnref=("ShapeError", "", "pages_per_compute_block must be positive. Got 0."),
        reason="JAX divides by zero; attnref names the field"),
    ("paged", "own: length past capacity"): dict(
        jax=ACCEPTED,
        attnref=("ShapeError", "", "lengths[0]=13 is outside [0, 12]"),
        reason="JAX does not check; its kernel reads the next row's page indices or past the "
               "page table"),
    ("paged", "own: negative length"): dict(
        jax=ACCEPTED,
        attnref=("ShapeError", "", "lengths[0]=-1 is outside [0, 12]"),
        reason="JAX does not check lengths"),
    ("paged", "own: page index past the pool"): dict(
        jax=ACCEPTED,
        attnref=("ShapeError", "", "page_indices[0, 2]=8 is outside [0, 8) (total_pages)"),
        reason="JAX does not check; on a TPU the DMA reads out of bounds"),
    ("paged", "own: soft cap 0"): dict(
        jax=ACCEPTED,
        attnref=("ShapeError", "", "soft_cap=0.0 must not be 0.0 and must be finite."),
        reason="JAX computes x / 0 (NaN output); ragged's R8 rejects the same value"),
    ("paged", "own: q of rank 2"): dict(
        jax=("ValueError", "", "not enough values to unpack (expected 3, got 2)"),
        attnref=("ShapeError", "", "q must have 3 dimensions; got 2"),
        reason="JAX fails in Python tuple unpacking; attnref names the tensor and its rank"),
    # What JAX converts or never checks (cases.py's second group).
    ("paged", "own: int64 page_indices"): dict(
        jax=ACCEPTED,
        attnref=("ShapeError", "", "lengths (int32) and page_indices (int64) must have the "
                 "same dtype"),
        reason=_X64_OFF + "; attnref checks the dtypes passed (with x64 on, JAX's kernel "
               "does not trace at all: the x64 rows): pass int32 indices"),
    ("paged", "own: int64 lengths and page_indices"): dict(
        jax=ACCEPTED,
        attnref=("ShapeError", "P7", "The dtype of `lengths` must be int32. Got int64"),
        reason=_X64_OFF + ", so P7 never sees int64; attnref checks the dtype passed, as JAX "
               "with x64 on does (P7)"),
    ("paged", "own: uint32 page_indices"): dict(
        jax=ACCEPTED,
        attnref=("ShapeError", "", "page_indices has dtype uint32, which attnref does not read"),
        reason=_INDEX_DTYPE),
    ("paged", "own: int16 page_indices"): dict(
        jax=ACCEPTED,
        attnref=("ShapeError", "", "page_indices has dtype int16, which attnref does not read"),
        reason=_INDEX_DTYPE),
    ("paged", "own: uint32 lengths"): dict(
        jax=("ValueError", "", "The dtype of `lengths` must be int32. Got uint32"),
        attnref=("ShapeError", "", "lengths has dtype uint32, which attnref does not read"),
        reason=_UNREAD),
    ("paged", "own: float32 page_indices"): dict(
        jax=ACCEPTED,
        attnref=("ShapeError", "", "page_indices has dtype float32, which is not supported "
                 "here"),
        reason=_INDEX_DTYPE),
    ("paged", "x64 on: valid"): dict(
        jax=("TypeError", "", _LAX_DIV), attnref=ACCEPTED, reason=_X64_ON),
    ("paged", "own: K float32, V bfloat16"): dict(
        jax=ACCEPTED,
        attnref=("ShapeError", "", "k_pages (float32) and v_pages (bfloat16) must have the "
                 "same dtype"),
        reason=_KV_DTYPES),
    ("paged", "own: K bfloat16, V float32"): dict(
        jax=ACCEPTED,
        attnref=("ShapeError", "", "k_pages (bfloat16) and v_pages (float32) must have the "
                 "same dtype"),
        reason=_KV_DTYPES),
    ("paged", "own: float16 q over float32 pages"): dict(
        jax=ACCEPTED,
        attnref=("ShapeError", "", "k_pages has dtype float32; a float16 query reads K/V pages "
                 "of its own dtype or int8 with scales"),
        reason=_F16_Q),
    ("paged", "own: int8 pages with bfloat16 scales"): dict(
        jax=ACCEPTED,
        attnref=("ShapeError", "", "k_scales has dtype bfloat16, which is not supported here"),
        reason="JAX multiplies by scales of any float dtype; attnref's kernels read float32 "
               "scales: pass scales.astype(np.float32)"),
    ("paged", "zero-size: head_dim 0"): dict(
        jax=("ZeroDivisionError", "", "integer modulo by zero"),
        attnref=("ShapeError", "", "head_dim must be positive."),
        reason="JAX divides by zero; attnref names the field"),
    ("paged", "own: q of rank 4"): dict(
        jax=("ValueError", "", "too many values to unpack (expected 3)"),
        attnref=("ShapeError", "", "q must have 3 dimensions; got 4"), reason=_UNPACKING),
    ("paged", "own: k_pages of rank 3"): dict(
        jax=("ValueError", "", "not enough values to unpack (expected 4, got 3)"),
        attnref=("ShapeError", "", "k_pages must have 4 dimensions; got 3"), reason=_UNPACKING),
    ("paged", "own: v_pages of rank 3"): dict(
        jax=("ValueError", "", "k_pages and v_pages must have the same shape. Got "
             "(2, 8, 4, 16) and (8, 4, 16)"),
        attnref=("ShapeError", "", "v_pages must have 4 dimensions; got 3"),
        reason="JAX compares the pools' shapes (P1); attnref checks each tensor's rank first "
               "and names it"),
    ("paged", "own: page_indices of rank 1"): dict(
        jax=("ValueError", "", "not enough values to unpack (expected 2, got 1)"),
        attnref=("ShapeError", "", "page_indices must have 2 dimensions; got 1"),
        reason=_UNPACKING),
    ("paged", "own: page_indices of rank 3"): dict(
        jax=("ValueError", "", "too many values to unpack (expected 2)"),
        attnref=("ShapeError", "", "page_indices must have 2 dimensions; got 3"),
        reason=_UNPACKING),
    ("paged", "own: lengths of rank 0"): dict(
        jax=("ValueError", "", "`lengths` and `q` must have the same batch size"),
        attnref=("ShapeError", "", "lengths must have 1 dimension; got 0"),
        reason="JAX compares a 0-d array's missing batch dimension with q's (P5); attnref "
               "checks the rank first and names it"),
    # ---- ragged
    ("ragged", "R12 3 combined KV heads"): dict(
        jax=("AssertionError", "", ""),
        attnref=("ShapeError", "R12", "num_combined_kv_heads=3 must be even"),
        reason="JAX's check is a bare assert without text"),
    ("ragged", "R13 k_scale an int"): dict(
        jax=("AssertionError", "", ""),
        attnref=ACCEPTED,
        reason="JAX asserts isinstance(k_scale, float), a Python typing rule; the module reads "
               "any real number as a float"),
    ("ragged", "R14 and R16 both broken"): dict(
        jax=("ValueError", "", "pages_per_seq=3 must be greater or equal to min_pages_per_seq="),
        attnref=("ShapeError", "R14", "Not implemented: num_combined_kv_heads=6 can not be XLA "
                 "fully tiled."),
        reason="attnref's shape tier checks R14, a static rule of JAX's kernel, before its "
               "metadata tier reads kv_lens (R15..R18); JAX's kernel checks R14 after a caller's "
               "dynamic_validate_inputs, which the kernel alone never runs"),
    ("ragged", "own: head_dim 16"): dict(
        jax=("AssertionError", "", ""),
        attnref=ACCEPTED,
        reason="an assert inside JAX's kernel body (head_dim must be a multiple of 128, the "
               "lane width of its l/m scratch), not an input check; attnref computes any "
               "head_dim"),
    ("ragged", "own: block sizes left to the TPU tuner"): dict(
        jax=("NotImplementedError", "", "TPU version must be 4 or higher."),
        attnref=ACCEPTED,
        reason="without both block sizes JAX looks up tuned ones for the TPU it runs on (R19); "
               "the block sizes have no numerical effect"),
    ("ragged", "own: negative kv_len"): dict(
        jax=("ValueError", "", "must be less or equal to kv_len=np.int32(-1) at sequence 1."),
        attnref=("ShapeError", "", "kv_lens[1]=-1 must not be negative"),
        reason="JAX rejects it only through R18 (or not at all for a sequence without "
               "queries); attnref names the negative length"),
    ("ragged", "own: cu_q_lens decreasing"): dict(
        jax=ACCEPTED,
        attnref=("ShapeError", "", "cu_q_lens must not decrease"),
        reason="JAX does not check; a negative q_len passes R18"),
    ("ragged", "own: page index past the pool"): dict(
        jax=ACCEPTED,
        attnref=("ShapeError", "", "page_indices[0, 1]=10 is outside [0, 10) (total_pages)"),
        reason="JAX does not check; on a TPU the DMA reads out of bounds"),
    ("ragged", "own: k_scale nan"): dict(
        jax=ACCEPTED,
        attnref=("ShapeError", "R13", "k_scale=nan must be a finite float or None."),
        reason="JAX checks only the Python type; NaN scales make every output NaN"),
    ("ragged", "x64 on: valid"): dict(
        jax=("TypeError", "", _LAX_DIV), attnref=ACCEPTED, reason=_X64_ON),
    ("ragged", "own: uint32 cu_q_lens"): dict(
        jax=("ValueError", "", "The dtype of `kv_lens`, `page_indices`, and `cu_q_lens` must be "
             "int32."),
        attnref=("ShapeError", "", "cu_q_lens has dtype uint32, which attnref does not read"),
        reason=_UNREAD),
    ("ragged", "R13 k_scale a numpy float32"): dict(
        jax=("AssertionError", "", ""),
        attnref=ACCEPTED,
        reason="JAX asserts isinstance(k_scale, float), which a numpy float32 fails; the "
               "module reads any real number as a float"),
    ("ragged", "own: num_seqs a Python int"): dict(
        jax=("AttributeError", "", "'int' object has no attribute 'shape'"),
        attnref=ACCEPTED,
        reason="JAX takes num_seqs as a (1,) array only; the module also takes the host integer "
               "an engine's scheduler holds"),
    ("ragged", "own: num_seqs of rank 0"): dict(
        jax=("ValueError", "", "num_seqs.shape=() must be (1,)"),
        attnref=("ShapeError", "", "num_seqs must have 1 dimension; got 0"),
        reason="JAX's R1 compares the whole shape; attnref checks the rank first and names it "
               "(a (2,) num_seqs is R1 in both)"),
    ("ragged", "own: float16 q over float32 pages"): dict(
        jax=("AssertionError", "", ""),
        attnref=("ShapeError", "", "kv_pages has dtype float32; a float16 query reads K/V pages "
                 "of its own dtype or int8 with scales"),
        reason="JAX asserts inside its kernel, without text; attnref names the two dtypes"),
    ("ragged", "own: float16 q and pages"): dict(
        jax=("AssertionError", "", ""),
        attnref=ACCEPTED,
        reason="an assert inside JAX's kernel body (its query tile must be bfloat16 or "
               "float32), not an input check; attnref computes float16"),
    ("ragged", "own: q of rank 2"): dict(
        jax=("ValueError", "", "not enough values to unpack (expected 3, got 2)"),
        attnref=("ShapeError", "", "q must have 3 dimensions; got 2"), reason=_UNPACKING),
    ("ragged", "own: kv_pages of rank 3"): dict(
        jax=("ValueError", "", "not enough values to unpack (expected 4, got 3)"),
        attnref=("ShapeError", "", "kv_pages must have 4 dimensions; got 3"), reason=_UNPACKING),
    ("ragged", "own: page_indices of rank 1"): dict(
        jax=("ValueError", "", "not enough values to unpack (expected 2, got 1)"),
        attnref=("ShapeError", "", "page_indices must have 2 dimensions; got 1"),
        reason=_UNPACKING),
    # ---- splash
    ("splash", "S3 a 4-dim key in MHA"): dict(
        jax=("ValueError", "", "Expected 3-dim 'key' tensor for MQA. Instead got a 4-dim one."),
        attnref=("ShapeError", "S3", "Expected 3-dim 'key' tensor for MHA. Instead got a "
                 "4-dim one."),
        reason="JAX's text says MQA in MHA mode; attnref names the mode used"),
    ("splash", "S5 3 query heads over 2 KV heads"): dict(
        jax=("ValueError", "", "In MHA, expected number of 'key' heads (2) to be a multiple "
             "of the number of 'query' heads (3)"),
        attnref=("ShapeError", "S5", "In MHA, expected number of 'query' heads (3) to be a "
                 "multiple of the number of 'key' heads (2)"),
        reason="JAX's text states the rule reversed; attnref states the rule it checks"),
    ("splash", "S11 sinks of shape (3,)"): dict(
        jax=("AssertionError", "", ""),
        attnref=("ShapeError", "S11", "sinks must have shape (2,), one logit per query head. "
                 "Got (3,)."),
        reason="JAX's check is a bare assert without text"),
    ("splash", "x64 on: valid"): dict(
        jax=("TypeError", "", _LAX_DIV), attnref=ACCEPTED, reason=_X64_ON),
    ("splash", "own: float32 q, bfloat16 k and v"): dict(
        jax=ACCEPTED,
        attnref=("ShapeError", "", "k has dtype bfloat16; expected float32"), reason=_QKV_DTYPES),
    ("splash", "own: float32 q and k, bfloat16 v"): dict(
        jax=ACCEPTED,
        attnref=("ShapeError", "", "v has dtype bfloat16; expected float32"), reason=_QKV_DTYPES),
    ("splash", "own: int64 segment ids"): dict(
        jax=ACCEPTED,
        attnref=("ShapeError", "", "q_segment_ids has dtype int64, which is not supported here"),
        reason=_X64_OFF + "; attnref checks the dtype passed (with x64 on, JAX's kernel "
               "does not trace at all: the x64 row): pass int32 segment ids"),
    ("splash", "zero-size: no query rows"): dict(
        jax=("ValueError", "", "max() arg is an empty sequence"),
        attnref=ACCEPTED,
        reason="JAX's mask preprocessing fails on an empty mask; attnref computes the empty "
               "output"),
    ("splash", "zero-size: head_dim 0"): dict(
        jax=ACCEPTED,
        attnref=("ShapeError", "", "head_dim must be positive."),
        reason="JAX traces an empty contraction; attnref requires head_dim >= 1, as its paged "
               "check does (where JAX divides by zero)"),
    ("splash", "own: q of rank 2"): dict(
        jax=("ValueError", "", "q_block_size=128 should divide q_seq_len=16."),
        attnref=("ShapeError", "", "q must have 3 dimensions; got 2"), reason=_WRONG_AXES),
    ("splash", "own: q of rank 4"): dict(
        jax=("ValueError", "", "q_block_size=128 should divide q_seq_len=2."),
        attnref=("ShapeError", "", "q must have 3 dimensions; got 4"), reason=_WRONG_AXES),
}

# Check order: attnref's shape tier runs R14 (a static rule of JAX's kernel) before its metadata
# tier reads the arrays for R15..R18; JAX's kernel runs R14 itself, after a caller's
# dynamic_validate_inputs (R15..R18), which the kernel alone never runs.
REORDERED = {("ragged", "R14"): {"R15": "num_seqs[0]=", "R16": "pages_per_seq=",
                                 "R17": "Total q tokens ", "R18": "q_len="}}


def reordered(family: str, ours_check: str, jax_text: str) -> bool:
    """attnref reports ours_check where JAX, checking in another order, reports a check that
    REORDERED pairs with it (recognised by the start of JAX's text)."""
    later = REORDERED.get((family, ours_check), {})
    return any(jax_text.startswith(prefix) for prefix in later.values())


# Checks whose JAX text attnref rewords everywhere (the drawn tests accept the rewording).
REWORDED = {("paged", "P4"), ("splash", "S3"), ("splash", "S5")}


def reworded(family: str, check: str) -> bool:
    return (family, check) in REWORDED


def matches(expected, verdict) -> bool:
    if expected == ACCEPTED:
        return verdict.accepted
    kind, check, text = expected
    return (not verdict.accepted and verdict.kind == kind and verdict.check == check and
            text in verdict.text)


def untraceable_with_x64(verdict) -> bool:
    """JAX's verdict is the failure of its kernel to trace with jax_enable_x64 on (_X64_ON)."""
    return not verdict.accepted and verdict.kind == "TypeError" and _LAX_DIV in verdict.text
