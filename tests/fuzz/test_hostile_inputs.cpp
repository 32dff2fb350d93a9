// SPDX-License-Identifier: Apache-2.0
// Hostile inputs: one table, input -> expected error code (and a message substring).
// Every row builds a small, otherwise valid call, breaks one thing, and runs the entry point a
// user would call (try_paged_attention, check_paged_data, check_ragged, parse_npy, check_view).
// The same table is in docs/hostile-inputs.md; the last test keeps the two in
// sync. No row needs exceptions (the file is also built with -fno-exceptions).
#include <gtest/gtest.h>

#include <attnref/core/executor.hpp>
#include <attnref/core/kv_layout.hpp>
#include <attnref/core/tensor_view.hpp>
#include <attnref/io/npy.hpp>
#include <attnref/kernels/paged_attention.hpp>
#include <attnref/validate/paged.hpp>
#include <attnref/validate/ragged.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

namespace {

using attnref::ErrorCode;
using attnref::Status;
using attnref::TensorView;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr std::int64_t kI64Max = std::numeric_limits<std::int64_t>::max();
constexpr std::int32_t kI32Max = std::numeric_limits<std::int32_t>::max();

/// A valid decode batch: 2 sequences, 4 query heads over 2 KV heads, head_dim 8, 6 pages of 4
/// tokens, 3 pages per sequence; lengths {5, 0}. Everything the kernel must not read is NaN (and
/// the dead page-table entries are -1).
struct Paged {
  static constexpr std::int64_t B = 2, Hq = 4, Hkv = 2, D = 8, P = 6, S = 4, PPS = 3;
  std::vector<float> q = std::vector<float>(B * Hq * D, 0.25f);
  std::vector<float> k = std::vector<float>(Hkv * P * S * D, kNaN);
  std::vector<float> v = std::vector<float>(Hkv * P * S * D, kNaN);
  std::vector<std::int32_t> lengths = {5, 0};
  std::vector<std::int32_t> table = {1, 2, -1, -1, -1, -1};
  std::vector<float> out = std::vector<float>(B * Hq * D, -7.0f);
  attnref::PagedAttentionArgs<float> args;
  TensorView<float, 3> out_view;

  Paged() {
    for (std::int64_t h = 0; h < Hkv; ++h)
      for (std::int64_t t = 0; t < 5; ++t)  // the 5 live tokens: pages 1 and 2
        for (std::int64_t d = 0; d < D; ++d) {
          const auto at = static_cast<std::size_t>(
              ((h * P + table[static_cast<std::size_t>(t / S)]) * S + t % S) * D + d);
          k[at] = 0.125f * static_cast<float>((t + d) % 5);
          v[at] = static_cast<float>(t) - 2.0f;
        }
    bind();
  }
  void bind() {
    args.q = {q.data(), {B, Hq, D}, static_cast<std::int64_t>(q.size())};
    args.k_pages = attnref::kv_pages_view<const float>(k.data(), attnref::KvLayout::kJax, Hkv, P, S,
                                                       D, static_cast<std::int64_t>(k.size()));
    args.v_pages = attnref::kv_pages_view<const float>(v.data(), attnref::KvLayout::kJax, Hkv, P, S,
                                                       D, static_cast<std::int64_t>(v.size()));
    args.lengths = {lengths.data(), {B}, B};
    args.page_indices = {table.data(), {B, PPS}, B * PPS};
    out_view = {out.data(), {B, Hq, D}, static_cast<std::int64_t>(out.size())};
  }
  Status run() { return attnref::try_paged_attention(args, out_view); }
  /// try_paged_attention, and on success the data tier too (NaN/Inf rows).
  Status run_with_data() {
    const Status s = run();
    return s.ok() ? attnref::check_paged_data(args) : s;
  }
};

/// A valid ragged batch: 3 page-table rows, 2 live sequences (3 and 1 query rows), 8 token rows.
struct Ragged {
  std::vector<float> q = std::vector<float>(8 * 2 * 4, 0.5f);
  std::vector<float> kv = std::vector<float>(4 * 4 * 2 * 4, 0.25f);  // [P=4, S=4, 2*Hkv=2, D=4]
  std::vector<std::int32_t> kv_lens = {6, 2, 0};
  std::vector<std::int32_t> table = {0, 1, 2, -1, -1, -1};  // [3, 2]
  std::vector<std::int32_t> cu_q_lens = {0, 3, 4, 4};
  std::vector<std::int32_t> num_seqs = {2};
  attnref::RaggedPagedAttentionArgs<float> args;
  Ragged() { bind(); }
  void bind() {
    args.q = {q.data(), {8, 2, 4}, static_cast<std::int64_t>(q.size())};
    const attnref::TensorView<const float, 4> pool(kv.data(), {4, 4, 2, 4},
                                                   static_cast<std::int64_t>(kv.size()));
    EXPECT_TRUE(attnref::ragged_kv_views(pool, &args.k_pages, &args.v_pages).ok());
    args.kv_lens = {kv_lens.data(), {3}, 3};
    args.page_indices = {table.data(), {3, 2}, 6};
    args.cu_q_lens = {cu_q_lens.data(), {4}, 4};
    args.num_seqs = {num_seqs.data(), {1}, 1};
  }
  Status run() { return attnref::check_ragged(args, attnref::Profile::kReference); }
};

/// The same ragged batch with int64 metadata (what the reference profile also accepts).
struct Ragged64 {
  std::vector<float> q = std::vector<float>(8 * 2 * 4, 0.5f);
  std::vector<float> kv = std::vector<float>(4 * 4 * 2 * 4, 0.25f);
  std::vector<std::int64_t> kv_lens = {6, 2, 0};
  std::vector<std::int64_t> table = {0, 1, 2, -1, -1, -1};
  std::vector<std::int64_t> cu_q_lens = {0, 3, 4, 4};
  std::vector<std::int64_t> num_seqs = {2};
  attnref::RaggedPagedAttentionArgs<float, float, std::int64_t> args;
  Ragged64() { bind(); }
  void bind() {
    args.q = {q.data(), {8, 2, 4}, static_cast<std::int64_t>(q.size())};
    const attnref::TensorView<const float, 4> pool(kv.data(), {4, 4, 2, 4},
                                                   static_cast<std::int64_t>(kv.size()));
    EXPECT_TRUE(attnref::ragged_kv_views(pool, &args.k_pages, &args.v_pages).ok());
    args.kv_lens = {kv_lens.data(), {3}, 3};
    args.page_indices = {table.data(), {3, 2}, 6};
    args.cu_q_lens = {cu_q_lens.data(), {4}, 4};
    args.num_seqs = {num_seqs.data(), {1}, 1};
  }
  Status run() { return attnref::check_ragged(args, attnref::Profile::kReference); }
};

/// A .npy file: magic, version 1.0, header padded with spaces, then `data_bytes` bytes.
std::vector<unsigned char> npy_file(const std::string& header, std::size_t data_bytes) {
  std::string h = header;
  while ((10 + h.size() + 1) % 64 != 0) h += ' ';
  h += '\n';
  const unsigned char preamble[] = {0x93,
                                    'N',
                                    'U',
                                    'M',
                                    'P',
                                    'Y',
                                    1,
                                    0,
                                    static_cast<unsigned char>(h.size() & 0xFF),
                                    static_cast<unsigned char>(h.size() >> 8)};
  // Sized once and filled in place: growing a 10-byte vector by insert made g++ 12 report a
  // false -Warray-bounds in its memcpy.
  std::vector<unsigned char> f(sizeof preamble + h.size() + data_bytes, 0);
  std::copy(std::begin(preamble), std::end(preamble), f.begin());
  std::copy(h.begin(), h.end(), f.begin() + static_cast<std::ptrdiff_t>(sizeof preamble));
  return f;
}

struct Outcome {
  ErrorCode code;
  std::string message;
};
Outcome of(const Status& s) { return {s.code(), s.message()}; }
Outcome npy(const std::vector<unsigned char>& file) {
  attnref::NpyArray a;
  const attnref::NpyStatus s = attnref::parse_npy(file.data(), file.size(), &a, "x.npy");
  return {s.code(), s.message()};
}

struct Row {
  const char* input;    // as in docs/hostile-inputs.md's table
  ErrorCode code;       // expected code (kOk: accepted)
  const char* message;  // substring of the message ("" for kOk)
  std::function<Outcome()> run;
};

const std::vector<Row>& rows() {
  static const std::vector<Row> table = {
      // --- sizes ---------------------------------------------------------------------------
      {"negative extent (k/v total_pages = -1)", ErrorCode::kNegativeExtent,
       "k_pages has a negative extent -1 in dimension 1",
       [] {
         Paged p;
         p.args.k_pages.extents[1] = p.args.v_pages.extents[1] = -1;
         return of(p.run());
       }},
      {"negative stride (q stride -1)", ErrorCode::kNegativeStride, "q has a negative stride -1",
       [] {
         Paged p;
         p.args.q.strides[2] = -1;
         return of(p.run());
       }},
      {"huge extent within int64 (k/v total_pages = 2^40) over a real buffer",
       ErrorCode::kOutOfBuffer, "k_pages: extents and strides reach element offset",
       [] {
         Paged p;
         p.args.k_pages.extents[1] = p.args.v_pages.extents[1] = std::int64_t{1} << 40;
         return of(p.run());
       }},
      {"element count overflows int64 (k/v extents 2 x 2^62 x 4 x 8)", ErrorCode::kSizeOverflow,
       "k_pages: the number of elements overflows int64",
       [] {
         Paged p;
         p.args.k_pages.extents[1] = p.args.v_pages.extents[1] = std::int64_t{1} << 62;
         return of(p.run());
       }},
      {"largest offset overflows int64 (q batch stride INT64_MAX)", ErrorCode::kSizeOverflow,
       "q: the largest element offset overflows int64",
       [] {
         Paged p;
         p.args.q.strides[0] = kI64Max;
         return of(p.run());
       }},
      {"pages_per_sequence x page_size overflows int64 (page table [1, 2^62], stride 0)",
       ErrorCode::kSizeOverflow, "pages_per_sequence (4611686018427387904) x page_size (4)",
       [] {
         Paged p;
         p.args.q.extents[0] = 1;
         p.args.lengths.extents[0] = 1;
         p.args.page_indices = {p.table.data(), {1, std::int64_t{1} << 62}, {0, 0}, 6};
         return of(p.run());
       }},
      {"view reaching past buffer_size (NHD strides over a buffer one element short)",
       ErrorCode::kOutOfBuffer, "past the buffer of 383 elements",
       [] {
         Paged p;
         p.args.k_pages = attnref::kv_pages_view<const float>(
             p.k.data(), attnref::KvLayout::kNhd, Paged::Hkv, Paged::P, Paged::S, Paged::D,
             static_cast<std::int64_t>(p.k.size()) - 1);
         p.args.v_pages = p.args.k_pages;
         return of(p.run());
       }},
      {"output view reaching past its buffer", ErrorCode::kOutOfBuffer, "out: extents and strides",
       [] {
         Paged p;
         p.out_view.buffer_size -= 1;
         Outcome o = of(p.run());
         if (p.out[0] != -7.0f) o.message += " [out was written]";
         return o;
       }},
      {"output view whose rows share addresses (stride 0)", ErrorCode::kOverlappingOutput,
       "out: dimension 0 (stride 0) overlaps",
       [] {
         Paged p;
         p.out_view.strides[0] = 0;
         Outcome o = of(p.run());
         if (p.out[0] != -7.0f) o.message += " [out was written]";
         return o;
       }},
      // --- page tables and lengths ---------------------------------------------------------
      {"page index -1 in a live page", ErrorCode::kPageIndexOutOfRange,
       "page_indices[0, 1]=-1 is outside [0, 6)",
       [] {
         Paged p;
         p.table[1] = -1;
         return of(p.run());
       }},
      {"page index == total_pages", ErrorCode::kPageIndexOutOfRange,
       "page_indices[0, 0]=6 is outside [0, 6)",
       [] {
         Paged p;
         p.table[0] = 6;
         return of(p.run());
       }},
      {"page index INT32_MAX", ErrorCode::kPageIndexOutOfRange,
       "page_indices[0, 1]=2147483647 is outside [0, 6)",
       [] {
         Paged p;
         p.table[1] = kI32Max;
         return of(p.run());
       }},
      {"page index -1 / INT32_MAX past the length (never read)", ErrorCode::kOk, "",
       [] {
         Paged p;
         p.table[2] = kI32Max;  // lengths[0] = 5 reads pages 0 and 1 only
         p.table[3] = -1;       // lengths[1] = 0 reads nothing
         return of(p.run());
       }},
      {"length past capacity (13 > 3 pages x 4)", ErrorCode::kLengthOutOfRange,
       "lengths[0]=13 is outside [0, 12]",
       [] {
         Paged p;
         p.lengths[0] = 13;
         return of(p.run());
       }},
      {"negative length", ErrorCode::kLengthOutOfRange, "lengths[1]=-1 is outside [0, 12]",
       [] {
         Paged p;
         p.lengths[1] = -1;
         return of(p.run());
       }},
      {"length INT32_MAX", ErrorCode::kLengthOutOfRange, "lengths[0]=2147483647",
       [] {
         Paged p;
         p.lengths[0] = kI32Max;
         return of(p.run());
       }},
      // --- zero-length axes and null data --------------------------------------------------
      {"empty batch (batch 0), 4-thread executor", ErrorCode::kOk, "",
       [] {
         Paged p;
         p.args.q.extents[0] = p.args.lengths.extents[0] = p.args.page_indices.extents[0] = 0;
         p.out_view.extents[0] = 0;
         attnref::ThreadPoolExecutor pool(4);
         return of(attnref::try_paged_attention(p.args, p.out_view, pool));
       }},
      {"head_dim 0", ErrorCode::kInvalidHeadDim, "head_dim must be positive. Got 0 and 0.",
       [] {
         Paged p;
         p.args.q.extents[2] = p.args.k_pages.extents[3] = p.args.v_pages.extents[3] = 0;
         return of(p.run());
       }},
      {"page_size 0", ErrorCode::kInvalidPageSize, "page_size must be positive. Got 0.",
       [] {
         Paged p;
         p.args.k_pages.extents[2] = p.args.v_pages.extents[2] = 0;
         return of(p.run());
       }},
      {"num_kv_heads 0", ErrorCode::kInvalidHeadCount, "num_kv_heads must be positive. Got 0.",
       [] {
         Paged p;
         p.args.k_pages.extents[0] = p.args.v_pages.extents[0] = 0;
         return of(p.run());
       }},
      {"pages_per_sequence 0 with all lengths 0", ErrorCode::kOk, "",
       [] {
         Paged p;
         p.lengths = {0, 0};
         p.bind();
         p.args.page_indices.extents[1] = 0;
         return of(p.run());
       }},
      {"total_pages 0 with a live length", ErrorCode::kPageIndexOutOfRange,
       "page_indices[0, 0]=1 is outside [0, 0)",
       [] {
         Paged p;
         p.args.k_pages.extents[1] = p.args.v_pages.extents[1] = 0;
         return of(p.run());
       }},
      {"null q with non-zero extents", ErrorCode::kNullData,
       "q has 64 elements but a null data pointer",
       [] {
         Paged p;
         p.args.q.data = nullptr;
         return of(p.run());
       }},
      {"null page table with non-zero extents", ErrorCode::kNullData,
       "page_indices has 6 elements but a null data pointer",
       [] {
         Paged p;
         p.args.page_indices.data = nullptr;
         return of(p.run());
       }},
      {"null data with zero extents (empty batch)", ErrorCode::kOk, "",
       [] {
         Paged p;
         p.args.q = {nullptr, {0, Paged::Hq, Paged::D}};
         p.args.lengths = {nullptr, {0}};
         p.args.page_indices = {nullptr, {0, Paged::PPS}};
         p.out_view = {nullptr, {0, Paged::Hq, Paged::D}};
         return of(p.run());
       }},
      // --- options -------------------------------------------------------------------------
      {"soft cap 0", ErrorCode::kInvalidSoftCap, "soft_cap=0.0 must not be 0.0",
       [] {
         Paged p;
         p.args.soft_cap = 0.0f;
         return of(p.run());
       }},
      {"soft cap NaN", ErrorCode::kInvalidSoftCap, "soft_cap=nan",
       [] {
         Paged p;
         p.args.soft_cap = kNaN;
         return of(p.run());
       }},
      {"sm_scale Inf", ErrorCode::kInvalidScale, "sm_scale=inf must be finite",
       [] {
         Paged p;
         p.args.sm_scale = kInf;
         return of(p.run());
       }},
      {"mask_value +Inf", ErrorCode::kInvalidMaskValue, "mask_value=inf",
       [] {
         Paged p;
         p.args.mask_value = kInf;
         return of(p.run());
       }},
      {"paged: sliding window 0", ErrorCode::kInvalidSlidingWindow,
       "sliding_window=0 must be positive.",
       [] {
         Paged p;
         p.args.sliding_window = 0;
         return of(p.run());
       }},
      {"paged: sliding window INT64_MAX (longer than any sequence: no window)", ErrorCode::kOk, "",
       [] {
         Paged p;
         p.args.sliding_window = kI64Max;
         return of(p.run_with_data());
       }},
      {"paged: sliding window 1, the page before it index -1 and its K/V NaN (never read)",
       ErrorCode::kOk, "",
       [] {
         Paged p;
         for (std::size_t i = 0; i < p.k.size(); ++i)
           if ((i / (Paged::S * Paged::D)) % Paged::P == 1) p.k[i] = p.v[i] = kNaN;  // page 1
         p.table[0] = -1;
         p.args.sliding_window = 1;
         const Status s = p.run_with_data();
         for (std::int64_t i = 0; i < Paged::Hq * Paged::D; ++i)
           if (!std::isfinite(p.out[static_cast<std::size_t>(i)]))
             return of(Status(ErrorCode::kNonFiniteData, "", "an output row is not finite", ""));
         return of(s);
       }},
      {"ALiBi slope NaN", ErrorCode::kInvalidAlibiSlope, "alibi_slopes[2]=nan must be finite.",
       [] {
         Paged p;
         std::vector<float> slopes = {0.5f, 0.25f, kNaN, 0.125f};
         p.args.alibi_slopes = {slopes.data(), {4}};
         return of(p.run());
       }},
      {"ragged: ALiBi slope -Inf", ErrorCode::kInvalidAlibiSlope,
       "alibi_slopes[0]=-inf must be finite.",
       [] {
         Ragged r;
         std::vector<float> slopes = {-kInf, 0.25f};
         r.args.alibi_slopes = {slopes.data(), {2}};
         return of(r.run());
       }},
      {"ALiBi slopes of num_q_heads + 1", ErrorCode::kAlibiSlopesShape,
       "alibi_slopes must have shape (4,), one slope per query head. Got (5,).",
       [] {
         Paged p;
         std::vector<float> slopes(5, 0.5f);
         p.args.alibi_slopes = {slopes.data(), {5}};
         return of(p.run());
       }},
      {"ALiBi slope 1e38 (finite; distant keys' bias overflows to -inf: weight 0)", ErrorCode::kOk,
       "",
       [] {
         Paged p;
         std::vector<float> slopes(4, 1e38f);
         p.args.alibi_slopes = {slopes.data(), {4}};
         return of(p.run_with_data());
       }},
      {"ragged: sinks of num_q_heads - 1", ErrorCode::kSinksShape,
       "sinks must have shape (2,), one logit per query head. Got (1,).",
       [] {
         Ragged r;
         std::vector<float> sinks = {0.5f};
         r.args.sinks = {sinks.data(), {1}};
         return of(r.run());
       }},
      {"NaN sink (data tier)", ErrorCode::kNonFiniteData, "sinks[1] is not finite",
       [] {
         Paged p;
         std::vector<float> sinks = {0.5f, kNaN, 0.0f, 1.0f};
         p.args.sinks = {sinks.data(), {4}};
         return of(p.run_with_data());
       }},
      {"pages_per_compute_block 0", ErrorCode::kInvalidBlockSize,
       "pages_per_compute_block must be positive. Got 0.",
       [] {
         Paged p;
         p.args.pages_per_compute_block = 0;
         return of(p.run());
       }},
      // --- data tier -----------------------------------------------------------------------
      {"NaN in a used K row (data tier)", ErrorCode::kNonFiniteData,
       "k_pages is not finite at sequence 0, token 4 (page 2, slot 0), kv head 1, dim 3",
       [] {
         Paged p;
         p.k[((1 * Paged::P + 2) * Paged::S + 0) * Paged::D + 3] = kNaN;
         return of(p.run_with_data());
       }},
      {"Inf in q (data tier)", ErrorCode::kNonFiniteData, "q[1, 2, 5] is not finite",
       [] {
         Paged p;
         p.q[(1 * Paged::Hq + 2) * Paged::D + 5] = -kInf;
         return of(p.run_with_data());
       }},
      {"NaN/Inf in unused rows, pages and padding (ignored; output finite)", ErrorCode::kOk, "",
       [] {
         Paged p;  // every K/V element outside the 5 live tokens is NaN already
         p.k[((0 * Paged::P + 2) * Paged::S + 1) * Paged::D] = kInf;  // token 5: past length
         Outcome o = of(p.run_with_data());
         for (float x : p.out)
           if (!std::isfinite(x)) o = {ErrorCode::kNonFiniteData, "the kernel read padding"};
         return o;
       }},
      // --- ragged metadata -----------------------------------------------------------------
      {"ragged: decreasing cu_q_lens", ErrorCode::kInvalidCuQLens,
       "cu_q_lens must not decrease: cu_q_lens[1]=3 > cu_q_lens[2]=2",
       [] {
         Ragged r;
         r.cu_q_lens = {0, 3, 2, 4};
         r.bind();
         return of(r.run());
       }},
      {"ragged: cu_q_lens[0] != 0", ErrorCode::kInvalidCuQLens, "cu_q_lens[0]=1 must be 0",
       [] {
         Ragged r;
         r.cu_q_lens = {1, 3, 4, 4};
         r.bind();
         return of(r.run());
       }},
      {"ragged: cu_q_lens past the token buffer", ErrorCode::kTokenBudgetExceeded,
       "Total q tokens 9 must be less or equal to max_num_batched_tokens=8",
       [] {
         Ragged r;
         r.cu_q_lens = {0, 3, 9, 9};
         r.kv_lens = {6, 8, 0};
         r.bind();
         return of(r.run());
       }},
      {"ragged: num_seqs past max_num_seqs", ErrorCode::kNumSeqsOutOfRange,
       "num_seqs[0]=4 must be less or equal to max_num_seqs=3",
       [] {
         Ragged r;
         r.num_seqs = {4};
         r.bind();
         return of(r.run());
       }},
      {"ragged: negative num_seqs", ErrorCode::kNumSeqsOutOfRange,
       "num_seqs[0]=-1 must not be negative",
       [] {
         Ragged r;
         r.num_seqs = {-1};
         r.bind();
         return of(r.run());
       }},
      {"ragged: page index -1 in a live page", ErrorCode::kPageIndexOutOfRange,
       "page_indices[1, 0]=-1 is outside [0, 4)",
       [] {
         Ragged r;
         r.table[2] = -1;
         r.bind();
         return of(r.run());
       }},
      {"ragged: page table extent INT64_MAX (max_num_seqs + 1 overflows)",
       ErrorCode::kShapeMismatch, "to be (9223372036854775807,)",
       [] {
         Ragged64 r;
         r.args.page_indices.extents[0] = r.args.kv_lens.extents[0] = kI64Max;
         return of(r.run());
       }},
      {"ragged: cu_q_lens INT64_MAX then INT64_MIN (int64 indices)", ErrorCode::kInvalidCuQLens,
       "cu_q_lens[1]=9223372036854775807 > cu_q_lens[2]=-9223372036854775808",
       [] {
         Ragged64 r;
         r.cu_q_lens = {0, kI64Max, std::numeric_limits<std::int64_t>::min(), 4};
         r.bind();
         const Status s = r.run();
         Outcome o = of(s);
         if (s.hint().find("(-9223372036854775808)") == std::string::npos) o.message += " [hint]";
         return o;
       }},
      // --- .npy headers --------------------------------------------------------------------
      {".npy: shape claims more data than the file holds", ErrorCode::kBadFile,
       "x.npy: data is truncated: shape (1000, 1000) of float32 needs 4000000 bytes, the file "
       "has 16",
       [] {
         return npy(
             npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (1000, 1000), }", 16));
       }},
      {".npy: shape claims less data than the file holds", ErrorCode::kBadFile,
       "x.npy: data is longer than the shape",
       [] {
         return npy(npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", 16));
       }},
      {".npy: header length field past the end of the file", ErrorCode::kBadFile,
       "truncated header: it claims 65535 bytes",
       [] {
         std::vector<unsigned char> f =
             npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }", 4);
         f[8] = f[9] = 0xFF;
         return npy(f);
       }},
      {".npy: shape whose element count overflows int64", ErrorCode::kBadFile,
       "has more elements than int64 can count",
       [] {
         return npy(
             npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, "
                      "4294967296), }",
                      0));
       }},
      {".npy: shape whose byte count overflows int64", ErrorCode::kBadFile,
       "needs more bytes than int64 can count",
       [] {
         return npy(
             npy_file("{'descr': '<f8', 'fortran_order': False, 'shape': "
                      "(2305843009213693952,), }",
                      0));
       }},
      {".npy: extent past int64", ErrorCode::kBadFile, "does not fit in int64",
       [] {
         return npy(
             npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': "
                      "(99999999999999999999,), }",
                      0));
       }},
      {".npy: negative extent", ErrorCode::kBadFile, "'shape' has a negative extent",
       [] {
         return npy(npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (-1,), }", 0));
       }},
  };
  return table;
}

class HostileInputs : public ::testing::TestWithParam<size_t> {};

TEST_P(HostileInputs, GivesTheExpectedCodeAndMessage) {
  const Row& row = rows()[GetParam()];
  const Outcome o = row.run();
  EXPECT_EQ(attnref::error_code_name(o.code), std::string(attnref::error_code_name(row.code)))
      << row.input << ": " << o.message;
  EXPECT_NE(o.message.find(row.message), std::string::npos)
      << row.input << "\n  message: " << o.message << "\n  expected to contain: " << row.message;
}

INSTANTIATE_TEST_SUITE_P(Table, HostileInputs, ::testing::Range<size_t>(0, rows().size()),
                         [](const ::testing::TestParamInfo<size_t>& param_info) {
                           return "row" + std::to_string(param_info.param);
                         });

// The kernel never writes `out` when validation fails.
TEST(HostileInputs, ErrorLeavesOutputUntouched) {
  Paged p;
  p.table[0] = -1;
  ASSERT_EQ(p.run().code(), ErrorCode::kPageIndexOutOfRange);
  for (float x : p.out) EXPECT_EQ(x, -7.0f);
}

// Regression (fuzz_paged, tests/fuzz/corpus/fuzz_paged/regression-empty-batch-split-kv-div0):
// an empty batch with an executor of more than one thread and pages_per_sequence > 1 divided
// by zero when choosing the split-KV factor.
TEST(HostileInputs, EmptyBatchWithThreadsDoesNotDivideByZero) {
  EXPECT_EQ(attnref::detail::kv_splits(0, 4, 3), 1);
  Paged p;
  p.args.q.extents[0] = p.args.lengths.extents[0] = p.args.page_indices.extents[0] = 0;
  p.out_view.extents[0] = 0;
  struct Claimed {  // claims 8 threads, runs serially
    int concurrency() const noexcept { return 8; }
    void parallel_for(std::int64_t n, const std::function<void(std::int64_t)>& fn) const {
      for (std::int64_t i = 0; i < n; ++i) fn(i);
    }
  };
  EXPECT_TRUE(attnref::try_paged_attention(p.args, p.out_view, Claimed{}).ok());
}

// docs/hostile-inputs.md lists every row with its code.
TEST(HostileInputs, DocTableMatches) {
  std::ifstream in(std::string(ATTNREF_SOURCE_DIR) + "/docs/hostile-inputs.md");
  ASSERT_TRUE(in.good()) << "docs/hostile-inputs.md not found";
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string readme = ss.str();
  const size_t section = readme.find("# Hostile inputs");
  ASSERT_NE(section, std::string::npos);
  for (const Row& row : rows()) {
    const std::string line =
        std::string("| ") + row.input + " | `" + attnref::error_code_name(row.code) + "` |";
    EXPECT_NE(readme.find(line, section), std::string::npos)
        << "docs/hostile-inputs.md lacks: " << line;
  }
}

}  // namespace

namespace {

// Regression (fuzz_paged, tests/fuzz/corpus/fuzz_paged/regression-divisor-hint-hang): the hint
// "valid num_kv_heads for N query heads: <divisors>" tried every d <= N, so rendering it for a
// hostile head count (2^62) never finished. Divisors are now found up to sqrt(N), at most 2^20
// trial divisions.
TEST(HostileInputs, HugeHeadCountHintRendersQuickly) {
  const Status s = attnref::check_heads(std::int64_t{1} << 62, 3);
  ASSERT_EQ(s.code(), ErrorCode::kGqaNotDivisible);
  EXPECT_NE(s.hint().find("1, 2, 4, 8, 16, "), std::string::npos) << s.hint();
  EXPECT_NE(s.hint().find(", ..., 4611686018427387904"), std::string::npos) << s.hint();
  EXPECT_EQ(attnref::check_heads(12, 5).hint(),
            "valid num_kv_heads for 12 query heads: 1, 2, 3, 4, 6, 12");
  const Status m = attnref::check_heads(kI64Max, 2);
  EXPECT_NE(m.hint().find("1, 7, 49, 73,"), std::string::npos) << m.hint();
}

}  // namespace

namespace {

// Regression (fuzz/audit finding): the paged kernel used to size its scratch from
// page_size * head_dim. A pool with no pages holds no elements, so check_view cannot bound
// page_size; with every length 0 the call is valid, and the kernel asked for 2^43 floats. Scratch
// is now bounded by one chunk of kChunkTokens tokens, whatever the page size.
TEST(HostileInputs, PoolWithoutPagesAndHugePageSizeRunsWithoutAllocating) {
  std::vector<float> q(2 * 8, 1.0f), out(q.size(), -1.0f);
  std::vector<std::int32_t> lengths = {0}, table = {0};
  attnref::PagedAttentionArgs<float> a;
  a.q = {q.data(), {1, 2, 8}, 16};
  a.k_pages = {q.data(), {2, 0, std::int64_t{1} << 40, 8}, 16};
  a.v_pages = a.k_pages;
  a.lengths = {lengths.data(), {1}, 1};
  a.page_indices = {table.data(), {1, 1}, 1};
  ASSERT_TRUE(attnref::check_paged(a, attnref::Profile::kReference).ok());
  EXPECT_TRUE(
      attnref::try_paged_attention(a, TensorView<float, 3>(out.data(), {1, 2, 8}, 16)).ok());
  for (float x : out) EXPECT_EQ(x, 0.0f);
}

}  // namespace

namespace {

// Regression (fuzz finding): with 2^20 query heads on one KV head and head_dim 1, the
// kernel's score tile was [G, 128] floats (512 MiB) for a 4 MiB q. The softmax chunk now shrinks
// with G, so scratch stays proportional to the inputs; the result is checked by hand: with one
// token per sequence every head's output is that token's V row.
TEST(HostileInputs, HugeGroupKeepsScratchProportionalToTheInputs) {
  const std::int64_t heads = std::int64_t{1} << 20;
  std::vector<float> q(static_cast<size_t>(heads), 0.5f), out(q.size(), -1.0f);
  std::vector<float> k{1.0f, 2.0f}, v{3.0f, 4.0f};
  std::vector<std::int32_t> lengths{1}, table{1};
  attnref::PagedAttentionArgs<float> a;
  a.q = {q.data(), {1, heads, 1}};
  a.k_pages = {k.data(), {1, 2, 1, 1}};
  a.v_pages = {v.data(), {1, 2, 1, 1}};
  a.lengths = {lengths.data(), {1}};
  a.page_indices = {table.data(), {1, 1}};
  ASSERT_TRUE(
      attnref::try_paged_attention(a, TensorView<float, 3>(out.data(), {1, heads, 1})).ok());
  for (float x : out) ASSERT_EQ(x, 4.0f);
  // The sizing rules themselves: scores [G, chunk] and converted rows [piece, D] never exceed
  // max(G or D, 16384) elements, and normal shapes keep the full 128-token chunk.
  for (std::int64_t n : {std::int64_t{1}, std::int64_t{4}, std::int64_t{128}, std::int64_t{5000},
                         heads, std::int64_t{1} << 40}) {
    EXPECT_LE(n * attnref::detail::chunk_tokens(n), std::max<std::int64_t>(n, 16384)) << n;
    EXPECT_LE(n * attnref::detail::piece_rows(n), std::max<std::int64_t>(n, 16384)) << n;
  }
  EXPECT_EQ(attnref::detail::chunk_tokens(8), 128);
  EXPECT_EQ(attnref::detail::piece_rows(128), 128);
}

}  // namespace

namespace {

// A float32 view whose largest element offset (2^61) fits int64 but whose bytes (2^63) do not:
// the kernels address it in bytes, so check_view and check_paged refuse it. 16-bit elements,
// which the validators see only as declarations, are bounded by their 2 bytes.
TEST(HostileInputs, ViewReachBoundedInBytes) {
  std::vector<float> pool(8, 1.0f);
  const TensorView<const float, 2> reach(pool.data(), {2, 8}, {std::int64_t{1} << 61, 1});
  const Status s = attnref::check_view(reach, "k_pages");
  EXPECT_EQ(s.code(), ErrorCode::kSizeOverflow) << s.to_string();
  EXPECT_NE(s.message().find("overflows int64 in bytes (4-byte elements)"), std::string::npos)
      << s.message();
  const TensorView<const float, 2> fits(pool.data(), {2, 8}, {std::int64_t{1} << 60, 1});
  EXPECT_TRUE(attnref::check_view(fits, "k_pages").ok());
  const TensorView<const Eigen::bfloat16, 1> bf16(nullptr, {2},
                                                  std::array<std::int64_t, 1>{kI64Max / 2});
  EXPECT_EQ(attnref::check_view(bf16, "q").code(), ErrorCode::kSizeOverflow);

  Paged p;
  p.args.k_pages.strides[0] = std::int64_t{1} << 61;  // the second KV head, 2^63 bytes away
  p.args.k_pages.buffer_size = -1;
  const Status paged = attnref::check_paged(p.args, attnref::Profile::kReference);
  EXPECT_EQ(paged.code(), ErrorCode::kSizeOverflow) << paged.to_string();
  EXPECT_EQ(p.run().code(), ErrorCode::kSizeOverflow);
  for (float x : p.out) EXPECT_EQ(x, -7.0f);
}

}  // namespace
