// Engine targets: every rule tripped alone (severity, id, the engine's exact message or
// attnref's explanation), accepted configurations per kernel, reports sorted worst first,
// unknown names, and docs/engines.md generated from the rule tables.
#include <gtest/gtest.h>

#include <attnref/validate/engines.hpp>

#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace {

using attnref::DType;
using attnref::EngineConfig;
using attnref::EngineKernel;
using attnref::EngineTarget;
using attnref::Severity;

constexpr EngineConfig kLlama3_8b{32, 8, 128, 0, 16};  // bf16, pages of 16
constexpr EngineConfig kLlama3_8bPages256{32, 8, 128, 0, 256};
constexpr EngineConfig kDeepSeekV3Mla{128, 1, 576, 512, 64};  // MLA latent cache
constexpr EngineTarget kFiDecode{EngineKernel::kFlashInferDecode, 90};
constexpr EngineTarget kFiFa2{EngineKernel::kFlashInferPrefillFa2, 90};

static_assert(attnref::engine_finding_count(kLlama3_8b, kFiDecode) == 0, "Llama-3-8B decodes");
static_assert(attnref::engine_finding_count({28, 4, 128, 0, 16}, kFiDecode) == 1,
              "Qwen2-7B: 7 query heads per KV head has no CUDA-core decode kernel");
static_assert(attnref::engine_finding_count({28, 4, 128, 0, 16},
                                            {EngineKernel::kFlashInferDecodeTensorCores, 90}) == 0,
              "Qwen2-7B on the tensor-core decode path");
static_assert(attnref::engine_finding_count({0, 8, 128}, kFiDecode) == -1, "invalid config");

struct RuleCase {
  EngineKernel kernel;
  int arch;
  attnref::EngineVersion version;
  std::uint32_t flags;
  EngineConfig config;
  std::string id;
  Severity severity;
  std::string message;  // the finding's Status message: upstream text, else the explanation
};

EngineConfig heads(EngineConfig c, std::int64_t hq, std::int64_t hkv) {
  c.num_q_heads = hq;
  c.num_kv_heads = hkv;
  return c;
}
EngineConfig dims(EngineConfig c, std::int64_t d, std::int64_t dv = 0) {
  c.head_dim = d;
  c.head_dim_v = dv;
  return c;
}
EngineConfig dtypes(EngineConfig c, DType q, DType kv) {
  c.q_dtype = q;
  c.kv_dtype = kv;
  return c;
}
EngineConfig page(EngineConfig c, std::int64_t s) {
  c.page_size = s;
  return c;
}
EngineConfig sinks(EngineConfig c) {
  c.sinks = true;
  return c;
}
EngineConfig alibi(EngineConfig c) {
  c.alibi = true;
  return c;
}
EngineConfig soft_cap(EngineConfig c) {
  c.soft_cap = true;
  return c;
}
EngineConfig window(EngineConfig c, std::int64_t w) {
  c.sliding_window = w;
  return c;
}
EngineConfig q_len(EngineConfig c, std::int64_t n) {
  c.q_len = n;
  return c;
}
EngineConfig non_causal(EngineConfig c) {
  c.causal = false;
  return c;
}
EngineConfig kv_len(EngineConfig c, std::int64_t n) {
  c.kv_len = n;
  return c;
}

constexpr DType kBf16 = DType::kBFloat16;
constexpr DType kF16 = DType::kFloat16;
constexpr DType kF32 = DType::kFloat32;
constexpr DType kE4m3 = DType::kFloat8E4M3FN;
constexpr DType kE5m2 = DType::kFloat8E5M2;
constexpr EngineKernel kFiDec = EngineKernel::kFlashInferDecode;
constexpr EngineKernel kFa2Pf = EngineKernel::kFlashInferPrefillFa2;
constexpr EngineKernel kFa3Pf = EngineKernel::kFlashInferPrefillFa3;
constexpr EngineKernel kVlV1 = EngineKernel::kVllmPagedAttentionV1;
constexpr EngineKernel kVlV2 = EngineKernel::kVllmPagedAttentionV2;
constexpr EngineKernel kVlFa = EngineKernel::kVllmFlashAttn;
constexpr EngineKernel kVlTr = EngineKernel::kVllmTritonAttn;
constexpr EngineKernel kVlFi = EngineKernel::kVllmFlashInfer;
constexpr EngineKernel kVlFam = EngineKernel::kVllmFlashAttnMla;
constexpr EngineKernel kVlFm = EngineKernel::kVllmFlashMla;
constexpr EngineKernel kVlCm = EngineKernel::kVllmCutlassMla;
constexpr EngineKernel kVlTm = EngineKernel::kVllmTritonMla;
constexpr EngineKernel kVlFim = EngineKernel::kVllmFlashInferMla;
constexpr EngineKernel kFa2 = EngineKernel::kFlashAttention2;
constexpr EngineKernel kFa3 = EngineKernel::kFlashAttention3;
constexpr EngineKernel kFa4 = EngineKernel::kFlashAttention4;
constexpr EngineKernel kMla = EngineKernel::kFlashMlaDecode;
constexpr std::uint32_t kUnevenOff = attnref::kFa2DisableUnevenK;

std::vector<RuleCase> rule_cases() {
  const EngineConfig L = kLlama3_8b;
  const EngineConfig P = kLlama3_8bPages256;
  const EngineConfig M = kDeepSeekV3Mla;
  return {
      // FlashInfer batch decode, CUDA cores.
      {kFiDec,
       90,
       {},
       0,
       heads(L, 40, 8),
       "flashinfer.decode.group_size",
       Severity::kRejects,
       "Unsupported group_size: 5"},
      {kFiDec,
       90,
       {0, 6, 18},
       0,
       heads(L, 128, 8),
       "flashinfer.decode.group_size",
       Severity::kRejects,
       "Unsupported group_size: 16"},
      {kFiDec,
       90,
       {0, 6, 17},
       0,
       heads(L, 48, 8),
       "flashinfer.decode.group_size",
       Severity::kRejects,
       "Unsupported group_size: 6"},
      {kFiDec,
       90,
       {0, 1, 6},
       0,
       heads(L, 24, 8),
       "flashinfer.decode.group_size",
       Severity::kRejects,
       "Unsupported group_size: 3"},
      {kFiDec,
       90,
       {},
       0,
       heads(L, 36, 8),
       "flashinfer.decode.heads_divisible",
       Severity::kSilentlyWrong,
       "batch decode never checks that num_qo_heads (36) is a multiple of num_kv_heads (8): it "
       "runs with 4 query heads per KV head, so some query heads read the wrong KV head or are "
       "never written"},
      {kFiDec,
       90,
       {},
       0,
       dims(L, 128, 64),
       "flashinfer.decode.head_dim_vo",
       Severity::kRejects,
       "CUDA cores template only supports equal head dim for QK and VO, please use tensor "
       "cores "
       "template for different head dim"},
      {kFiDec,
       90,
       {},
       0,
       q_len(L, 4),
       "flashinfer.decode.q_len",
       Severity::kRejects,
       "q implies q_len_per_req=4, but the non-tensor-core decode kernel only supports "
       "q_len_per_req=1."},
      {kFiDec,
       90,
       {},
       0,
       sinks(L),
       "flashinfer.decode.sinks_ignored",
       Severity::kSilentlyWrong,
       "sinks= is dropped on the CUDA-core decode path: the softmax runs without the sink "
       "logits"},
      {kFiDec,
       90,
       {},
       0,
       soft_cap(alibi(L)),
       "flashinfer.alibi_soft_cap_scale",
       Severity::kSilentlyWrong,
       "with both ALiBi and a soft cap, DefaultAttention scales the logits by sm_scale twice: "
       "c * "
       "tanh((s * sm_scale + bias) * sm_scale / c)"},
      // FlashInfer prefill fa2 (and tensor-core decode).
      {kFa2Pf,
       90,
       {},
       0,
       heads(L, 12, 5),
       "flashinfer.prefill.heads_divisible",
       Severity::kRejects,
       "num_qo_heads 12 should be divisible by num_kv_heads 5"},
      {kFa2Pf,
       90,
       {},
       0,
       dims(L, 128, 32),
       "flashinfer.prefill.fa2_head_dim_min",
       Severity::kRejects,
       "FlashInfer Internal Error: Invalid configuration : NUM_MMA_Q=…"},
      {kFa2Pf,
       90,
       {},
       0,
       dims(L, 72),
       "flashinfer.prefill.head_dim_16",
       Severity::kSilentlyWrong,
       "the prefill kernels tile head_dim by 16 and never check it: head dims 72 and 72 are "
       "cut "
       "to a multiple of 16 and the rest of each head is ignored"},
      {kFa2Pf,
       90,
       {},
       0,
       dims(L, 96),
       "flashinfer.prefill.head_dim_64",
       Severity::kOutOfBounds,
       "the prefill kernels never check head_dim: head dims 96 and 96, multiples of 16 but not "
       "of 64, make an illegal memory access"},
      {kFa2Pf,
       90,
       {},
       0,
       dtypes(L, kE4m3, kE4m3),
       "flashinfer.prefill.fa2_fp8_q",
       Severity::kRejects,
       "fp8 tensor core is not supported in fa2 backend"},
      {kFa2Pf,
       90,
       {0, 6, 18},
       0,
       dtypes(dims(L, 512), kBf16, kE4m3),
       "flashinfer.prefill.large_head_arch",
       Severity::kFailsToBuild,
       "No supported CUDA architectures found for major versions [10, 11, 12]."},
      {kFa2Pf,
       89,
       {0, 6, 14},
       0,
       dims(L, 512),
       "flashinfer.prefill.large_head_arch",
       Severity::kFailsToBuild,
       "No supported CUDA architectures found for major versions [10, 11, 12]."},
      {kFa2Pf,
       100,
       {0, 6, 13},
       0,
       dims(L, 512),
       "flashinfer.prefill.fa2_head_dim_512",
       Severity::kRejects,
       "FlashInfer Internal Error: Invalid configuration : NUM_MMA_Q=…"},
      {kFa2Pf,
       90,
       {},
       0,
       dims(L, 320),
       "flashinfer.prefill.fa2_head_dim_vo_tiles",
       Severity::kFailsToBuild,
       "static_assert(NUM_MMA_D_VO % NUM_MMA_D_VO_TILE == 0, \"NUM_MMA_D_VO must be divisible "
       "by NUM_MMA_D_VO_TILE\")"},
      {kFa2Pf,
       90,
       {},
       0,
       sinks(L),
       "flashinfer.prefill.sinks_ignored",
       Severity::kSilentlyWrong,
       "sinks= reaches paged_run but only backend trtllm-gen uses it: on fa2 and fa3 the "
       "softmax "
       "runs without the sink logits"},
      {kFa2Pf,
       80,
       {},
       0,
       soft_cap(alibi(L)),
       "flashinfer.alibi_soft_cap_scale",
       Severity::kSilentlyWrong,
       "with both ALiBi and a soft cap, DefaultAttention scales the logits by sm_scale twice: "
       "c * "
       "tanh((s * sm_scale + bias) * sm_scale / c)"},
      // FlashInfer prefill fa3.
      {kFa3Pf,
       80,
       {},
       0,
       L,
       "flashinfer.prefill.fa3_arch",
       Severity::kFallsBack,
       "the fa3 kernels exist for sm90a only; backend='auto' runs fa2 on this GPU"},
      {kFa3Pf,
       90,
       {},
       0,
       dims(L, 96),
       "flashinfer.prefill.fa3_head_dim",
       Severity::kFailsToBuild,
       "static_assert(HEAD_DIM_VO == 64 || HEAD_DIM_VO == 128 || HEAD_DIM_VO == 256)"},
      {kFa3Pf,
       90,
       {},
       0,
       dtypes(L, kBf16, kE4m3),
       "flashinfer.prefill.fa3_fp8_kv",
       Severity::kFallsBack,
       "fa3 takes fp8 K/V only with an fp8 query; backend='auto' runs fa2 instead"},
      {kFa3Pf,
       90,
       {},
       0,
       alibi(L),
       "flashinfer.prefill.fa3_alibi_ignored",
       Severity::kSilentlyWrong,
       "with backend='fa3' forced, paged_run and ragged_run never pass ALiBi slopes to the "
       "kernel"},
      {kFa3Pf,
       90,
       {},
       0,
       soft_cap(dtypes(L, kE4m3, kE4m3)),
       "flashinfer.prefill.fa3_fp8_soft_cap_ignored",
       Severity::kSilentlyWrong,
       "the fp8 fa3 variant has no logits_soft_cap parameter: the cap is not applied"},
      {kFa3Pf,
       90,
       {},
       0,
       heads(L, 12, 5),
       "flashinfer.prefill.heads_divisible",
       Severity::kRejects,
       "num_qo_heads 12 should be divisible by num_kv_heads 5"},
      {kFa3Pf,
       90,
       {},
       0,
       sinks(L),
       "flashinfer.prefill.sinks_ignored",
       Severity::kSilentlyWrong,
       "sinks= reaches paged_run but only backend trtllm-gen uses it: on fa2 and fa3 the "
       "softmax "
       "runs without the sink logits"},
      // vLLM paged_attention_v1 / v2.
      {kVlV1,
       90,
       {},
       0,
       dims(L, 72),
       "vllm.paged_attention.head_size",
       Severity::kRejects,
       "Unsupported head size: 72"},
      {kVlV2,
       90,
       {},
       0,
       page(L, 64),
       "vllm.paged_attention.block_size",
       Severity::kRejects,
       "Unsupported block size: 64"},
      {kVlV1,
       90,
       {},
       0,
       dtypes(L, DType::kFloat64, DType::kFloat64),
       "vllm.paged_attention.q_dtype",
       Severity::kRejects,
       "Unsupported input type of kv cache: float64"},
      {kVlV1,
       90,
       {},
       0,
       dtypes(L, kBf16, DType::kInt8),
       "vllm.paged_attention.kv_dtype",
       Severity::kRejects,
       "K/V pages are read in the query's dtype (kv_cache_dtype 'auto') or as fp8 ('fp8', "
       "'fp8_e5m2'); no kv_cache_dtype names int8 pages"},
      {kVlV1,
       90,
       {},
       0,
       dims(L, 128, 64),
       "vllm.paged_attention.head_dim_v",
       Severity::kSilentlyWrong,
       "paged_attention reads V with the query's head_size (128); a V head_dim of 64 is read "
       "with the wrong extent"},
      {kVlV2,
       90,
       {},
       0,
       window(L, 4096),
       "vllm.paged_attention.sliding_window",
       Severity::kSilentlyWrong,
       "paged_attention has no sliding-window parameter: it attends to the whole context"},
      {kVlV1,
       90,
       {},
       0,
       soft_cap(L),
       "vllm.paged_attention.soft_cap",
       Severity::kSilentlyWrong,
       "paged_attention has no soft-cap parameter: the logits are not capped"},
      {kVlV1,
       90,
       {},
       0,
       sinks(L),
       "vllm.paged_attention.sinks",
       Severity::kSilentlyWrong,
       "paged_attention has no sinks parameter: the softmax runs without the sink logits"},
      // vLLM FLASH_ATTN backend.
      {kVlFa,
       90,
       {},
       0,
       dims(L, 100),
       "vllm.flash_attn.head_size",
       Severity::kRejects,
       "head_size not supported"},
      {kVlFa,
       90,
       {0, 32, 0},
       0,
       page(L, 8),
       "vllm.flash_attn.block_size",
       Severity::kRejects,
       "Block size must be a multiple of 16."},
      {kVlFa,
       90,
       {},
       0,
       dtypes(L, kF32, kF32),
       "vllm.flash_attn.dtype",
       Severity::kRejects,
       "dtype not supported"},
      {kVlFa,
       90,
       {},
       0,
       dtypes(L, kBf16, DType::kInt8),
       "vllm.flash_attn.kv_dtype",
       Severity::kRejects,
       "kv_cache_dtype not supported"},
      {kVlFa,
       80,
       {0, 32, 0},
       0,
       dtypes(L, kBf16, kE4m3),
       "vllm.flash_attn.fp8_kv_arch",
       Severity::kRejects,
       "FlashAttention does not support fp8 kv-cache on this device."},
      {kVlFa,
       90,
       {0, 32, 0},
       0,
       dtypes(L, kBf16, kE5m2),
       "vllm.flash_attn.fp8_e5m2",
       Severity::kRejects,
       "Unrecognized FP8 dtype: fp8_e5m2"},
      {kVlFa,
       80,
       {0, 32, 0},
       0,
       sinks(L),
       "vllm.flash_attn.sinks_arch",
       Severity::kRejects,
       "Sinks are only supported in FlashAttention 3"},
      {kVlFa,
       90,
       {},
       0,
       sinks(heads(L, 128, 8)),
       "vllm.flash_attn.sinks_q_heads",
       Severity::kRejects,
       "We only support query heads <= 64 with S aux"},
      {kVlFa,
       90,
       {},
       0,
       sinks(dtypes(L, kF16, kF16)),
       "vllm.flash_attn.sinks_bf16",
       Severity::kRejects,
       "We only support bf16 dtype for S aux."},
      {kVlFa,
       90,
       {},
       0,
       alibi(L),
       "vllm.flash_attn.alibi_fa2",
       Severity::kFallsBack,
       "Cannot use FA version 3 with ALiBi, defaulting to FA version 2."},
      // vLLM FLASH_ATTN from 0.33.0 (the selector's reasons and the implementation's checks).
      {kVlFa,
       89,
       {},
       0,
       dims(L, 320),
       "vllm.flash_attn.head_size",
       Severity::kRejects,
       "head_size not supported"},
      {kVlFa,
       90,
       {},
       0,
       page(L, 8),
       "vllm.flash_attn.block_size",
       Severity::kRejects,
       "block_size not supported"},
      {kVlFa,
       100,
       {},
       0,
       dtypes(dims(L, 192), kBf16, kE4m3),
       "vllm.flash_attn.fp8_kv",
       Severity::kRejects,
       "FP8 KV cache requires FA3 on SM90, FA4 with head_size=512 on SM90, or FA4 on SM100"},
      {kVlFa,
       100,
       {},
       0,
       soft_cap(page(dtypes(dims(L, 256), kBf16, kE4m3), 128)),
       "vllm.flash_attn.fp8_kv_layer",
       Severity::kRejects,
       "FlashAttention does not support fp8 kv-cache on this device."},
      {kVlFa,
       120,
       {},
       0,
       sinks(L),
       "vllm.flash_attn.sinks",
       Severity::kRejects,
       "attention sinks not supported"},
      {kVlFa,
       100,
       {},
       0,
       alibi(L),
       "vllm.flash_attn.alibi_fa4",
       Severity::kFallsBack,
       "Cannot use FA version 4 with ALiBi, defaulting to FA version 2."},
      // vLLM TRITON_ATTN backend.
      {kVlTr,
       90,
       {},
       0,
       dims(L, 16),
       "vllm.triton_attn.head_size",
       Severity::kRejects,
       "head_size not supported"},
      {kVlTr,
       80,
       {0, 32, 0},
       0,
       page(L, 24),
       "vllm.triton_attn.block_size",
       Severity::kRejects,
       "Block size must be a multiple of 16."},
      {kVlTr,
       80,
       {},
       0,
       page(L, 24),
       "vllm.triton_attn.block_size",
       Severity::kRejects,
       "block_size not supported"},
      {kVlTr,
       86,
       {},
       0,
       dtypes(L, kBf16, kE4m3),
       "vllm.triton_attn.fp8_kv_arch",
       Severity::kRejects,
       "FP8 KV cache is not supported by the Triton attention backend"},
      {kVlTr,
       90,
       {},
       0,
       dtypes(L, DType::kFloat64, DType::kFloat64),
       "vllm.triton_attn.dtype",
       Severity::kRejects,
       "dtype not supported"},
      {kVlTr,
       90,
       {},
       0,
       dtypes(L, kBf16, DType::kInt8),
       "vllm.triton_attn.kv_dtype",
       Severity::kRejects,
       "kv_cache_dtype not supported"},
      {kVlTr,
       90,
       {},
       0,
       dims(L, 192, 128),
       "vllm.triton_attn.head_dim_v",
       Severity::kRejects,
       "MLA not supported"},
      {kVlTr,
       120,
       {0, 32, 0},
       0,
       non_causal(L),
       "vllm.triton_attn.causal",
       Severity::kRejects,
       "Encoder self-attention is not implemented for TritonAttentionImpl"},
      {kVlTr,
       90,
       {},
       0,
       heads(L, 28, 8),
       "vllm.triton_attn.heads",
       Severity::kSilentlyWrong,
       "the kernel computes num_q_heads // num_kv_heads = 3 query heads per KV head and never "
       "checks that it divides: the query heads past num_kv_heads x 3 are never written (vLLM's "
       "Attention layer refuses such a model; a direct caller of the kernel or of "
       "TritonAttentionImpl gets no check)"},
      {kVlTr,
       86,
       {},
       0,
       q_len(alibi(sinks(L)), 64),
       "vllm.triton_attn.alibi_sinks",
       Severity::kSilentlyWrong,
       "the kernel measures ALiBi distances from a chunk's first query (slope * (key_pos - "
       "context_len)), not from each query: the softmax cancels that per-row offset, but a "
       "sink's logit is not offset, so with 64 query tokens per request rows after the first "
       "weigh the sink wrongly (chunked prefill and speculative decoding alike)"},
      // vLLM FLASHINFER backend (0.33.0).
      {kVlFi,
       90,
       {},
       0,
       dims(L, 96),
       "vllm.flashinfer.head_size",
       Severity::kRejects,
       "head_size not supported"},
      {kVlFi,
       90,
       {},
       0,
       dtypes(L, kF32, kF32),
       "vllm.flashinfer.dtype",
       Severity::kRejects,
       "dtype not supported"},
      {kVlFi,
       90,
       {},
       0,
       dtypes(L, kBf16, DType::kInt8),
       "vllm.flashinfer.kv_dtype",
       Severity::kRejects,
       "kv_cache_dtype not supported"},
      {kVlFi,
       89,
       {},
       0,
       page(L, 8),
       "vllm.flashinfer.block_size",
       Severity::kRejects,
       "block_size not supported"},
      {kVlFi,
       89,
       {},
       0,
       sinks(L),
       "vllm.flashinfer.sinks",
       Severity::kRejects,
       "attention sinks not supported"},
      {kVlFi,
       100,
       {},
       0,
       non_causal(L),
       "vllm.flashinfer.causal",
       Severity::kRejects,
       "Encoder self-attention and encoder/decoder cross-attention are not implemented for "
       "FlashInferImpl"},
      {kVlFi,
       120,
       {},
       0,
       alibi(L),
       "vllm.flashinfer.alibi",
       Severity::kSilentlyWrong,
       "FlashInferImpl keeps the layer's ALiBi slopes but never passes them to FlashInfer's "
       "wrappers: the logits get no ALiBi bias"},
      // FlashAttention-2.
      {kFa2,
       90,
       {},
       0,
       dtypes(P, kF32, kF32),
       "flash_attn2.dtype",
       Severity::kRejects,
       "FlashAttention only support fp16 and bf16 data type"},
      {kFa2,
       90,
       {},
       0,
       dtypes(P, kBf16, kE4m3),
       "flash_attn2.kv_dtype",
       Severity::kRejects,
       "query and key must have the same dtype"},
      {kFa2,
       90,
       {},
       0,
       dims(P, 512),
       "flash_attn2.head_dim_max",
       Severity::kRejects,
       "FlashAttention forward only supports head dimension at most 256"},
      {kFa2,
       90,
       {},
       0,
       dims(P, 100),
       "flash_attn2.head_dim_multiple_of_8",
       Severity::kRejects,
       "query, key, value, and out_ must have a head_size that is a multiple of 8"},
      {kFa2,
       90,
       {},
       kUnevenOff,
       dims(P, 80),
       "flash_attn2.uneven_k",
       Severity::kRejects,
       "This flash attention build does not support headdim not being a multiple of 32."},
      {kFa2,
       90,
       {},
       0,
       heads(P, 12, 5),
       "flash_attn2.heads",
       Severity::kRejects,
       "Number of heads in key/value must divide number of heads in query"},
      {kFa2,
       90,
       {},
       0,
       page(P, 16),
       "flash_attn2.page_size",
       Severity::kRejects,
       "Paged KV cache block size must be divisible by 256"},
      {kFa2,
       90,
       {},
       0,
       dims(P, 128, 64),
       "flash_attn2.head_dim_v",
       Severity::kRejects,
       "v must have shape (num_blocks, page_block_size, num_heads_k, head_size)"},
      {kFa2,
       90,
       {},
       0,
       sinks(P),
       "flash_attn2.sinks",
       Severity::kSilentlyWrong,
       "FlashAttention-2 has no sinks parameter: the softmax runs without the sink logits"},
      // FlashAttention-3.
      {kFa3,
       90,
       {},
       0,
       dtypes(L, kF32, kF32),
       "flash_attn3.dtype",
       Severity::kRejects,
       "FlashAttention only supports fp16, bf16, and fp8_e4m3 data type"},
      {kFa3,
       80,
       {},
       0,
       dtypes(L, kE4m3, kE4m3),
       "flash_attn3.fp8_arch",
       Severity::kRejects,
       "FlashAttention on Ampere/Ada cards only supports fp16 and bf16 data type"},
      {kFa3,
       90,
       {},
       0,
       dtypes(L, kBf16, kE4m3),
       "flash_attn3.kv_dtype",
       Severity::kRejects,
       "query and key must have the same dtype"},
      {kFa3,
       90,
       {},
       0,
       dims(L, 512),
       "flash_attn3.head_dim_max",
       Severity::kRejects,
       "FlashAttention forward only supports head dimension at most 256"},
      {kFa3,
       90,
       {},
       0,
       dims(L, 60, 64),
       "flash_attn3.head_dim_multiple_of_8",
       Severity::kRejects,
       "head_size should be a multiple of 8"},
      {kFa3,
       90,
       {},
       0,
       dtypes(dims(L, 56, 64), kE4m3, kE4m3),
       "flash_attn3.head_dim_multiple_of_16",
       Severity::kRejects,
       "head_size should be a multiple of 16"},
      {kFa3,
       90,
       {},
       0,
       dims(L, 64, 100),
       "flash_attn3.head_dim_v_multiple_of_8",
       Severity::kRejects,
       "head_size_v should be a multiple of 8"},
      {kFa3,
       90,
       {},
       0,
       dtypes(dims(L, 64, 72), kE4m3, kE4m3),
       "flash_attn3.head_dim_v_multiple_of_16",
       Severity::kRejects,
       "head_size_v should be a multiple of 16"},
      {kFa3,
       90,
       {},
       0,
       dims(L, 128, 64),
       "flash_attn3.head_dim_v_pair",
       Severity::kRejects,
       "If V headdim is different from Q/K dim, we only support Q/K headdim in (128, 192] and V "
       "headdim in (96, 128], or (Q/K <= 64 and V <= 512)."},
      {kFa3,
       80,
       {},
       0,
       dims(L, 192, 128),
       "flash_attn3.head_dim_v_arch",
       Severity::kRejects,
       "Only Hopper supports different V headdim"},
      {kFa3,
       90,
       {},
       0,
       heads(L, 12, 5),
       "flash_attn3.heads",
       Severity::kRejects,
       "Number of heads in key/value must divide number of heads in query"},
      {kFa3,
       90,
       {},
       0,
       alibi(L),
       "flash_attn3.alibi",
       Severity::kSilentlyWrong,
       "FlashAttention-3 has no ALiBi parameter: the bias is not added"},
      {kFa3,
       90,
       {},
       0,
       sinks(L),
       "flash_attn3.sinks",
       Severity::kSilentlyWrong,
       "upstream FlashAttention-3 has no sinks parameter: the softmax runs without the sink "
       "logits"},
      // FlashAttention-4, as vLLM 0.33.0 ships and calls it.
      {kFa4,
       90,
       {},
       0,
       alibi(L),
       "flash_attn4.alibi",
       Severity::kRejects,
       "Alibi is not supported in FA4"},
      {kFa4,
       90,
       {},
       0,
       dtypes(L, kF32, kF32),
       "flash_attn4.kv_dtype",
       Severity::kRejects,
       "inputs must be float16, bfloat16, fp8 e4m3fn, or fp8 e5m2"},
      {kFa4,
       90,
       {},
       0,
       dtypes(page(L, 128), kE4m3, kE4m3),
       "flash_attn4.fp8_kv_dequant_q_dtype",
       Severity::kRejects,
       "fp8_kv_dequant requires fp16 or bf16 Q"},
      {kFa4,
       90,
       {},
       0,
       dtypes(page(L, 0), kBf16, kE4m3),
       "flash_attn4.fp8_kv_dequant_paged",
       Severity::kRejects,
       "fp8_kv_dequant requires paged KV (page_table)"},
      {kFa4,
       100,
       {},
       0,
       dtypes(L, kBf16, kE4m3),
       "flash_attn4.same_dtypes",
       Severity::kRejects,
       "q.dtype torch.bfloat16 != k.dtype"},
      {kFa4,
       90,
       {},
       0,
       heads(L, 36, 8),
       "flash_attn4.heads",
       Severity::kRejects,
       "num_head must be divisible by num_head_kv"},
      {kFa4,
       90,
       {},
       0,
       dims(page(L, 0), 520),
       "flash_attn4.head_dims_sm90",
       Severity::kRejects,
       "(head_dim, head_dim_v)=(520, 520) is not supported on SM90. head_dim and head_dim_v must "
       "be between 8 and 256 and divisible by 8."},
      {kFa4,
       100,
       {},
       0,
       dims(L, 192),
       "flash_attn4.head_dims_sm100",
       Severity::kRejects,
       "(head_dim, head_dim_v)=(192, 192) is not supported on SM100/SM110. head_dim and head_dim_v "
       "must be between 8 and 128 and divisible by 8, or (192, 128) for DeepSeek, or (256, 256) "
       "for hd256."},
      {kFa4,
       100,
       {},
       0,
       dtypes(dims(page(L, 0), 72), kE4m3, kE4m3),
       "flash_attn4.head_dims_sm100_fp8",
       Severity::kRejects,
       "(head_dim, head_dim_v)=(72, 72) is not supported on SM100/SM110. head_dim and head_dim_v "
       "must be between 8 and 128 and divisible by 16, or (192, 128) for DeepSeek, or (256, 256) "
       "for hd256."},
      {kFa4,
       90,
       {},
       0,
       dtypes(L, kE5m2, kE5m2),
       "flash_attn4.fp8_arch",
       Severity::kRejects,
       "FP8 is only supported on SM100 (compute capability 10.x) for FA4 CuTe."},
      {kFa4,
       90,
       {},
       0,
       dtypes(L, kBf16, kE4m3),
       "flash_attn4.fp8_kv_dequant_page_size",
       Severity::kRejects,
       "FA4 SM90 fp8-KV-dequant requires the paged-KV page_size == tile_n"},
      {kFa4,
       90,
       {},
       0,
       dtypes(dims(page(L, 128), 128, 64), kBf16, kE4m3),
       "flash_attn4.fp8_kv_dequant_head_dims",
       Severity::kRejects,
       "FA4 SM90 fp8-KV-dequant requires head_dim == head_dim_v (one staging buffer serves K and "
       "V); got head_dim=128, head_dim_v=64."},
      {kFa4,
       86,
       {},
       0,
       L,
       "flash_attn4.paged_sm80",
       Severity::kRejects,
       "paged KV not supported on SM 8.0"},
      {kFa4,
       100,
       {},
       0,
       dims(L, 72),
       "flash_attn4.paged_head_dim",
       Severity::kRejects,
       "Paged KV does not support irregular head dim"},
      {kFa4,
       90,
       {},
       0,
       dims(L, 200),
       "flash_attn4.paged_head_dim",
       Severity::kRejects,
       "Paged KV does not support irregular head dim"},
      {kFa4,
       100,
       {},
       0,
       soft_cap(dims(page(L, 128), 256)),
       "flash_attn4.hd256_soft_cap",
       Severity::kRejects,
       "SM100 forward with head_dim=256 does not support softcap"},
      {kFa4,
       100,
       {},
       0,
       sinks(dims(page(L, 128), 256)),
       "flash_attn4.hd256_sinks",
       Severity::kRejects,
       "SM100 forward with head_dim=256 does not support learnable_sink"},
      {kFa4,
       100,
       {},
       0,
       dims(L, 256),
       "flash_attn4.hd256_page_size",
       Severity::kRejects,
       "SM100 hd256 2CTA supports TMA paged KV only (page_size must equal tile_n=128)"},
      {kFa4,
       120,
       {},
       0,
       L,
       "flash_attn4.paged_sm120",
       Severity::kRejects,
       "Paged KV not supported on SM 12.0 in this PR"},
      // FlashMLA dense decode.
      {kMla,
       80,
       {},
       0,
       M,
       "flashmla.decode.arch",
       Severity::kRejects,
       "Dense decode MLA is only supported on SM90a architecture"},
      {kMla,
       90,
       {},
       0,
       dtypes(M, kF32, kF32),
       "flashmla.decode.dtype",
       Severity::kRejects,
       "Expected q_dtype == torch::kBFloat16 || q_dtype == torch::kHalf to be true, but got "
       "false."},
      {kMla,
       90,
       {},
       0,
       dtypes(M, kBf16, kE4m3),
       "flashmla.decode.kv_dtype",
       Severity::kRejects,
       "query and key must have the same dtype"},
      {kMla,
       90,
       {},
       0,
       dims(M, 256, 512),
       "flashmla.decode.head_dim",
       Severity::kRejects,
       "Only head_size_k == 576 or 512 is supported"},
      {kMla,
       90,
       {},
       0,
       dims(M, 576, 0),
       "flashmla.decode.head_dim_v",
       Severity::kRejects,
       "Only head_size_v == 576 is supported"},
      {kMla,
       90,
       {},
       0,
       page(M, 16),
       "flashmla.decode.page_size",
       Severity::kRejects,
       "Currently page_block_size must be 64"},
      {kMla,
       90,
       {},
       0,
       heads(M, 128, 3),
       "flashmla.decode.heads",
       Severity::kRejects,
       "Number of heads in key/value must divide number of heads in query"},
      {kMla,
       90,
       {},
       0,
       window(M, 4096),
       "flashmla.decode.sliding_window",
       Severity::kSilentlyWrong,
       "the dense decode kernel has no sliding-window parameter: it attends to the whole "
       "context"},
      {kMla,
       90,
       {},
       0,
       soft_cap(M),
       "flashmla.decode.soft_cap",
       Severity::kSilentlyWrong,
       "the dense decode kernel has no soft-cap parameter: the logits are not capped"},
      {kMla,
       90,
       {},
       0,
       alibi(M),
       "flashmla.decode.alibi",
       Severity::kSilentlyWrong,
       "the dense decode kernel has no ALiBi parameter: the bias is not added"},
      {kMla,
       90,
       {},
       0,
       sinks(M),
       "flashmla.decode.sinks",
       Severity::kSilentlyWrong,
       "the dense decode kernel has no sinks parameter: the softmax runs without the sink "
       "logits"},
  };
}

// vLLM's MLA backends, on the architectures each takes (CUTLASS_MLA on its pages of 128).
std::vector<RuleCase> vllm_mla_rule_cases() {
  const EngineConfig M = kDeepSeekV3Mla;
  const EngineConfig C = page(kDeepSeekV3Mla, 128);
  const char* const features =
      " does not support one of the following: alibi_slopes, sliding_window, logits_soft_cap";
  std::vector<RuleCase> cases;
  const struct {
    EngineKernel kernel;
    int arch;
    EngineConfig mla;
    const char* name;
    const char* impl;
    std::int64_t odd_page;
  } backends[] = {{kVlFam, 90, M, "vllm.flash_attn_mla", "FlashAttnMLAImpl", 24},
                  {kVlFm, 90, M, "vllm.flashmla", "FlashMLAImpl", 32},
                  {kVlCm, 100, C, "vllm.cutlass_mla", "CutlassMLAImpl", 64},
                  {kVlTm, 90, M, "vllm.triton_mla", "TritonMLAImpl", 24},
                  {kVlFim, 100, M, "vllm.flashinfer_mla", "FlashInferMLAImpl", 16}};
  for (const auto& b : backends) {
    const auto add = [&](const EngineConfig& config, const char* rule, std::string message) {
      cases.push_back({b.kernel,
                       b.arch,
                       {},
                       0,
                       config,
                       std::string(b.name) + "." + rule,
                       Severity::kRejects,
                       message});
    };
    add(dtypes(b.mla, kF32, kF32), "dtype", "dtype not supported");
    add(dtypes(b.mla, kBf16, kE5m2), "kv_dtype", "kv_cache_dtype not supported");
    add(page(b.mla, b.odd_page), "block_size", "block_size not supported");
    add(sinks(b.mla), "sinks", "attention sinks not supported");
    add(window(b.mla, 4096), "sliding_window", "sliding window not supported");
    add(alibi(b.mla), "alibi_soft_cap", b.impl + std::string(features));
    if (b.kernel != kVlCm) add(dims(b.mla, 576, 576), "mla", "non-MLA not supported");
  }
  cases.push_back({kVlFam,
                   90,
                   {},
                   0,
                   dims(M, 544, 512),
                   "vllm.flash_attn_mla.head_size",
                   Severity::kRejects,
                   "head_size not supported"});
  cases.push_back({kVlFm,
                   90,
                   {},
                   0,
                   dims(M, 544, 512),
                   "vllm.flashmla.head_size",
                   Severity::kRejects,
                   "head_size not supported"});
  cases.push_back({kVlFim,
                   100,
                   {},
                   0,
                   dims(M, 544, 512),
                   "vllm.flashinfer_mla.head_size",
                   Severity::kRejects,
                   "head_size not supported"});
  cases.push_back({kVlFm,
                   100,
                   {},
                   0,
                   M,
                   "vllm.flashmla.dense_hopper",
                   Severity::kRejects,
                   "FlashMLA Dense is only supported on Hopper devices."});
  cases.push_back({kVlCm,
                   90,
                   {},
                   0,
                   C,
                   "vllm.cutlass_mla.compute_capability",
                   Severity::kRejects,
                   "compute capability not supported"});
  cases.push_back({kVlFim,
                   90,
                   {},
                   0,
                   M,
                   "vllm.flashinfer_mla.compute_capability",
                   Severity::kRejects,
                   "compute capability not supported"});
  cases.push_back({kVlCm,
                   100,
                   {},
                   0,
                   dims(C, 512, 448),
                   "vllm.cutlass_mla.head_dims",
                   Severity::kRejects,
                   "the SM100 CUTLASS MLA decode asserts a latent of 512 and 64 rotary dims "
                   "(head_dim 576, head_dim_v 512; 512 and 448 here); the assert has no message"});
  cases.push_back({kVlCm,
                   100,
                   {},
                   0,
                   heads(C, 256, 1),
                   "vllm.cutlass_mla.q_heads",
                   Severity::kRejects,
                   "H must be <= 128, but got 256"});
  cases.push_back({kVlTm,
                   86,
                   {},
                   0,
                   dtypes(M, kBf16, kE4m3),
                   "vllm.triton_mla.fp8_kv_arch",
                   Severity::kRejects,
                   "FP8 KV cache is not supported by the Triton MLA backend"});
  // TritonMLAImpl refuses ALiBi before it looks at the fp8 cache.
  cases.push_back({kVlTm,
                   86,
                   {},
                   0,
                   alibi(dtypes(M, kBf16, kE4m3)),
                   "vllm.triton_mla.alibi_soft_cap",
                   Severity::kRejects,
                   std::string("TritonMLAImpl") + features});
  cases.push_back({kVlFa,
                   90,
                   {},
                   0,
                   dims(kLlama3_8b, 128, 64),
                   "vllm.flash_attn.mla",
                   Severity::kRejects,
                   "MLA not supported"});
  cases.push_back({kVlFi,
                   90,
                   {},
                   0,
                   dims(kLlama3_8b, 128, 64),
                   "vllm.flashinfer.mla",
                   Severity::kRejects,
                   "MLA not supported"});
  return cases;
}

// SGLang's Triton kernels, every rule read from v0.5.23 and run by tests/engines/sglang_judge.py.
std::vector<RuleCase> sglang_rule_cases() {
  constexpr EngineKernel kDecode = EngineKernel::kSglangTritonDecode;
  constexpr EngineKernel kExtend = EngineKernel::kSglangTritonExtend;
  const char* const heads_text =
      "the kernel reads KV head h // 1 for query head h and never checks that num_kv_heads (8) "
      "divides num_q_heads (12): the heads past num_kv_heads x 1 read a KV head past the last, "
      "the next token slot's row, and past the cache at its last slot";
  const char* const alibi_text =
      "SGLang's Triton kernels take no ALiBi slopes (Baichuan passes them on NPU only): the "
      "logits get no bias";
  return {
      {kDecode,
       90,
       {},
       0,
       heads(kLlama3_8b, 12, 8),
       "sglang.triton_decode.heads",
       Severity::kOutOfBounds,
       heads_text},
      {kExtend,
       90,
       {},
       0,
       heads(kLlama3_8b, 12, 8),
       "sglang.triton_extend.heads",
       Severity::kOutOfBounds,
       heads_text},
      {kDecode,
       80,
       {},
       0,
       alibi(kLlama3_8b),
       "sglang.triton_decode.alibi",
       Severity::kSilentlyWrong,
       alibi_text},
      {kExtend,
       80,
       {},
       0,
       alibi(kLlama3_8b),
       "sglang.triton_extend.alibi",
       Severity::kSilentlyWrong,
       alibi_text},
      {kDecode,
       100,
       {},
       0,
       q_len(kLlama3_8b, 4),
       "sglang.triton_decode.q_len",
       Severity::kRejects,
       "decode_attention_fwd takes one query token per request (4 here): its assert "
       "q.shape[0] <= kv_indptr.shape[0] - 1 fails, without a message"},
      {kDecode,
       90,
       {},
       0,
       window(kLlama3_8b, 4096),
       "sglang.triton_decode.sliding_window",
       Severity::kSilentlyWrong,
       "SGLang's models pass sliding_window - 1 as sliding_window_size, which extend counts as "
       "the keys left of the query; for decode the backend keeps only the last "
       "sliding_window_size keys, the query's own included: one key fewer than the model's "
       "window"},
  };
}

std::string describe(const RuleCase& c) {
  return std::string(attnref::engine_kernel_name(c.kernel)) + " " + c.id;
}

std::vector<RuleCase> all_rule_cases() {
  std::vector<RuleCase> cases = rule_cases();
  for (const RuleCase& c : vllm_mla_rule_cases()) cases.push_back(c);
  for (const RuleCase& c : sglang_rule_cases()) cases.push_back(c);
  return cases;
}

TEST(EngineRules, EveryRuleTrippedAloneGivesItsSeverityIdAndMessage) {
  for (const RuleCase& c : all_rule_cases()) {
    const EngineTarget target{c.kernel, c.arch, c.version, c.flags};
    const attnref::EngineReport r = attnref::check_engine(c.config, target);
    ASSERT_TRUE(r.status.ok()) << describe(c) << ": " << r.status.to_string();
    ASSERT_EQ(r.findings.size(), 1u) << describe(c);
    const attnref::EngineFinding& f = r.findings[0];
    EXPECT_EQ(f.id(), c.id);
    EXPECT_EQ(f.severity(), c.severity) << describe(c);
    EXPECT_EQ(f.status().message(), c.message) << describe(c);
    EXPECT_EQ(f.status().code(), attnref::ErrorCode::kEngineRule);
    EXPECT_EQ(f.status().field(), c.id);
    EXPECT_FALSE(f.hint().empty()) << describe(c);
    EXPECT_FALSE(f.explanation().empty()) << describe(c);
    EXPECT_EQ(attnref::engine_finding_count(c.config, target), 1) << describe(c);
  }
}

// Rules that only break together with another: the engine gives every reason at once.
struct TogetherCase {
  EngineKernel kernel;
  int arch;
  EngineConfig config;
  std::vector<const char*> ids;  // in the report's order
};

std::vector<TogetherCase> together_cases() {
  // vLLM's selector refuses sinks below sm90 twice: no FA3/FA4 there, and its combination check.
  // FLASHMLA below sm90: neither listed nor dense there. CUTLASS_MLA's decode asserts
  // DeepSeek's dims, which every other head size and a non-MLA layer break too.
  return {{kVlFa,
           86,
           sinks(kLlama3_8b),
           {"vllm.flash_attn.sinks", "vllm.flash_attn.sinks_compute_capability"}},
          {kVlFm,
           80,
           kDeepSeekV3Mla,
           {"vllm.flashmla.compute_capability", "vllm.flashmla.dense_hopper"}},
          {kVlFam,
           100,
           kDeepSeekV3Mla,
           {"vllm.flash_attn_mla.compute_capability", "vllm.flash_attn_mla.fa3"}},
          {kVlCm,
           100,
           dims(page(kDeepSeekV3Mla, 128), 544, 512),
           {"vllm.cutlass_mla.head_size", "vllm.cutlass_mla.head_dims"}},
          {kVlCm,
           100,
           dims(page(kDeepSeekV3Mla, 128), 576, 576),
           {"vllm.cutlass_mla.mla", "vllm.cutlass_mla.head_dims"}},
          // FA4 checks fp8 head dims on sm90 before it refuses fp8 there.
          {kFa4,
           90,
           dtypes(dims(page(kLlama3_8b, 0), 72), kE5m2, kE5m2),
           {"flash_attn4.head_dims_sm90_fp8", "flash_attn4.fp8_arch"}},
          // The decode asserts the head dims before the head count.
          {kVlCm,
           100,
           heads(dims(page(kDeepSeekV3Mla, 128), 512, 448), 256, 1),
           {"vllm.cutlass_mla.head_dims"}}};
}

TEST(EngineRules, RulesThatBreakTogetherAreReportedTogether) {
  for (const TogetherCase& c : together_cases()) {
    const attnref::EngineReport r = attnref::check_engine(c.config, {c.kernel, c.arch});
    ASSERT_EQ(r.findings.size(), c.ids.size());
    for (std::size_t i = 0; i < c.ids.size(); ++i) EXPECT_STREQ(r.findings[i].id(), c.ids[i]);
  }
}

TEST(EngineRules, EveryRuleOfEveryTableIsTrippedByACase) {
  std::set<std::string> tripped;
  for (const RuleCase& c : all_rule_cases()) tripped.insert(describe(c));
  for (const TogetherCase& c : together_cases()) {
    for (const char* id : c.ids) {
      tripped.insert(std::string(attnref::engine_kernel_name(c.kernel)) + " " + id);
    }
  }
  for (EngineKernel k : attnref::kEngineKernels) {
    if (k == EngineKernel::kFlashInferDecodeTensorCores) continue;  // fa2's table, tested there
    for (const attnref::EngineRule* rule : attnref::engine_rules(k)) {
      const std::string key = std::string(attnref::engine_kernel_name(k)) + " " + rule->id;
      const bool v1_or_v2 =
          k == EngineKernel::kVllmPagedAttentionV1 || k == EngineKernel::kVllmPagedAttentionV2;
      if (v1_or_v2) {
        const std::string v1 = std::string("vllm.paged_attention_v1 ") + rule->id;
        const std::string v2 = std::string("vllm.paged_attention_v2 ") + rule->id;
        EXPECT_TRUE(tripped.count(v1) || tripped.count(v2)) << key;
      } else {
        EXPECT_TRUE(tripped.count(key)) << key;
      }
    }
  }
}

TEST(EngineRules, RulesNameASourceAtAPinnedCommitAndAFix) {
  for (EngineKernel k : attnref::kEngineKernels) {
    for (const attnref::EngineRule* rule : attnref::engine_rules(k)) {
      EXPECT_NE(std::string(rule->source).find('@'), std::string::npos) << rule->id;
      EXPECT_NE(rule->fix[0], '\0') << rule->id;
      EXPECT_NE(rule->explanation[0], '\0') << rule->id;
      const bool silent =
          rule->severity == Severity::kSilentlyWrong || rule->severity == Severity::kOutOfBounds;
      if (silent) {
        EXPECT_EQ(rule->upstream[0], '\0') << rule->id << ": an engine that says it";
      }
    }
  }
}

struct Accepted {
  EngineKernel kernel;
  int arch;
  EngineConfig config;
  const char* what;
};

TEST(EngineRules, ConfigurationsEachKernelTakesPass) {
  const EngineConfig gemma2_9b = soft_cap(window(heads(dims(kLlama3_8b, 256), 16, 8), 4096));
  const Accepted cases[] = {
      {EngineKernel::kFlashInferDecode, 90, kLlama3_8b, "Llama-3-8B"},
      {EngineKernel::kFlashInferDecode, 80, heads(kLlama3_8b, 48, 8), "group 6"},
      {EngineKernel::kFlashInferDecode, 90, heads(kLlama3_8b, 128, 8), "group 16 at v0.7.2"},
      {EngineKernel::kFlashInferPrefillFa2, 80, dtypes(dims(kLlama3_8b, 512), kBf16, kE4m3),
       "head_dim 512, fp8 K/V on sm80 at v0.7.2"},
      {EngineKernel::kFlashInferDecodeTensorCores, 90, dims(kLlama3_8b, 512), "head_dim 512"},
      {EngineKernel::kFlashInferDecode, 89, dtypes(kLlama3_8b, kF16, kE5m2), "fp8 K/V"},
      {EngineKernel::kFlashInferDecodeTensorCores, 90, heads(kLlama3_8b, 28, 4), "Qwen2-7B"},
      {EngineKernel::kFlashInferDecodeTensorCores, 90, dims(kLlama3_8b, 192, 128), "(192, 128)"},
      {EngineKernel::kFlashInferPrefillFa2, 86, gemma2_9b, "Gemma-2-9B"},
      {EngineKernel::kFlashInferPrefillFa3, 90, dims(kLlama3_8b, 192, 128), "(192, 128)"},
      {EngineKernel::kVllmPagedAttentionV1, 80, alibi(kLlama3_8b), "ALiBi"},
      {EngineKernel::kVllmPagedAttentionV2, 120, dtypes(kLlama3_8b, kF32, kE4m3), "fp8 pages"},
      {EngineKernel::kVllmFlashAttn, 90, sinks(kLlama3_8b), "gpt-oss style sinks on sm90"},
      {EngineKernel::kVllmFlashAttn, 100, gemma2_9b, "Gemma-2-9B"},
      {EngineKernel::kVllmTritonAttn, 120, sinks(window(heads(dims(kLlama3_8b, 64), 64, 8), 128)),
       "gpt-oss-20b on sm120"},
      {EngineKernel::kVllmTritonAttn, 89, dtypes(dims(kLlama3_8b, 80), kF32, kE5m2),
       "head_dim 80, float32, fp8 K/V"},
      {EngineKernel::kVllmTritonAttn, 90, q_len(alibi(soft_cap(kLlama3_8b)), 512),
       "ALiBi and a soft cap in a prefill"},
      {EngineKernel::kVllmFlashInfer, 100, sinks(window(heads(dims(kLlama3_8b, 64), 64, 8), 128)),
       "gpt-oss-20b on sm100"},
      {EngineKernel::kVllmFlashInfer, 80, dtypes(kLlama3_8b, kF16, kE5m2), "fp8_e5m2 K/V"},
      {EngineKernel::kFlashAttention2, 80, alibi(kLlama3_8bPages256), "ALiBi, pages of 256"},
      {EngineKernel::kFlashAttention2, 90, page(kLlama3_8b, 0), "not paged"},
      {EngineKernel::kFlashAttention3, 90, dtypes(kLlama3_8b, kE4m3, kE4m3), "fp8 on sm90"},
      {EngineKernel::kFlashAttention3, 90, dims(kLlama3_8b, 64, 512), "V up to 512"},
      {kFa4, 100, sinks(window(heads(dims(kLlama3_8b, 64), 64, 8), 128)), "gpt-oss-20b on sm100"},
      {kFa4, 100, dims(page(kLlama3_8b, 128), 256), "(256, 256) in pages of 128 on sm100"},
      {kFa4, 90, dims(kLlama3_8b, 512), "head_dim 512 on sm90"},
      {kFa4, 100, dtypes(kLlama3_8b, kE4m3, kE4m3), "fp8 on sm100"},
      {kFa4, 100, dims(kLlama3_8b, 192, 128), "DeepSeek's (192, 128) prefill"},
      {kFa4, 90, dtypes(page(kLlama3_8b, 128), kBf16, kE4m3), "fp8 e4m3 pages of 128 on sm90"},
      {kFa4, 80, page(gemma2_9b, 0), "Gemma-2-9B unpaged on sm80"},
      {EngineKernel::kVllmFlashAttnMla, 90, page(kDeepSeekV3Mla, 16), "pages of 16"},
      {EngineKernel::kVllmFlashMla, 90, dtypes(kDeepSeekV3Mla, kBf16, kE4m3), "fp8 latent"},
      {EngineKernel::kVllmCutlassMla, 100, page(kDeepSeekV3Mla, 256), "pages of 256"},
      {EngineKernel::kVllmTritonMla, 80, dims(kDeepSeekV3Mla, 544, 512), "any head size"},
      {EngineKernel::kVllmTritonMla, 89, dtypes(kDeepSeekV3Mla, kF16, kE4m3), "fp8 on sm89"},
      {EngineKernel::kVllmFlashInferMla, 100, page(kDeepSeekV3Mla, 32), "pages of 32"},
      {EngineKernel::kFlashMlaDecode, 90, kDeepSeekV3Mla, "DeepSeek-V3"},
      {EngineKernel::kSglangTritonDecode, 80,
       soft_cap(sinks(dtypes(dims(page(kLlama3_8b, 1), 80), kF16, kE4m3))),
       "head_dim 80, pages of 1, fp8 K/V, sinks, soft cap"},
      {EngineKernel::kSglangTritonDecode, 90, kDeepSeekV3Mla, "MLA"},
      {EngineKernel::kSglangTritonExtend, 90, q_len(window(soft_cap(kLlama3_8b), 4096), 512),
       "a window, a soft cap and 512 query tokens"},
      {EngineKernel::kFlashMlaDecode, 90, dtypes(dims(kDeepSeekV3Mla, 512, 512), kF16, kF16),
       "512 latent, float16"},
  };
  for (const Accepted& c : cases) {
    const attnref::EngineReport r = attnref::check_engine(c.config, {c.kernel, c.arch});
    EXPECT_TRUE(r.ok()) << attnref::engine_kernel_name(c.kernel) << " " << c.what << ": "
                        << (r.findings.empty() ? r.status.to_string() : r.findings[0].to_string());
  }
}

TEST(EngineRules, AReportListsEveryBrokenRuleWorstFirst) {
  // 12 query heads over 5 KV heads, head_dim 96, sinks: three rules of fa2 prefill break.
  const EngineConfig c = sinks(dims(heads(kLlama3_8b, 12, 5), 96));
  const attnref::EngineReport r = attnref::check_engine(c, kFiFa2);
  ASSERT_EQ(r.findings.size(), 3u);
  EXPECT_STREQ(r.findings[0].id(), "flashinfer.prefill.head_dim_64");
  EXPECT_STREQ(r.findings[1].id(), "flashinfer.prefill.sinks_ignored");
  EXPECT_STREQ(r.findings[2].id(), "flashinfer.prefill.heads_divisible");
  EXPECT_EQ(r.findings[2].hint(), "valid num_kv_heads for 12 query heads: 1, 2, 3, 4, 6, 12");
  EXPECT_EQ(r.findings[2].to_string(),
            "flashinfer.prefill.fa2 flashinfer.prefill.heads_divisible (rejects): num_qo_heads "
            "12 should be divisible by num_kv_heads 5 (hint: valid num_kv_heads for 12 query "
            "heads: 1, 2, 3, 4, 6, 12)");
  EXPECT_EQ(attnref::engine_finding_count(c, kFiFa2), 3);
}

TEST(EngineConventions, MismatchesSayWhatToConvert) {
  const EngineConfig gemma = soft_cap(window(heads(dims(kLlama3_8b, 256), 16, 8), 4096));
  const attnref::EngineReport fi = attnref::check_engine(gemma, kFiDecode);
  ASSERT_EQ(fi.conventions.size(), 1u);
  EXPECT_STREQ(fi.conventions[0].convention, "window");
  EXPECT_EQ(fi.conventions[0].what,
            "the kernel's window counts the keys left of the query (W + 1 keys in all); this "
            "configuration's sliding_window 4096 counts the query's own key too");
  EXPECT_EQ(fi.conventions[0].conversion, "pass window_left 4095 for the same keys");
  EXPECT_TRUE(attnref::check_engine(gemma, {kVlFa, 90}).conventions.empty());  // takes W
  EXPECT_TRUE(attnref::check_engine(gemma, {kVlTr, 90}).conventions.empty());  // adds 1 back

  EngineConfig left = gemma;
  left.sliding_window = 4095;
  left.conventions.window = attnref::WindowConvention::kKeysLeftOfQuery;
  const attnref::EngineReport vl = attnref::check_engine(left, {kVlFa, 90});
  ASSERT_EQ(vl.conventions.size(), 1u);
  EXPECT_EQ(vl.conventions[0].conversion, "pass sliding_window 4096 for the same keys");
  EXPECT_TRUE(attnref::check_engine(left, kFiDecode).conventions.empty());
  EXPECT_EQ(attnref::check_engine(left, {kVlTr, 90}).conventions.size(), 1u);
  EXPECT_TRUE(attnref::check_engine(left, {kVlV1, 90}).conventions.empty());  // no window at all

  EngineConfig bidirectional = alibi(kLlama3_8bPages256);
  EXPECT_TRUE(attnref::check_engine(bidirectional, {kFa2, 90}).conventions.empty());  // causal
  bidirectional.causal = false;
  const attnref::EngineReport fa2 = attnref::check_engine(bidirectional, {kFa2, 90});
  ASSERT_EQ(fa2.conventions.size(), 1u);
  EXPECT_STREQ(fa2.conventions[0].convention, "alibi");
  EXPECT_TRUE(attnref::check_engine(bidirectional, kFiFa2).conventions.empty());  // signed too

  const EngineConfig capped = soft_cap(alibi(kLlama3_8b));
  const attnref::EngineReport order = attnref::check_engine(capped, kFiFa2);
  ASSERT_EQ(order.conventions.size(), 1u);
  EXPECT_STREQ(order.conventions[0].convention, "soft_cap_order");
  EXPECT_EQ(order.conventions[0].what,
            "the kernel adds ALiBi, then caps: c * tanh((s + bias) / c)");
  EXPECT_TRUE(attnref::check_engine(capped, {kVlTr, 90}).conventions.empty());  // caps first
  EngineConfig capped_inside = capped;
  capped_inside.conventions.soft_cap_order = attnref::SoftCapOrder::kAlibiThenCap;
  const attnref::EngineReport triton = attnref::check_engine(capped_inside, {kVlTr, 90});
  ASSERT_EQ(triton.conventions.size(), 1u);
  EXPECT_EQ(triton.conventions[0].what, "the kernel caps, then adds ALiBi: c * tanh(s / c) + bias");
  EXPECT_TRUE(
      attnref::check_engine(soft_cap(alibi(kLlama3_8bPages256)), {kFa2, 90}).conventions.empty());
}

TEST(EngineConventions, CausalAlignmentMattersOnlyWithMoreKeysThanQueries) {
  using attnref::CausalAlignment;
  // A chunk of 512 query rows after a cached prefix of 1536 keys, stated top-left (as PyTorch
  // SDPA's is_causal=True or splash's CausalMask with offset 0 computes it).
  EngineConfig top_left = kv_len(q_len(kLlama3_8b, 512), 2048);
  top_left.conventions.causal_alignment = CausalAlignment::kTopLeft;
  for (EngineKernel k : attnref::kEngineKernels) {
    SCOPED_TRACE(attnref::engine_kernel_name(k));
    EXPECT_EQ(attnref::engine_conventions(k).causal_alignment, CausalAlignment::kBottomRight);
    const std::vector<attnref::ConventionMismatch> m =
        attnref::check_engine(top_left, {k, 90}).conventions;
    ASSERT_EQ(m.size(), 1u);
    EXPECT_STREQ(m[0].convention, "causal_alignment");
  }
  const attnref::EngineReport fi = attnref::check_engine(top_left, kFiFa2);
  EXPECT_EQ(fi.conventions[0].what,
            "the kernel aligns the causal mask bottom-right: query row i sees keys t <= i + 1536 "
            "(kv_len - q_len); this configuration's rows see t <= i (top-left)");
  EXPECT_EQ(fi.conventions[0].conversion,
            "for the kernel's numbers, compute the reference with a causal mask of offset 1536; "
            "for top-left rows, pass the kernel only the first 512 keys");

  // Bottom-right, the default, is what every kernel at its pinned version computes.
  EngineConfig bottom_right = top_left;
  bottom_right.conventions.causal_alignment = CausalAlignment::kBottomRight;
  EXPECT_TRUE(attnref::check_engine(bottom_right, kFiFa2).conventions.empty());
  // No difference without a causal mask, with as many keys as queries, or with kv_len unknown.
  EngineConfig same = top_left;
  same.causal = false;
  EXPECT_TRUE(attnref::check_engine(same, kFiFa2).conventions.empty());
  same = kv_len(top_left, 512);
  EXPECT_TRUE(attnref::check_engine(same, kFiFa2).conventions.empty());
  same = kv_len(top_left, 0);
  EXPECT_TRUE(attnref::check_engine(same, kFiFa2).conventions.empty());
  // A decode row after 4095 keys sees them all; top-left it would see key 0 only.
  EngineConfig decode = kv_len(kLlama3_8b, 4096);
  decode.conventions.causal_alignment = CausalAlignment::kTopLeft;
  EXPECT_EQ(attnref::check_engine(decode, {kVlV1, 90}).conventions.size(), 1u);

  // FlashAttention-2 aligned top-left before v2.1 (its README, "2.1: Change behavior of causal
  // flag"): there the bottom-right configuration is the mismatch.
  const EngineTarget fa2_v20{kFa2, 90, {2, 0, 9}};
  EXPECT_EQ(attnref::engine_conventions(fa2_v20).causal_alignment, CausalAlignment::kTopLeft);
  EXPECT_EQ(attnref::engine_conventions(EngineTarget{kFa2, 90, {2, 1, 0}}).causal_alignment,
            CausalAlignment::kBottomRight);
  EXPECT_TRUE(attnref::check_engine(top_left, fa2_v20).conventions.empty());
  const attnref::EngineReport old = attnref::check_engine(bottom_right, fa2_v20);
  ASSERT_EQ(old.conventions.size(), 1u);
  EXPECT_EQ(old.conventions[0].what,
            "the kernel aligns the causal mask top-left: query row i sees keys t <= i; this "
            "configuration's rows, aligned bottom-right, see t <= i + 1536 (kv_len - q_len)");
  EXPECT_EQ(old.conventions[0].conversion,
            "for the kernel's numbers, compute the reference with a causal mask of offset 0; for "
            "bottom-right rows, put 1536 padding query rows first (their outputs discarded), or "
            "use FlashAttention 2.1 or later");
  // The kernel-only overload reads the pinned version.
  EXPECT_TRUE(attnref::convention_mismatches(bottom_right, kFa2).empty());

  // splash's CausalMask offset for each alignment.
  EXPECT_EQ(attnref::causal_mask_offset(CausalAlignment::kBottomRight, 512, 2048), 1536);
  EXPECT_EQ(attnref::causal_mask_offset(CausalAlignment::kTopLeft, 512, 2048), 0);
}

TEST(EngineRules, VersionsSelectTheGroupSizesOfTheirRelease) {
  const EngineConfig group6 = heads(kLlama3_8b, 48, 8);
  EXPECT_TRUE(attnref::check_engine(group6, kFiDecode).ok());  // pinned v0.7.2
  EXPECT_TRUE(attnref::check_engine(group6, {kFiDec, 90, {0, 7, 0}}).ok());
  EXPECT_FALSE(attnref::check_engine(group6, {kFiDec, 90, {0, 6, 17}}).ok());
  const EngineConfig group3 = heads(kLlama3_8b, 24, 8);
  EXPECT_TRUE(attnref::check_engine(group3, {kFiDec, 90, {0, 2, 0}}).ok());
  EXPECT_FALSE(attnref::check_engine(group3, {kFiDec, 90, {0, 1, 9}}).ok());
}

TEST(EngineRules, AFamilyCallFeedsTheDecodeKernels) {
  std::vector<attnref::float8_e4m3fn> pool(8 * 4 * 16 * 128);
  std::vector<float> q(2 * 40 * 128);
  std::vector<std::int32_t> lengths{3, 5}, pages{0, 1, 2, 3};
  attnref::PagedAttentionArgs<float, attnref::float8_e4m3fn> args;
  args.q = {q.data(), {2, 40, 128}};
  args.k_pages = {pool.data(), {8, 4, 16, 128}};
  args.v_pages = {pool.data(), {8, 4, 16, 128}};
  args.lengths = {lengths.data(), {2}};
  args.page_indices = {pages.data(), {2, 2}};
  const EngineConfig c = attnref::engine_config_of(args);
  EXPECT_EQ(c.num_q_heads, 40);
  EXPECT_EQ(c.num_kv_heads, 8);
  EXPECT_EQ(c.page_size, 16);
  EXPECT_EQ(c.q_dtype, kF32);
  EXPECT_EQ(c.kv_dtype, kE4m3);
  const attnref::EngineReport r = attnref::check_engine(c, kFiDecode);
  ASSERT_EQ(r.findings.size(), 1u);
  EXPECT_EQ(r.findings[0].upstream_message(), "Unsupported group_size: 5");
}

TEST(EngineTargets, UnknownNamesListTheKnownOnes) {
  EngineKernel k{};
  EXPECT_TRUE(attnref::parse_engine_kernel("vllm.flash_attn", &k).ok());
  EXPECT_EQ(k, EngineKernel::kVllmFlashAttn);
  const attnref::Status s = attnref::parse_engine_kernel("flashinfer.decod", &k);
  EXPECT_EQ(s.code(), attnref::ErrorCode::kUnknownEngineTarget);
  EXPECT_EQ(s.message(), "attnref has no engine kernel of that name.");
  EXPECT_NE(s.hint().find("flashinfer.decode, flashinfer.decode.tensor_cores"), std::string::npos);
  EXPECT_TRUE(attnref::parse_engine_kernel("vllm.triton_attn", &k).ok());
  EXPECT_EQ(k, EngineKernel::kVllmTritonAttn);
  EXPECT_NE(s.hint().find("vllm.flashinfer, vllm.flash_attn_mla, vllm.flashmla, "
                          "vllm.cutlass_mla, vllm.triton_mla, vllm.flashinfer_mla, flash_attn2"),
            std::string::npos);
  // Every kernel's name parses back to it, and the hint lists every one.
  for (EngineKernel kernel : attnref::kEngineKernels) {
    EXPECT_TRUE(attnref::parse_engine_kernel(attnref::engine_kernel_name(kernel), &k).ok());
    EXPECT_EQ(k, kernel);
    EXPECT_NE(s.hint().find(attnref::engine_kernel_name(kernel)), std::string::npos);
  }
  int arch = 0;
  EXPECT_TRUE(attnref::parse_engine_arch("sm120", &arch).ok());
  EXPECT_EQ(arch, 120);
  for (const char* bad : {"sm75", "90", "sm", "sm9x", "sm900000"}) {
    const attnref::Status a = attnref::parse_engine_arch(bad, &arch);
    EXPECT_EQ(a.code(), attnref::ErrorCode::kUnknownEngineTarget) << bad;
    EXPECT_EQ(a.message(), "attnref has no rules for that GPU architecture.") << bad;
    EXPECT_EQ(a.hint(), "known architectures: sm80, sm86, sm89, sm90, sm100, sm120") << bad;
  }
  attnref::EngineVersion v;
  EXPECT_TRUE(attnref::parse_engine_version("0.6.17", &v).ok());
  EXPECT_TRUE((v == attnref::EngineVersion{0, 6, 17}));
  EXPECT_TRUE(attnref::parse_engine_version("2.8", &v).ok());
  EXPECT_TRUE((v == attnref::EngineVersion{2, 8, 0}));
  for (const char* bad : {"", "1", "1.", ".1", "1..2", "1.2.3.4", "a.b", "99999.1"}) {
    const attnref::Status e = attnref::parse_engine_version(bad, &v);
    EXPECT_EQ(e.code(), attnref::ErrorCode::kUnknownEngineTarget) << bad;
    EXPECT_EQ(e.message(), "an engine version is MAJOR.MINOR or MAJOR.MINOR.PATCH.") << bad;
  }
  const attnref::Status t = attnref::check_engine(kLlama3_8b, {kFiDec, 75}).status;
  EXPECT_EQ(t.code(), attnref::ErrorCode::kUnknownEngineTarget);
  EXPECT_EQ(t.message(), "attnref has no rules for GPU architecture sm75.");
  EXPECT_TRUE(attnref::check_engine(kLlama3_8b, {kFiDec, 75}).findings.empty());
}

TEST(EngineTargets, EngineVersionsNameTheirPackages) {
  attnref::EngineVersions v;
  ASSERT_TRUE(attnref::parse_engine_versions("vllm=0.32.0,flashinfer-python=0.6.17", &v).ok());
  EXPECT_TRUE((v.vllm == attnref::EngineVersion{0, 32, 0}));
  EXPECT_TRUE((v.flashinfer == attnref::EngineVersion{0, 6, 17}));
  EXPECT_TRUE((v.flash_attn == attnref::EngineVersion{}));
  EXPECT_EQ(attnref::engine_version_name({kVlFa, 90, v.vllm}), "vllm 0.32.0");
  EXPECT_EQ(attnref::engine_version_name({kVlFa, 90}), "vllm 0.33.0");
  EXPECT_EQ(attnref::engine_version_name({EngineKernel::kFlashMlaDecode, 90}),
            "FlashMLA@9241ae3ef9ba");
  ASSERT_TRUE(attnref::parse_engine_versions("sglang=0.5.22", &v).ok());
  EXPECT_TRUE((v.sglang == attnref::EngineVersion{0, 5, 22}));
  EXPECT_EQ(attnref::engine_version_name({EngineKernel::kSglangTritonExtend, 90, v.sglang}),
            "sglang 0.5.22");
  EXPECT_EQ(attnref::engine_version_name({EngineKernel::kSglangTritonDecode, 90}), "sglang 0.5.23");
  for (const char* bad : {"vllm", "tensorrt-llm=1.0", "vllm=0.32.0,", "=0.1"}) {
    const attnref::Status s = attnref::parse_engine_versions(bad, &v);
    EXPECT_EQ(s.code(), attnref::ErrorCode::kUnknownEngineTarget) << bad;
    EXPECT_EQ(s.message(),
              "an engine version is PACKAGE=VERSION, PACKAGE one of flashinfer-python, vllm, "
              "flash-attn, sglang.")
        << bad;
    EXPECT_EQ(s.hint(), "e.g. vllm=0.32.0,flashinfer-python=0.6.17") << bad;
  }
  // A known package with a malformed release gets the version parser's own error.
  const attnref::Status s = attnref::parse_engine_versions("vllm=x", &v);
  EXPECT_EQ(s.code(), attnref::ErrorCode::kUnknownEngineTarget);
  EXPECT_EQ(s.message(), "an engine version is MAJOR.MINOR or MAJOR.MINOR.PATCH.");
  // Each matrix row is checked as, and names, the release asked for.
  const auto rows = attnref::engine_matrix(page(kLlama3_8b, 8), 90, 0, {{}, {0, 32, 0}, {}, {}});
  EXPECT_EQ(rows[6].findings[0].status().message(), "Block size must be a multiple of 16.");
}

TEST(EngineTargets, AnInvalidConfigurationIsRefusedBeforeAnyRule) {
  struct Case {
    EngineConfig config;
    attnref::ErrorCode code;
    const char* message;
  };
  const Case cases[] = {
      {heads(kLlama3_8b, 0, 8), attnref::ErrorCode::kInvalidHeadCount,
       "num_q_heads and num_kv_heads must be positive. Got 0 and 8."},
      {heads(kLlama3_8b, 32, -1), attnref::ErrorCode::kInvalidHeadCount,
       "num_q_heads and num_kv_heads must be positive. Got 32 and -1."},
      {dims(kLlama3_8b, 0), attnref::ErrorCode::kInvalidHeadDim,
       "head_dim must be positive and head_dim_v 0 (same) or positive. Got 0 and 0."},
      {dims(kLlama3_8b, 128, -64), attnref::ErrorCode::kInvalidHeadDim,
       "head_dim must be positive and head_dim_v 0 (same) or positive. Got 128 and -64."},
      {page(kLlama3_8b, -16), attnref::ErrorCode::kInvalidPageSize,
       "page_size must be 0 (not paged) or positive. Got -16."},
      {q_len(kLlama3_8b, 0), attnref::ErrorCode::kInvalidSlidingWindow,
       "q_len must be positive and sliding_window 0 (none) or positive. Got 0 and 0."},
      {window(kLlama3_8b, -4), attnref::ErrorCode::kInvalidSlidingWindow,
       "q_len must be positive and sliding_window 0 (none) or positive. Got 1 and -4."},
      {kv_len(kLlama3_8b, -1), attnref::ErrorCode::kLengthOutOfRange,
       "kv_len must be 0 (unknown) or positive. Got -1."},
  };
  for (const Case& c : cases) {
    const attnref::EngineReport r = attnref::check_engine(c.config, kFiDecode);
    EXPECT_EQ(r.status.code(), c.code) << c.message;
    EXPECT_EQ(r.status.message(), c.message);
    EXPECT_TRUE(r.findings.empty());
    EXPECT_EQ(attnref::engine_finding_count(c.config, kFiDecode), -1) << c.message;
    EXPECT_TRUE(attnref::engine_matrix(c.config, 90).empty()) << c.message;
  }
}

// docs/engines.md: its rule tables are rendered from the constexpr tables here; run this test
// with ATTNREF_UPDATE_ENGINES_DOC=1 to rewrite them after changing a rule.
std::string markdown_cell(const std::string& s) {
  static const std::pair<std::string_view, const char*> kNames[] = {
      {"{0}", "{num_q_heads}"}, {"{1}", "{num_kv_heads}"}, {"{2}", "{head_dim}"},
      {"{3}", "{head_dim_v}"},  {"{4}", "{page_size}"},    {"{5}", "{group_size}"},
      {"{d6}", "{q_dtype}"},    {"{7}", "{q_len}"},        {"{k0}", "{divisors of num_q_heads}"}};
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    bool named = false;
    for (const auto& [placeholder, name] : kNames) {
      if (std::string_view(s).substr(i, placeholder.size()) == placeholder) {
        out += name;
        i += placeholder.size() - 1;
        named = true;
        break;
      }
    }
    if (!named) out += s[i] == '|' ? std::string("\\|") : std::string(1, s[i]);
  }
  return out;
}

std::string rule_tables_markdown() {
  std::ostringstream md;
  for (EngineKernel k : attnref::kEngineKernels) {
    md << "### `" << attnref::engine_kernel_name(k) << "`\n\n";
    md << "| id | severity | upstream message | source | fix |\n|---|---|---|---|---|\n";
    for (const attnref::EngineRule* rule : attnref::engine_rules(k)) {
      std::string id = rule->id;
      if (!(rule->from == attnref::EngineVersion{}) || !(rule->until == attnref::EngineVersion{})) {
        const auto ver = [](attnref::EngineVersion v) {
          return std::to_string(v.major) + "." + std::to_string(v.minor) + "." +
                 std::to_string(v.patch);
        };
        id += " (";
        if (!(rule->from == attnref::EngineVersion{})) id += "from " + ver(rule->from);
        if (!(rule->from == attnref::EngineVersion{}) && !(rule->until == attnref::EngineVersion{}))
          id += ", ";
        if (!(rule->until == attnref::EngineVersion{})) id += "before " + ver(rule->until);
        id += ")";
      }
      const std::string message = rule->upstream[0] != '\0'
                                      ? "`" + std::string(rule->upstream) + "`"
                                      : "— (" + std::string(rule->explanation) + ")";
      md << "| `" << markdown_cell(id) << "` | " << attnref::severity_name(rule->severity) << " | "
         << markdown_cell(message) << " | " << markdown_cell(rule->source) << " | "
         << markdown_cell(rule->fix) << " |\n";
    }
    md << "\n";
  }
  return md.str();
}

TEST(EnginesDoc, RuleTablesMatchTheConstexprTables) {
  const std::string path = std::string(ATTNREF_SOURCE_DIR) + "/docs/engines.md";
  std::ifstream in(path);
  ASSERT_TRUE(in.good()) << path;
  std::stringstream text;
  text << in.rdbuf();
  std::string doc = text.str();
  const std::string begin = "<!-- rule tables: generated by test_engine_rules -->\n";
  const std::string end = "<!-- end of rule tables -->";
  const auto b = doc.find(begin);
  const auto e = doc.find(end);
  ASSERT_NE(b, std::string::npos);
  ASSERT_NE(e, std::string::npos);
  const std::string current = doc.substr(b + begin.size(), e - b - begin.size());
  const std::string wanted = rule_tables_markdown();
  if (std::getenv("ATTNREF_UPDATE_ENGINES_DOC") != nullptr && current != wanted) {
    doc.replace(b + begin.size(), e - b - begin.size(), wanted);
    std::ofstream(path) << doc;
    return;
  }
  EXPECT_EQ(current, wanted) << "docs/engines.md is out of date: run test_engine_rules with "
                                "ATTNREF_UPDATE_ENGINES_DOC=1";
}

}  // namespace
