// SPDX-License-Identifier: Apache-2.0
/// @file status.hpp
/// `Status`: the result of every check. A literal type (usable in `static_assert`) that holds an
/// error code, the JAX check id it mirrors, the offending values and two format strings; the
/// message and hint are rendered only when asked for, so a passing check never allocates.
///
/// Example:
/// @code
///   attnref::Status s = attnref::check_heads(8, 6);
///   if (!s.ok()) std::cerr << s.message() << "\n" << s.hint() << "\n";
/// @endcode
#pragma once

#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "attnref/core/dtype.hpp"

namespace attnref {

/// What went wrong, named after the rule, not after the kernel. One code can stand for several
/// JAX checks (GQA divisibility is P2 in paged, S5 in splash, R6 in ragged); `Status::jax_check`
/// says which one.
enum class ErrorCode : int {
  kOk = 0,
  // Shapes, strides and buffers (any family).
  kNegativeExtent,     ///< an extent is negative
  kNullData,           ///< a null pointer with a non-zero number of elements
  kNegativeStride,     ///< an element stride is negative
  kSizeOverflow,       ///< a size or offset overflows int64
  kOutOfBuffer,        ///< extents x strides reach past the buffer size the caller gave
  kOverlappingOutput,  ///< an output view's strides map two elements to one address
  kRankMismatch,       ///< a tensor has the wrong number of dimensions
  kShapeMismatch,      ///< two tensors that must agree in shape do not
  kBatchMismatch,      ///< a per-sequence tensor's batch size differs from q's
  kDtypeNotSupported,  ///< an element type the rule does not allow
  // Heads and dimensions.
  kInvalidHeadCount,  ///< a head count is zero or negative
  kGqaNotDivisible,   ///< query heads are not a multiple of KV heads
  kHeadDimMismatch,   ///< q's head_dim differs from K/V's
  kInvalidHeadDim,    ///< a head_dim is zero or negative
  // Blocking and TPU tiling (mostly the `jax` profile).
  kInvalidBlockSize,     ///< a block size is zero or negative
  kBlockNotDivisible,    ///< a block size does not divide what it must divide
  kBlockTooLarge,        ///< a block is larger than the axis it tiles
  kTilingRule,           ///< a TPU lane/sublane rule (multiple of 128, XLA tiling)
  kMegacoreOddKvHeads,   ///< megacore 'kv_head' with an odd KV head count
  kMegacoreOddBatch,     ///< megacore 'batch' with an odd batch size
  kInvalidMegacoreMode,  ///< megacore mode is none of the allowed values
  // Page tables and lengths (metadata tier).
  kInvalidPageSize,      ///< page size is zero or negative
  kPageIndexOutOfRange,  ///< a live page index is outside [0, total_pages)
  kLengthOutOfRange,     ///< a length is negative or past the page table's capacity
  kPageTableTooNarrow,   ///< pages_per_sequence cannot hold the longest sequence
  kInvalidCuQLens,       ///< cu_q_lens does not start at 0, decreases or leaves the token buffer
  kNumSeqsOutOfRange,    ///< num_seqs outside [0, max_num_seqs]
  kTokenBudgetExceeded,  ///< more query tokens than the token buffer holds
  kQueryLongerThanKv,    ///< a sequence has more query tokens than KV tokens
  // Options.
  kInvalidSoftCap,        ///< soft cap is 0 or not finite
  kInvalidMaskValue,      ///< mask value is NaN, +-inf or positive
  kInvalidScale,          ///< sm_scale (or a dequantization scale) is not finite
  kInvalidSlidingWindow,  ///< sliding window is zero or negative
  kQuantizationMismatch,  ///< only one of K/V is quantized, or scales given without int8 pages
  kScalesShape,           ///< dequantization scales have the wrong shape
  kAlibiSlopesShape,      ///< ALiBi slopes are not [num_q_heads]
  kInvalidAlibiSlope,     ///< an ALiBi slope is NaN or infinite
  kOptionNotInJax,        ///< `jax` profile: an option the family's JAX kernel does not have
  kInvalidConvention,     ///< an ALiBi convention or soft-cap order is no enumerator
  // Splash masks.
  kMaskShape,              ///< a mask's shape does not fit (Sq, Skv) or its rank is wrong
  kMaskHeadCount,          ///< a mask has neither 1 nor num_q_heads heads
  kSegmentIdsShape,        ///< segment ids do not match the sequence length
  kSinksShape,             ///< sinks are not [num_q_heads]
  kInvalidMaskParameter,   ///< a mask constructor argument is invalid (chunk size, window, ...)
  kMissingBackwardBlocks,  ///< backward requested without backward block sizes
  // Interop adapters (FlashInfer CSR, vLLM block tables, DLPack).
  kInvalidIndptr,       ///< kv_indptr does not start at 0, decreases or does not end at nnz
  kInvalidLastPageLen,  ///< kv_last_page_len outside [1, page_size] for a non-empty sequence
  kPageCountMismatch,   ///< a sequence holds a page count other than ceil(seq_len / page_size)
  kInvalidPageStride,   ///< pages overlap, or are not dense where dense pages were declared
  kDeviceNotSupported,  ///< a DLPack tensor does not live in CPU memory
  kMisalignedOffset,    ///< a DLPack byte_offset or pointer is not aligned to the element type
  // Engine targets (validate/engines/).
  kEngineRule,           ///< a configuration breaks a rule of an engine's kernel (FlashInfer, ...)
  kUnknownEngineTarget,  ///< an engine kernel, GPU architecture or version attnref does not know
  // Data tier.
  kNonFiniteData,  ///< NaN or Inf in the region the kernel reads
  // Files and command lines (the front ends).
  kBadFile,  ///< a .npy file is unreadable or malformed
};

namespace detail {

struct ErrorCodeName {
  ErrorCode code;
  const char* name;
};

/// Every error code's name, in the enum's order (checked below).
inline constexpr ErrorCodeName kErrorCodeNames[] = {
    {ErrorCode::kOk, "ok"},
    {ErrorCode::kNegativeExtent, "negative_extent"},
    {ErrorCode::kNullData, "null_data"},
    {ErrorCode::kNegativeStride, "negative_stride"},
    {ErrorCode::kSizeOverflow, "size_overflow"},
    {ErrorCode::kOutOfBuffer, "out_of_buffer"},
    {ErrorCode::kOverlappingOutput, "overlapping_output"},
    {ErrorCode::kRankMismatch, "rank_mismatch"},
    {ErrorCode::kShapeMismatch, "shape_mismatch"},
    {ErrorCode::kBatchMismatch, "batch_mismatch"},
    {ErrorCode::kDtypeNotSupported, "dtype_not_supported"},
    {ErrorCode::kInvalidHeadCount, "invalid_head_count"},
    {ErrorCode::kGqaNotDivisible, "gqa_not_divisible"},
    {ErrorCode::kHeadDimMismatch, "head_dim_mismatch"},
    {ErrorCode::kInvalidHeadDim, "invalid_head_dim"},
    {ErrorCode::kInvalidBlockSize, "invalid_block_size"},
    {ErrorCode::kBlockNotDivisible, "block_not_divisible"},
    {ErrorCode::kBlockTooLarge, "block_too_large"},
    {ErrorCode::kTilingRule, "tiling_rule"},
    {ErrorCode::kMegacoreOddKvHeads, "megacore_odd_kv_heads"},
    {ErrorCode::kMegacoreOddBatch, "megacore_odd_batch"},
    {ErrorCode::kInvalidMegacoreMode, "invalid_megacore_mode"},
    {ErrorCode::kInvalidPageSize, "invalid_page_size"},
    {ErrorCode::kPageIndexOutOfRange, "page_index_out_of_range"},
    {ErrorCode::kLengthOutOfRange, "length_out_of_range"},
    {ErrorCode::kPageTableTooNarrow, "page_table_too_narrow"},
    {ErrorCode::kInvalidCuQLens, "invalid_cu_q_lens"},
    {ErrorCode::kNumSeqsOutOfRange, "num_seqs_out_of_range"},
    {ErrorCode::kTokenBudgetExceeded, "token_budget_exceeded"},
    {ErrorCode::kQueryLongerThanKv, "query_longer_than_kv"},
    {ErrorCode::kInvalidSoftCap, "invalid_soft_cap"},
    {ErrorCode::kInvalidMaskValue, "invalid_mask_value"},
    {ErrorCode::kInvalidScale, "invalid_scale"},
    {ErrorCode::kInvalidSlidingWindow, "invalid_sliding_window"},
    {ErrorCode::kQuantizationMismatch, "quantization_mismatch"},
    {ErrorCode::kScalesShape, "scales_shape"},
    {ErrorCode::kAlibiSlopesShape, "alibi_slopes_shape"},
    {ErrorCode::kInvalidAlibiSlope, "invalid_alibi_slope"},
    {ErrorCode::kOptionNotInJax, "option_not_in_jax"},
    {ErrorCode::kInvalidConvention, "invalid_convention"},
    {ErrorCode::kMaskShape, "mask_shape"},
    {ErrorCode::kMaskHeadCount, "mask_head_count"},
    {ErrorCode::kSegmentIdsShape, "segment_ids_shape"},
    {ErrorCode::kSinksShape, "sinks_shape"},
    {ErrorCode::kInvalidMaskParameter, "invalid_mask_parameter"},
    {ErrorCode::kMissingBackwardBlocks, "missing_backward_blocks"},
    {ErrorCode::kInvalidIndptr, "invalid_indptr"},
    {ErrorCode::kInvalidLastPageLen, "invalid_last_page_len"},
    {ErrorCode::kPageCountMismatch, "page_count_mismatch"},
    {ErrorCode::kInvalidPageStride, "invalid_page_stride"},
    {ErrorCode::kDeviceNotSupported, "device_not_supported"},
    {ErrorCode::kMisalignedOffset, "misaligned_offset"},
    {ErrorCode::kEngineRule, "engine_rule"},
    {ErrorCode::kUnknownEngineTarget, "unknown_engine_target"},
    {ErrorCode::kNonFiniteData, "non_finite_data"},
    {ErrorCode::kBadFile, "bad_file"},
};

inline constexpr std::size_t kErrorCodeCount = sizeof(kErrorCodeNames) / sizeof(kErrorCodeNames[0]);

constexpr bool error_code_names_in_order() noexcept {
  for (std::size_t i = 0; i < kErrorCodeCount; ++i)
    if (static_cast<std::size_t>(kErrorCodeNames[i].code) != i) return false;
  return true;
}

static_assert(error_code_names_in_order(), "kErrorCodeNames: one entry per code, in order");
static_assert(kErrorCodeCount == static_cast<std::size_t>(ErrorCode::kBadFile) + 1,
              "kErrorCodeNames: one entry per code (kBadFile is the last)");

}  // namespace detail

/// Stable snake_case name of an error code, as the front ends print it: `gqa_not_divisible`.
constexpr const char* error_code_name(ErrorCode c) noexcept {
  const auto i = static_cast<std::size_t>(c);
  return i < detail::kErrorCodeCount ? detail::kErrorCodeNames[i].name : "unknown";
}

/// The result of a check. `ok()` or an error with code, JAX check id, values and text.
///
/// Message and hint are format strings with placeholders filled from the stored values:
/// `{0}`..`{7}` integer values, `{r0}` `{r1}` real values (Python float repr),
/// `{d0}`..`{d7}` the dtype name of an integer value holding a `DType`,
/// `{k0}`..`{k7}` the divisors of an integer value ("1, 2, 4, 8"), `{f}` the field name.
class Status {
 public:
  using Ints = std::array<std::int64_t, 8>;
  using Reals = std::array<double, 2>;

  /// Success.
  constexpr Status() noexcept = default;

  /// An error. Format strings must be string literals, and `field` must outlive the Status: all
  /// three are stored, not copied (string literals do; a caller's own name needs `to_string()`
  /// or `message()` before it goes).
  constexpr Status(ErrorCode code, const char* jax_check, const char* message_format,
                   const char* hint_format, Ints ints = {}, Reals reals = {},
                   const char* field = "") noexcept
      : code_(code),
        jax_check_(jax_check),
        message_format_(message_format),
        hint_format_(hint_format),
        ints_(ints),
        reals_(reals),
        field_(field) {}

  constexpr bool ok() const noexcept { return code_ == ErrorCode::kOk; }
  constexpr ErrorCode code() const noexcept { return code_; }
  /// The JAX check this mirrors ("P2", "S5", "R16"), or "" for attnref's own checks.
  constexpr const char* jax_check() const noexcept { return jax_check_; }
  /// The i-th offending integer value (0 <= i < 8).
  constexpr std::int64_t value(int i) const noexcept { return ints_[static_cast<size_t>(i)]; }
  /// The i-th offending real value (0 <= i < 2).
  constexpr double real(int i) const noexcept { return reals_[static_cast<size_t>(i)]; }
  /// The name of the offending tensor or option, "" if none.
  constexpr const char* field() const noexcept { return field_; }

  /// The rendered message; "ok" for success.
  std::string message() const { return ok() ? std::string("ok") : render(message_format_); }
  /// How to fix it; "" when there is nothing to add.
  std::string hint() const { return ok() ? std::string() : render(hint_format_); }
  /// `error[<code>] <message>` and, when present, ` (hint: <hint>)`.
  std::string to_string() const {
    if (ok()) return "ok";
    std::string s = "error[";
    s += error_code_name(code_);
    s += "] ";
    s += message();
    const std::string h = hint();
    if (!h.empty()) s += " (hint: " + h + ")";
    return s;
  }

 private:
  static void append_int(std::string& out, std::int64_t v) { out += std::to_string(v); }

  /// Python's float repr of the shortest digits that round-trip: through float32 when the value
  /// is a float32 (most options are), else through double. Scientific notation outside
  /// [1e-4, 1e16), and ".0" for integral values, as Python prints them.
  static void append_real(std::string& out, double v) {
    if (std::isnan(v)) {
      out += "nan";
      return;
    }
    if (std::isinf(v)) {
      out += v > 0 ? "inf" : "-inf";
      return;
    }
    const bool is_float = static_cast<double>(static_cast<float>(v)) == v;
    char buf[48];
    int precision = 1;
    for (; precision < 17; ++precision) {
      std::snprintf(buf, sizeof buf, "%.*e", precision - 1, v);
      if (is_float ? std::strtof(buf, nullptr) == static_cast<float>(v)
                   : std::strtod(buf, nullptr) == v)
        break;
    }
    std::snprintf(buf, sizeof buf, "%.*e", precision - 1, v);
    const std::string sci(buf);
    const size_t e = sci.find('e');
    const int exponent = std::atoi(sci.c_str() + e + 1);
    if (exponent < -4 || exponent >= 16) {
      std::string mantissa = sci.substr(0, e);
      char exp_buf[16];
      std::snprintf(exp_buf, sizeof exp_buf, "e%c%02d", exponent < 0 ? '-' : '+',
                    exponent < 0 ? -exponent : exponent);
      out += mantissa + exp_buf;
      return;
    }
    const int decimals = precision - 1 - exponent;
    std::snprintf(buf, sizeof buf, "%.*f", decimals > 0 ? decimals : 0, v);
    out += buf;
    if (decimals <= 0) out += ".0";
  }

  /// The divisors of n in ascending order, found up to sqrt(n) (at most 2^20 trial divisions,
  /// so a hostile n cannot stall rendering); past 2^40 only the small ones, then "..., n".
  static void append_divisors(std::string& out, std::int64_t n) {
    if (n <= 0) return;
    constexpr std::int64_t kMaxTrial = std::int64_t{1} << 20;
    std::array<std::int64_t, 64> stack{};  // large co-divisors n / d, emitted in reverse
    std::string large;                     // ... or as text once the stack is full
    size_t top = 0;
    bool first = true;
    const auto emit = [&](std::int64_t d) {
      if (!first) out += ", ";
      append_int(out, d);
      first = false;
    };
    std::int64_t d = 1;
    for (; d <= kMaxTrial && d <= n / d; ++d) {
      if (n % d != 0) continue;
      emit(d);
      const std::int64_t co = n / d;
      if (co == d) continue;
      if (top < stack.size()) {
        stack[top++] = co;
      } else {
        large.insert(0, ", " + std::to_string(co));
      }
    }
    if (d <= n / d) {  // stopped early: n > 2^40
      out += ", ..., ";
      append_int(out, n);
      return;
    }
    out += large;
    while (top > 0) emit(stack[--top]);
  }

  std::string render(const char* format) const {
    std::string out;
    for (const char* p = format; *p != '\0'; ++p) {
      if (*p != '{') {
        out += *p;
        continue;
      }
      const char* close = p + 1;
      while (*close != '\0' && *close != '}') ++close;
      if (*close == '\0') {  // unmatched brace: print literally
        out += p;
        break;
      }
      const std::string key(p + 1, close);
      p = close;
      if (key == "f") {
        out += field_;
      } else if (key.size() == 1 && key[0] >= '0' && key[0] <= '7') {
        append_int(out, ints_[static_cast<size_t>(key[0] - '0')]);
      } else if (key.size() == 2 && key[1] >= '0' && key[1] <= '7') {
        const size_t i = static_cast<size_t>(key[1] - '0');
        if (key[0] == 'r' && i < 2) append_real(out, reals_[i]);
        if (key[0] == 'd') out += dtype_name(static_cast<DType>(ints_[i]));
        if (key[0] == 'k') append_divisors(out, ints_[i]);
      } else {
        out += "{" + key + "}";
      }
    }
    return out;
  }

  ErrorCode code_ = ErrorCode::kOk;
  const char* jax_check_ = "";
  const char* message_format_ = "";
  const char* hint_format_ = "";
  Ints ints_{};
  Reals reals_{};
  const char* field_ = "";
};

/// Returns from the enclosing function when `expr` is an error Status.
#define ATTNREF_RETURN_IF_ERROR(expr)                  \
  do {                                                 \
    const ::attnref::Status attnref_status_ = (expr);  \
    if (!attnref_status_.ok()) return attnref_status_; \
  } while (false)

}  // namespace attnref
