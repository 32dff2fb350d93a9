// SPDX-License-Identifier: Apache-2.0
// libFuzzer harness of the ragged family: fuzz bytes become a ragged-paged-attention call
// (decode, prefill and chunked-prefill sequences in one batch; shapes, strides, buffer sizes,
// KV layouts, page tables, kv_lens, cu_q_lens, num_seqs as a view or a host value, float,
// bfloat16, double, int8 or fp8 (e4m3fn, e5m2) pages with scales, int32 or int64 indices, sliding
// window, soft cap, sinks, ALiBi slopes, both ALiBi conventions and soft-cap orders and values no
// enumerator has, scale, mask value and the TPU knobs, executor), sometimes
// made hostile by a few mutations (extents, strides, buffer sizes, null data, page-table entries
// -1 / total_pages /
// INT32_MAX / huge, kv_lens, cu_q_lens decreasing / negative / past the token buffer, num_seqs
// negative or past max_num_seqs, options). Widened draws (the Wide byte, fuzz_common.hpp): no
// tokens and no pages next to head counts, head dims, page sizes or page-table widths past int32;
// thousands of KV heads; int64 kv_lens, cu_q_lens, page indices and num_seqs past int32 (with page
// sizes past int32 over a stride-0 pool, so such kv_lens can be valid); special window, scale, soft
// cap, mask value, k/v scale and block-size values.
//
// Every buffer the harness allocates holds exactly the elements its view's `buffer_size` claims
// (so AddressSanitizer sees any read past it) and at most 2^20 elements. Data is written only
// through views the validator accepted; everything the kernel must not read (padding, query rows
// past cu_q_lens[num_seqs], K/V slots past each kv_len, pages no live sequence owns, dead
// page-table entries) holds NaN or a hostile index.
//
// Invariants:
//  - check_ragged(jax) ok implies check_ragged(reference) ok (kJax only adds checks, and its
//    R16 looks at more kv_lens);
//  - the conventions (fuzz_common.hpp's check_conventions): kJax refuses any non-default value
//    (option_not_in_jax), kReference a value no enumerator has (invalid_convention), exactly
//    where the call with the defaults passes;
//  - try_ragged_paged_attention (and the throwing ragged_paged_attention) report exactly
//    check_ragged's error when that fails, then the output check's, and leave `out` untouched
//    on any error;
//  - on success every output element is written and finite (where the scores fit in the
//    accumulator type), rows past cu_q_lens[num_seqs] are 0, and the rest equal (within the
//    dtype's tolerance) the float64 oracle of tests/reference/ragged.hpp (spec §4.4), which
//    applies the same conventions;
//  - the data tier accepts NaN outside the live region and reports NaN injected inside it;
//  - every error renders (code name, message, hint);
//  - work proportional to input bytes: validation and the kernel stay within the BudgetScope
//    budget of the buffers behind the call (fuzz_common.hpp).
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include <attnref/core/executor.hpp>
#include <attnref/kernels/ragged_paged_attention.hpp>
#include <attnref/validate/ragged.hpp>

#include "fuzz_common.hpp"
#include "reference/ragged.hpp"

namespace {

using attnref::Profile;
using attnref::reference::to_double;
using namespace attnref_fuzz;  // the shared harness pieces (fuzz_common.hpp)

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

template <class Q, class KV, class Index>
void run_case(Reader& r, attnref_fuzz::Rng& rng, const Wide& w) {
  using Args = attnref::RaggedPagedAttentionArgs<Q, KV, Index>;
  using Acc = attnref::detail::AccumulatorOf<Q, KV>;
  constexpr bool kInt8 = std::is_same<KV, std::int8_t>::value;
  constexpr bool kFp8 = attnref::is_fp8_dtype<KV>;

  // --- a consistent call ---------------------------------------------------------------------
  std::int64_t max_seqs = r.range(0, 5);
  std::int64_t pps = r.range(0, 6);
  const bool big_pages = r.chance(20);  // > 128 tokens: the chunked path of the kernel
  std::int64_t page_size = big_pages ? r.range(100, 260) : r.range(1, 20);
  std::int64_t total_pages = big_pages ? r.range(0, 3) : r.range(0, 10);
  std::int64_t hkv = r.range(1, 3);
  std::int64_t hq = hkv * r.range(1, 5);
  if (r.chance(16)) hq = r.range(1, 9);  // often not a multiple of hkv
  std::int64_t dim = big_pages ? r.range(1, 12) : r.range(1, 40);
  bool stride0_slots = false;  // pool slot stride 0: a page size past int32 over a small pool
  bool no_tokens = false;
  if (w.many_heads()) {  // up to 2^12 KV heads over a few short sequences
    hkv = r.range(1, 1 << 12);
    hq = hkv * r.range(1, 2);
    dim = r.range(1, 4);
    max_seqs = r.range(0, 2);
    pps = r.range(0, 2);
    page_size = r.range(1, 4);
    total_pages = r.range(0, 3);
  }
  if (w.huge_zero()) {  // no tokens and no pages: every tensor is empty
    total_pages = 0;
    no_tokens = true;
    const std::uint8_t which = static_cast<std::uint8_t>(r.u8() | 1u << (r.u8() % 5));
    if (which & 1) hkv = huge_extent(r);
    if (which & 2) hq = r.flag() ? hkv : huge_extent(r);
    if (which & 4) dim = huge_extent(r);
    if (which & 8) page_size = huge_extent(r);
    if (which & 16) {  // a page table [0, huge]
      pps = huge_extent(r);
      max_seqs = 0;
    }
  }
  if (w.int64_meta() && sizeof(Index) == 8 && r.flag()) {  // kv_lens past int32 can be valid
    page_size = positive_past_int32(r);
    stride0_slots = true;
  }
  const std::int64_t capacity = sat_mul(pps, page_size);
  const std::int64_t n = r.range(0, max_seqs);
  const int layout = r.u8() % 3;  // padded row-major, head-major in memory, token-major padded
  const int executor_kind = r.u8() % 3;

  std::vector<std::int64_t> kv_lens(static_cast<size_t>(max_seqs), 0);
  std::vector<std::int64_t> cu(static_cast<size_t>(max_seqs + 1), 0);
  const std::int64_t dead = hostile_int(r, total_pages);
  for (std::int64_t i = 0; i < max_seqs; ++i) {
    std::int64_t kv_len = 0, q_len = 0;
    if (i < n && total_pages > 0 && capacity > 0) {
      // Short inputs run out of bytes (then every read is 0): the seeded rng picks instead.
      const std::int64_t kv_max = std::min<std::int64_t>(capacity, 300);
      const std::uint64_t pick = r.empty() ? rng.next() : r.u8();
      switch (pick % 5) {
        case 0:
          kv_len = capacity;  // (past int32 with stride0_slots)
          break;
        case 1:
          kv_len = std::min(capacity, sat_add(page_size, 1));
          break;
        default:
          kv_len =
              r.empty()
                  ? 1 + static_cast<std::int64_t>(rng.next() % static_cast<std::uint64_t>(kv_max))
                  : r.range(0, kv_max);
      }
      const std::int64_t q_max = std::min<std::int64_t>(kv_len, 40);
      switch ((r.empty() ? rng.next() : r.u8()) % 4) {
        case 0:
          q_len = std::min<std::int64_t>(1, q_max);
          break;  // decode
        case 1:
          q_len = q_max;
          break;  // prefill
        default:  // chunked prefill
          q_len =
              r.empty()
                  ? static_cast<std::int64_t>(rng.next() % static_cast<std::uint64_t>(q_max + 1))
                  : r.range(0, q_max);
      }
    } else if (i >= n) {
      kv_len = r.flag() ? dead : r.range(0, 8);  // padding rows: any value
    }
    kv_lens[static_cast<size_t>(i)] = kv_len;
    cu[static_cast<size_t>(i + 1)] =
        i < n ? cu[static_cast<size_t>(i)] + q_len : (r.flag() ? dead : cu[static_cast<size_t>(i)]);
  }
  const std::int64_t live_rows = cu[static_cast<size_t>(n)];
  const std::int64_t tokens = no_tokens ? 0 : live_rows + r.range(0, 3);
  std::vector<std::int64_t> table(static_cast<size_t>(max_seqs * pps), dead);
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t j = 0; j < pps && sat_mul(j, page_size) < kv_lens[static_cast<size_t>(i)];
         ++j)
      table[static_cast<size_t>(i * pps + j)] = r.range(0, total_pages - 1);
  std::int64_t num_seqs = n;

  Geometry<3> q_g = attnref_fuzz::layout3(r, tokens, hq, dim);  // or head-major: [Hq, T, D]
  Geometry<4> kv_g;
  kv_g.extents = {total_pages, page_size, sat_mul(2, hkv), dim};
  if (layout == 1) {  // [2*Hkv, P, S, D] in memory
    const std::int64_t row = sat_add(dim, r.range(0, 2));
    kv_g.strides = {sat_mul(page_size, row), row,
                    sat_mul(sat_mul(std::max<std::int64_t>(total_pages, 1), page_size), row), 1};
  } else {
    kv_g.strides = padded_strides<4>(kv_g.extents, layout == 2 ? r.range(0, 3) : 0);
  }
  if (stride0_slots) kv_g.strides[1] = 0;  // every slot of a page is the same element
  Geometry<1> len_g, cu_g, ns_g;
  len_g.extents = {max_seqs};
  len_g.strides = {r.range(1, 2)};
  cu_g.extents = {max_seqs + 1};
  cu_g.strides = {r.range(1, 2)};
  ns_g.extents = {1};
  ns_g.strides = {1};
  Geometry<2> pi_g;
  pi_g.extents = {max_seqs, pps};
  pi_g.strides = padded_strides<2>(pi_g.extents, r.range(0, 2));
  q_g.unknown_size = r.chance(40);
  kv_g.unknown_size = r.chance(40);

  Args a;
  const int num_seqs_mode = r.u8() % 8;  // 0..4: view, 5..6: host value, 7: both
  a.sm_scale = r.chance(200) ? static_cast<float>(r.range(1, 16)) / 8.0f : hostile_real(r);
  if (r.chance(90)) a.sliding_window = r.chance(180) ? r.range(1, 40) : hostile_int(r, 8);
  if (r.chance(90))
    a.soft_cap = r.chance(200) ? static_cast<float>(r.range(1, 40)) : hostile_real(r);
  if (r.chance(30)) a.mask_value = hostile_real(r);
  if (kInt8 || kFp8 ? r.chance(230) : r.chance(30)) {
    a.k_scale = r.chance(220) ? static_cast<float>(r.range(1, 8)) / 64.0f : hostile_real(r);
    a.v_scale = r.chance(220) ? static_cast<float>(r.range(1, 8)) / 64.0f : hostile_real(r);
  }
  if (r.chance(60))
    a.num_kv_pages_per_block =
        r.chance(200) ? r.range(1, std::max<std::int64_t>(pps, 1)) : hostile_int(r, pps);
  if (r.chance(60)) a.num_queries_per_block = r.chance(200) ? r.range(1, 64) : hostile_int(r, 32);
  if (r.chance(60)) a.vmem_limit_bytes = r.chance(200) ? std::int64_t{1} << 25 : hostile_int(r, 1);
  if (w.special_options()) {
    const std::uint8_t which = r.u8();
    if (which & 1) a.sliding_window = special_int(r, 8);
    if (which & 2) a.sm_scale = special_real(r);
    if (which & 4) a.soft_cap = special_real(r);
    if (which & 8) a.mask_value = special_real(r);
    if (which & 16) (r.flag() ? a.k_scale : a.v_scale) = special_real(r);
    if (which & 32) a.num_kv_pages_per_block = special_int(r, pps);
    if (which & 64) a.num_queries_per_block = special_int(r, 32);
    if (which & 128) a.vmem_limit_bytes = special_int(r, 1);
  }

  // --- hostile mutations ---------------------------------------------------------------------
  const int mutations = r.u8() % 4 == 0 ? static_cast<int>(r.range(1, 3)) : 0;
  for (int m = 0; m < mutations; ++m) {
    const int target = r.u8() % 18;
    if (target < 6) {
      attnref_fuzz::mutate_nth(r, target, -1, mutation_target(q_g, dim),
                               mutation_target(kv_g, page_size), mutation_target(len_g, max_seqs),
                               mutation_target(pi_g, pps), mutation_target(cu_g, max_seqs + 1),
                               mutation_target(ns_g, 1));
      continue;
    }
    switch (target) {
      case 6:
      case 7:
        if (!kv_lens.empty())
          kv_lens[static_cast<size_t>(r.range(0, max_seqs - 1))] = hostile_int(r, capacity);
        break;
      case 8:
      case 9: {  // decreasing, negative, past the token buffer
        const size_t i = static_cast<size_t>(r.range(0, max_seqs));
        cu[i] = r.flag() ? sat_add(std::max(cu[i], -(std::int64_t{1} << 62)), -r.range(1, 3))
                         : hostile_int(r, tokens);
        break;
      }
      case 10:
      case 11:
        if (!table.empty())
          table[static_cast<size_t>(r.range(0, max_seqs * pps - 1))] =
              r.flag() ? hostile_int(r, total_pages) : (r.flag() ? -1 : total_pages);
        break;
      case 12:
        num_seqs = hostile_int(r, max_seqs);
        break;
      case 13:
        a.sm_scale = hostile_real(r);
        break;
      case 14:
        a.soft_cap = hostile_real(r);
        break;
      case 15:
        a.sliding_window = hostile_int(r, 4);
        break;
      case 16:
        (r.flag() ? a.k_scale : a.v_scale) = hostile_real(r);
        break;
      default:
        a.mask_value = hostile_real(r);
        break;
    }
  }

  if (w.int64_meta() && sizeof(Index) == 8) {  // metadata past int32
    const std::uint8_t which = r.u8();
    if ((which & 1) && !kv_lens.empty())
      kv_lens[static_cast<size_t>(r.range(0, max_seqs - 1))] = past_int32(r);
    if (which & 2) cu[static_cast<size_t>(r.range(0, max_seqs))] = past_int32(r);
    if ((which & 4) && !table.empty())
      table[static_cast<size_t>(r.range(0, max_seqs * pps - 1))] = past_int32(r);
    if (which & 8) num_seqs = r.flag() ? past_int32(r) : -past_int32(r);
  }

  // Engine features, drawn last: sinks (finite: a NaN sink is bad data, which the output check
  // below does not expect) and ALiBi slopes (sometimes hostile: the metadata tier refuses them;
  // small, so the bias keeps the logits in the range the comparison below is sized for).
  Buffer<float, 1> sinks, slopes;
  if (draw_head_values(r, rng, hq, 1.0f, false, &sinks)) a.sinks = sinks.cview();
  if (draw_head_values(r, rng, hq, 1.0f / 16, true, &slopes)) a.alibi_slopes = slopes.cview();
  draw_conventions(r, &a);

  // --- buffers -------------------------------------------------------------------------------
  Buffer<Q, 3> q;
  make_buffer(q_g, static_cast<Q>(kNaN), &q);
  KV kv_poison{};
  if constexpr (kInt8)
    kv_poison = KV(127);
  else if constexpr (kFp8)
    kv_poison = KV{0xFF};  // NaN in both fp8 formats
  else
    kv_poison = static_cast<KV>(kNaN);
  Buffer<KV, 4> kv;
  make_buffer(kv_g, kv_poison, &kv);
  auto narrow = [](std::int64_t x) {
    constexpr std::int64_t lo = std::numeric_limits<Index>::min();
    constexpr std::int64_t hi = std::numeric_limits<Index>::max();
    return static_cast<Index>(x < lo ? lo : x > hi ? hi : x);
  };
  // Index values go in through the geometry the harness built, bounded by the allocation: a
  // mutated view may then show the validator anything (that is the point).
  Buffer<Index, 1> len_b, cu_b, ns_b;
  Buffer<Index, 2> pi_b;
  make_buffer(len_g, narrow(dead), &len_b);
  make_buffer(cu_g, narrow(dead), &cu_b);
  make_buffer(ns_g, narrow(dead), &ns_b);
  make_buffer(pi_g, narrow(dead), &pi_b);
  for (std::int64_t i = 0; i <= max_seqs; ++i) {
    const std::int64_t o = safe_offset(cu_g, {i}, cu_b.size);
    if (o >= 0) cu_b.data[static_cast<size_t>(o)] = narrow(cu[static_cast<size_t>(i)]);
  }
  for (std::int64_t i = 0; i < max_seqs; ++i) {
    const std::int64_t o = safe_offset(len_g, {i}, len_b.size);
    if (o >= 0) len_b.data[static_cast<size_t>(o)] = narrow(kv_lens[static_cast<size_t>(i)]);
    for (std::int64_t j = 0; j < pps; ++j) {
      const std::int64_t p = safe_offset(pi_g, {i, j}, pi_b.size);
      if (p >= 0)
        pi_b.data[static_cast<size_t>(p)] = narrow(table[static_cast<size_t>(i * pps + j)]);
    }
  }
  {
    const std::int64_t o = safe_offset(ns_g, {0}, ns_b.size);
    if (o >= 0) ns_b.data[static_cast<size_t>(o)] = narrow(num_seqs);
  }
  a.q = q.cview();
  // JAX's combined pool becomes the K and V views through the library's helper, which checks
  // R12 and the pool view; the views are only made when it passes.
  DataSize data;
  data.add(q).add(kv).add(len_b).add(cu_b).add(ns_b).add(pi_b).add(sinks).add(slopes);
  Status split;
  {
    BudgetScope budget("ragged_kv_views", data);
    split = attnref::ragged_kv_views(kv.cview(), &a.k_pages, &a.v_pages);
  }
  attnref_fuzz::check_error_renders(split);
  a.kv_lens = len_b.cview();
  a.page_indices = pi_b.cview();
  a.cu_q_lens = cu_b.cview();
  if (num_seqs_mode <= 4 || num_seqs_mode == 7) a.num_seqs = ns_b.cview();
  if (num_seqs_mode >= 5) a.num_seqs_value = num_seqs;

  // --- validate ------------------------------------------------------------------------------
  // A stride-0 page table of 2^62 columns lets a hostile kv_len pass R16; the metadata tier
  // then reads kv_len / page_size entries, as documented (O(live pages)). That is the
  // caller's cost, not a hang to report.
  if (pi_g.extents[1] > (std::int64_t{1} << 20) && pi_g.strides[1] == 0) return;
  if (!split.ok()) return;  // no views to check or run
  Status jax, ref;
  {
    BudgetScope budget("check_ragged", data);
    jax = attnref::check_ragged(a, Profile::kJax);
    ref = attnref::check_ragged(a, Profile::kReference);
    check_conventions(a, jax, ref,
                      [](const Args& x, Profile p) { return attnref::check_ragged(x, p); });
  }
  attnref_fuzz::check_error_renders(jax);
  attnref_fuzz::check_error_renders(ref);
  ATTNREF_FUZZ_CHECK(!jax.ok() || ref.ok(),
                     "jax profile accepted what reference rejected: " + ref.to_string());
  if (std::getenv("ATTNREF_FUZZ_VERBOSE") != nullptr)
    std::fprintf(stderr, "status: %s\n", attnref::error_code_name(ref.code()));
  const bool throwing = r.chance(40);

  // try_* (or the throwing entry point) with the fuzz-chosen executor.
  auto run_kernel = [&](TensorView<Q, 3> out, const DataSize& with_out) -> Status {
    BudgetScope budget("ragged_paged_attention", with_out);
    auto call = [&](auto&& exec) -> Status {
      if (!throwing) return attnref::try_ragged_paged_attention(a, out, exec);
      try {
        attnref::ragged_paged_attention(a, out, exec);
      } catch (const attnref::ShapeError& e) {
        return e.status();
      }
      return Status();
    };
    switch (executor_kind) {
      case 0:
        return call(counted(attnref::SerialExecutor{}));
      case 1:
        return call(counted(ClaimedConcurrency{static_cast<int>(1 + rng.next() % 8)}));
      default:
        return call(counted(PoolRef{}));
    }
  };

  if (!ref.ok()) {
    // The kernel must report the same error and not touch out.
    Q sentinel = static_cast<Q>(1.5f);
    const Status s = run_kernel(TensorView<Q, 3>(&sentinel, a.q.extents, {0, 0, 0}, 1),
                                DataSize(data).add_raw(1, sizeof(Q)));
    attnref_fuzz::check_error_renders(s);
    ATTNREF_FUZZ_CHECK(s.code() == ref.code(),
                       "kernel: " + s.to_string() + " vs " + ref.to_string());
    ATTNREF_FUZZ_CHECK(sentinel == static_cast<Q>(1.5f), "out written on error");
    return;
  }

  // --- bounded work --------------------------------------------------------------------------
  // Stride-0 views can describe far more than their buffers hold; the harness only runs what
  // it can compare in well under a second.
  const std::int64_t T = a.max_num_batched_tokens(), HQ = a.num_q_heads(), D = a.head_dim();
  const std::int64_t S = a.page_size(), HKV = a.num_kv_heads(), N = a.num_seqs_count();
  const std::int64_t rows = a.cu_q_lens(N);
  if (N > 64 || (D > 4096 && T != 0)) return;  // (no tokens: runs whatever the extents)
  // The first key some row of sequence i sees (kv_len when it has no rows): the kernel and the
  // float64 reference read [first_key(i), kv_len) only, so a window of a few keys at the end of
  // a huge stride-0 page runs (it once walked the whole page: test_bounded_work).
  const auto first_key = [&](std::int64_t i) -> std::int64_t {
    const std::int64_t q_len = a.cu_q_lens(i + 1) - a.cu_q_lens(i), kv_len = a.kv_lens(i);
    if (q_len <= 0) return kv_len;
    const std::int64_t lo = a.sliding_window ? kv_len - q_len - *a.sliding_window + 1 : 0;
    return std::max<std::int64_t>(lo, 0);
  };
  constexpr std::int64_t kMaxWork = std::int64_t{1} << 21;
  std::int64_t work = sat_mul(sat_mul(T, HQ), D), scan = 0;
  for (std::int64_t i = 0; i < N; ++i) {
    const std::int64_t q_len = a.cu_q_lens(i + 1) - a.cu_q_lens(i);
    const std::int64_t kv_len = a.kv_lens(i), keys = kv_len - first_key(i);
    work = sat_add(work, sat_mul(sat_mul(sat_add(q_len, 1), sat_add(keys, 1)), sat_mul(HQ, D + 1)));
    work = sat_add(work, sat_mul(keys, sat_mul(2 * HKV, D)));
    scan = sat_add(scan, sat_mul(kv_len, sat_mul(2 * HKV, D)));
  }
  if (work > kMaxWork) return;
  // The data tier scans every key of [0, kv_len), also before a window (JAX's kernel reads
  // them): it, and the values it would scan, only when that is small too.
  const bool scan_all = scan <= kMaxWork;

  // --- data: finite values in the live region only --------------------------------------------
  for (std::int64_t t = 0; t < rows; ++t)
    for (std::int64_t h = 0; h < HQ; ++h)
      for (std::int64_t d = 0; d < D; ++d) q.view(t, h, d) = static_cast<Q>(rng.small());
  const bool scaled_int8 = kInt8 && a.k_scale && a.v_scale;
  auto kv_value = [&]() -> KV {
    if constexpr (kInt8) {
      return static_cast<KV>(scaled_int8 ? static_cast<int>(rng.next() % 255) - 127
                                         : static_cast<int>(rng.next() % 33) - 16);
    } else if constexpr (kFp8) {  // a finite code of magnitude at most 4
      for (;;) {
        const KV x{static_cast<std::uint8_t>(rng.next() % 256)};
        if (x.is_finite() && std::fabs(x.to_float()) <= 4.0f) return x;
      }
    } else {
      return static_cast<KV>(rng.small());
    }
  };
  for (std::int64_t i = 0; i < N; ++i)
    for (std::int64_t t = scan_all ? 0 : first_key(i); t < a.kv_lens(i); ++t) {
      const std::int64_t page = a.page_indices(i, t / S);
      for (std::int64_t c = 0; c < 2 * HKV; ++c)
        for (std::int64_t d = 0; d < D; ++d) kv.view(page, t % S, c, d) = kv_value();
    }
  if (scan_all) {
    BudgetScope budget("check_ragged_data", data);
    attnref_fuzz::check_accepts_finite(attnref::check_ragged_data(a));
  }
  bool poisoned = false;
  if (scan_all && r.chance(25)) {  // NaN or Inf inside the live region: the data tier must see it
    const float bad = r.flag() ? kNaN : std::numeric_limits<float>::infinity();
    if (rows > 0 && r.flag()) {
      q.view(r.range(0, rows - 1), r.range(0, HQ - 1), r.range(0, D - 1)) = static_cast<Q>(bad);
      poisoned = true;
    } else if constexpr (!kInt8) {
      for (std::int64_t i = 0; i < N && !poisoned; ++i) {
        if (a.kv_lens(i) == 0) continue;
        const std::int64_t t = r.range(0, a.kv_lens(i) - 1);
        KV code{};
        if constexpr (kFp8) {  // a NaN code, or e5m2's infinity
          code =
              KV{static_cast<std::uint8_t>(std::isnan(bad)                                 ? 0xFF
                                           : std::is_same<KV, attnref::float8_e5m2>::value ? 0x7C
                                                                                           : 0x7F)};
        } else {
          code = static_cast<KV>(bad);
        }
        kv.view(a.page_indices(i, t / S), t % S, r.range(0, 2 * HKV - 1), r.range(0, D - 1)) = code;
        poisoned = true;
      }
    }
    if (poisoned) {
      attnref_fuzz::check_reports_non_finite(attnref::check_ragged_data(a));
    }
  }

  // --- output buffer, sized from the validated q ----------------------------------------------
  const Geometry<3> out_g = attnref_fuzz::output_geometry<3>(r, a.q.extents, 20);
  if (std::getenv("ATTNREF_FUZZ_VERBOSE") != nullptr) {
    std::fprintf(stderr,
                 "T=%lld Hq=%lld Hkv=%lld D=%lld S=%lld P=%lld pps=%lld n=%lld window=%lld cap=%g "
                 "scale=%g exec=%d alibi=%d order=%d slopes=%d\n",
                 static_cast<long long>(T), static_cast<long long>(HQ), static_cast<long long>(HKV),
                 static_cast<long long>(D), static_cast<long long>(S),
                 static_cast<long long>(a.total_pages()), static_cast<long long>(a.pages_per_seq()),
                 static_cast<long long>(N), static_cast<long long>(a.sliding_window.value_or(0)),
                 static_cast<double>(a.soft_cap.value_or(0.0f)), static_cast<double>(a.sm_scale),
                 executor_kind, static_cast<int>(a.alibi_convention),
                 static_cast<int>(a.soft_cap_order), a.alibi_slopes.empty_view() ? 0 : 1);
    for (std::int64_t i = 0; i < N; ++i)
      std::fprintf(stderr, "seq %lld: rows [%lld, %lld) kv_len %lld\n", static_cast<long long>(i),
                   static_cast<long long>(a.cu_q_lens(i)),
                   static_cast<long long>(a.cu_q_lens(i + 1)),
                   static_cast<long long>(a.kv_lens(i)));
  }
  Buffer<Q, 3> out;
  make_buffer(out_g, static_cast<Q>(kNaN), &out);
  const std::vector<Q> before = attnref_fuzz::snapshot(out);
  const Status expected = attnref_fuzz::output_status(out.view, a.q.extents, "out");
  const Status s = run_kernel(out.view, DataSize(data).add(out));
  attnref_fuzz::check_error_renders(s);
  ATTNREF_FUZZ_CHECK(s.code() == expected.code(),
                     "kernel vs output check: " + s.to_string() + " vs " + expected.to_string());
  if (!s.ok()) {
    ATTNREF_FUZZ_CHECK(attnref_fuzz::unchanged(out, before), "out written on error");
    return;
  }
  if (poisoned || T == 0) return;  // NaN in, NaN out; or nothing to compare

  // --- float64 reference (spec §4.4) ------------------------------------------------------------
  attnref::reference::RaggedBounds bounds;
  const std::vector<double> reference = attnref::reference::ragged_paged_attention(a, &bounds);
  constexpr double kEps = std::is_same<Acc, double>::value ? 0x1p-52 : 0x1p-23;
  const double tol_base = (std::is_same<Acc, double>::value ? 1e-10 : 1e-4) + 2.0 * store_eps<Q>();
  std::int64_t compared = 0;  // elements compared with float64 (ATTNREF_FUZZ_VERBOSE reports)
  for (std::int64_t t = rows; t < T; ++t)
    for (std::int64_t h = 0; h < HQ; ++h)
      for (std::int64_t d = 0; d < D; ++d)
        ATTNREF_FUZZ_CHECK(to_double(out.view(t, h, d)) == 0.0,
                           "padding row not zero: t=" + std::to_string(t));
  for (std::int64_t i = 0; i < N; ++i) {
    const std::int64_t row0 = a.cu_q_lens(i), q_len = a.cu_q_lens(i + 1) - row0;
    for (std::int64_t r_ = 0; r_ < q_len; ++r_) {
      for (std::int64_t qh = 0; qh < HQ; ++qh) {
        const size_t row = static_cast<size_t>((row0 + r_) * HQ + qh);
        const double mag = bounds.logit_mag[row], vmax = bounds.v_max[row];
        // Scores (or scaled V) past the accumulator's range overflow in the kernel, as in
        // JAX's f32 kernel (a huge k_scale / v_scale is finite, hence valid): only "no crash"
        // is asked of those. q . k is formed before sm_scale, so a tiny sm_scale does not
        // save a dot product that overflows (terms of +-inf give a NaN logit).
        if (!(mag <= 1e30) || !(bounds.dot_mag[row] <= 1e30) || !(vmax <= 1e30)) continue;
        const double delta = mag * kEps * static_cast<double>(D + 4);
        for (std::int64_t d = 0; d < D; ++d) {
          const size_t at = row * static_cast<size_t>(D) + static_cast<size_t>(d);
          const double want = reference[at], lo = bounds.lo[at], hi = bounds.hi[at];
          const double got = to_double(out.view(row0 + r_, qh, d));
          const std::string where = "seq " + std::to_string(i) + " row " + std::to_string(r_) +
                                    " qh " + std::to_string(qh) + " d " + std::to_string(d) +
                                    " got " + std::to_string(got) + " want " + std::to_string(want);
          ATTNREF_FUZZ_CHECK(std::isfinite(got), "non-finite output for finite inputs: " + where);
          const double span = std::max(std::fabs(lo), std::fabs(hi));
          const double slack = tol_base * (1.0 + span);
          ATTNREF_FUZZ_CHECK(got >= lo - slack && got <= hi + slack,
                             "output outside the range of V: " + where);
          if (delta < 1e-2) {
            ATTNREF_FUZZ_CHECK(std::fabs(got - want) <= (tol_base + 4.0 * delta) * (1.0 + span),
                               "output differs from float64: " + where);
            ++compared;
          }
        }
      }
    }
  }
  if (std::getenv("ATTNREF_FUZZ_VERBOSE") != nullptr)
    std::fprintf(stderr, "compared %lld elements with float64\n", static_cast<long long>(compared));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static constexpr attnref_fuzz::CaseFn kCases[] = {
      run_case<float, float, std::int32_t>,
      run_case<float, float, std::int64_t>,
      run_case<float, Eigen::bfloat16, std::int32_t>,
      run_case<float, std::int8_t, std::int32_t>,
      run_case<double, double, std::int64_t>,
      run_case<Eigen::bfloat16, Eigen::bfloat16, std::int32_t>,
      run_case<float, attnref::float8_e4m3fn, std::int32_t>,
      run_case<Eigen::bfloat16, attnref::float8_e5m2, std::int64_t>,
  };
  return attnref_fuzz::run_one(data, size, kCases);
}
