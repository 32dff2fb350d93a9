// SPDX-License-Identifier: Apache-2.0
// libFuzzer harness of the paged family: fuzz bytes become a paged-attention call (shapes,
// strides, buffer sizes, page tables, lengths, KV layouts, float or int8 pages with scales, fp8
// (e4m3fn, e5m2) pages with or without scales (NaN codes where nothing reads), int32 or int64
// indices, soft cap / mask value / scale, sliding window (keys before it NaN), sinks, ALiBi
// slopes, both ALiBi conventions and soft-cap orders and values no enumerator has, MLA's V
// narrower than K (a view of K's memory, or a buffer of its own), executor), sometimes made
// hostile by a few mutations (extents, strides, buffer sizes, null data, page indices, lengths,
// options).
// Widened draws (the Wide byte, fuzz_common.hpp): an empty batch and no pages next to huge head
// counts, head dims, page sizes or page-table widths; thousands of heads; int64 lengths and page
// indices past int32 (with page sizes past int32 over a stride-0 pool, so such lengths can be
// valid); special scale / soft cap / mask value and pages_per_compute_block values.
//
// Every buffer the harness allocates holds exactly the elements its view's `buffer_size` claims
// (so AddressSanitizer sees any read past it) and at most 2^20 elements (the harness stays far
// under 64 MiB). Data is written only through views the validator accepted; everything the
// kernel must not read (padding, rows past lengths, unused pages, dead page-table entries) holds
// NaN or a hostile index.
//
// Invariants:
//  - check_paged(jax) ok implies check_paged(reference) ok;
//  - the conventions (fuzz_common.hpp's check_conventions): kJax refuses any non-default value
//    (option_not_in_jax), kReference a value no enumerator has (invalid_convention), exactly
//    where the call with the defaults passes; a V narrower (or wider) than K is P1 under kJax;
//  - try_paged_attention returns exactly check_paged's error when that fails, and leaves `out`
//    untouched on any error;
//  - on success every output element ([batch, num_q_heads, head_dim_v]) is written, finite, and
//    equal (within float tolerance) to the float64 oracle of tests/reference/paged.hpp, which
//    applies the same conventions and head_dim_v;
//  - the data tier accepts NaN outside the used region and reports NaN injected inside it;
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
#include <vector>

#include <attnref/core/executor.hpp>
#include <attnref/core/kv_layout.hpp>
#include <attnref/kernels/paged_attention.hpp>
#include <attnref/validate/paged.hpp>

#include "fuzz_common.hpp"
#include "reference/paged.hpp"

namespace {

using namespace attnref_fuzz;  // the shared harness pieces (fuzz_common.hpp)

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

/// MLA's V (kReference only), drawn last of all from one byte (0, or an input that ends before
/// it: V as wide as K). Bit 0 narrows V: head_dim_v in [1, K's head_dim) (1 in 16 hostile: 0,
/// negative, wider than K, huge); bits 1-2 say where V lives: 0 or 1 a view of K's own memory
/// (MLA's latent cache), 2 a buffer of its own with K's strides (the columns past head_dim_v
/// hold NaN), 3 packed rows; bits 3-4 both set keep per-element V scales K's width (a
/// scales_shape error); bits 5-6 both set give the output q's shape (an output error).
struct NarrowV {
  bool alias_k = false;  // V is a view of K's buffer
  bool out_like_q = false;
};

NarrowV draw_narrow_v(Reader& r, const Geometry<4>& k_g, bool scale_per_element, bool stride0_slots,
                      Geometry<4>* v_g, Geometry<4>* vs_g) {
  NarrowV n;
  const unsigned bits = r.u8();
  if ((bits & 1u) == 0) return n;
  const std::int64_t dim = k_g.extents[3];
  const std::int64_t dim_v = r.chance(16) ? hostile_int(r, dim) : r.range(1, dim > 1 ? dim - 1 : 1);
  const unsigned memory = (bits >> 1) & 3u;
  if (!v_g->mutated && memory <= 1) {
    *v_g = k_g;
    n.alias_k = true;
  } else if (!v_g->mutated && memory == 3) {
    v_g->strides = padded_strides<4>({v_g->extents[0], v_g->extents[1], v_g->extents[2], dim_v}, 0);
    if (stride0_slots) v_g->strides[2] = 0;
  }
  v_g->extents[3] = dim_v;
  if (scale_per_element && ((bits >> 3) & 3u) != 3u && !vs_g->mutated) vs_g->extents[3] = dim_v;
  n.out_like_q = ((bits >> 5) & 3u) == 3u;
  return n;
}

template <class KV, class Index>
void run_case(Reader& r, attnref_fuzz::Rng& rng, const Wide& w) {
  using Args = attnref::PagedAttentionArgs<float, KV, Index>;
  constexpr bool kQuant = Args::kQuantized;
  constexpr bool kFp8 = Args::kFp8;
  constexpr std::int64_t kIndexMax = std::numeric_limits<Index>::max();

  // --- a consistent call -------------------------------------------------------------------
  std::int64_t batch = r.range(0, 4);
  std::int64_t hkv = r.range(1, 3);
  std::int64_t group = r.range(1, 4);
  std::int64_t dim = r.range(1, 40);
  std::int64_t page_size = r.range(1, 20);
  std::int64_t pps = r.range(0, 6);
  std::int64_t total_pages = r.range(0, 10);
  bool stride0_slots = false;  // K/V slot stride 0: a page size past int32 over a small pool
  if (w.many_heads()) {        // up to 2^12 KV heads, q and pages still small
    hkv = r.range(1, 1 << 12);
    group = r.range(1, 4);
    dim = r.range(1, 4);
    page_size = r.range(1, 4);
    total_pages = r.range(0, 3);
    batch = r.range(0, 2);
    pps = r.range(0, 3);
  }
  if (w.huge_zero()) {  // an empty batch and no pages: every tensor is empty
    batch = 0;
    total_pages = 0;
    const std::uint8_t which = static_cast<std::uint8_t>(r.u8() | 1u << (r.u8() % 5));
    if (which & 1) hkv = huge_extent(r);
    if (which & 2) dim = huge_extent(r);
    if (which & 4) page_size = huge_extent(r);
    if (which & 8) pps = huge_extent(r);
    if (which & 16) group = huge_extent(r);
  }
  if (w.int64_meta() && sizeof(Index) == 8 && r.flag()) {  // lengths past int32 can be valid
    page_size = positive_past_int32(r);
    stride0_slots = true;
  }
  const std::int64_t hq = sat_mul(hkv, group);
  const std::int64_t capacity = sat_mul(pps, page_size);
  const int layout = r.u8() % 4;  // jax, nhd, hnd, padded custom
  const bool scale_per_element = r.flag();
  const int executor_kind = r.u8() % 3;

  std::vector<std::int64_t> lengths(static_cast<size_t>(batch));
  for (auto& len : lengths) {
    if (total_pages == 0 || capacity == 0) {
      len = 0;
    } else {
      switch (r.u8() % 6) {
        case 0:
          len = stride0_slots ? capacity - r.range(0, 2) : 0;
          break;
        case 1:
          len = capacity;
          break;
        case 2:
          len = std::min(capacity, page_size);
          break;
        case 3:
          len = std::min(capacity, sat_add(page_size, 1));
          break;
        default:
          len = r.range(0, capacity);
      }
    }
  }
  const std::int64_t dead_entry = attnref_fuzz::hostile_int(r, total_pages);
  std::vector<std::int64_t> table(static_cast<size_t>(batch * pps), dead_entry);
  for (std::int64_t b = 0; b < batch; ++b)
    for (std::int64_t j = 0; j < pps && sat_mul(j, page_size) < lengths[static_cast<size_t>(b)];
         ++j)
      table[static_cast<size_t>(b * pps + j)] = r.range(0, total_pages - 1);

  Geometry<3> q_g;
  q_g.extents = {batch, hq, dim};
  q_g.strides = padded_strides<3>(q_g.extents, r.range(0, 3));
  Geometry<4> k_g, v_g, ks_g, vs_g;
  if (layout < 3) {
    const auto lay = static_cast<attnref::KvLayout>(layout);
    const auto kv =
        attnref::kv_pages_view<const KV>(nullptr, lay, hkv, total_pages, page_size, dim);
    k_g.extents = kv.extents;
    k_g.strides = kv.strides;
    const std::int64_t last = scale_per_element ? dim : 1;
    const auto sv =
        attnref::kv_pages_view<const float>(nullptr, lay, hkv, total_pages, page_size, last);
    ks_g.extents = sv.extents;
    ks_g.strides = sv.strides;
  } else {  // head-major with padding between rows and pages
    k_g.extents = {hkv, total_pages, page_size, dim};
    k_g.strides = padded_strides<4>(k_g.extents, r.range(0, 5));
    ks_g.extents = {hkv, total_pages, page_size, scale_per_element ? dim : 1};
    ks_g.strides = padded_strides<4>(ks_g.extents, r.range(0, 2));
  }
  if (stride0_slots) {  // every slot of a page is the same element
    k_g.strides[2] = 0;
    ks_g.strides[2] = 0;
  }
  v_g = k_g;
  vs_g = ks_g;
  Geometry<1> len_g;
  len_g.extents = {batch};
  len_g.strides = {r.range(1, 2)};
  Geometry<2> pi_g;
  pi_g.extents = {batch, pps};
  pi_g.strides = padded_strides<2>(pi_g.extents, r.range(0, 2));
  q_g.unknown_size = r.chance(40);
  k_g.unknown_size = v_g.unknown_size = r.chance(40);

  Args a;
  a.sm_scale =
      r.chance(200) ? static_cast<float>(r.range(1, 16)) / 8.0f : attnref_fuzz::hostile_real(r);
  if (r.flag())
    a.soft_cap = r.chance(200) ? static_cast<float>(r.range(1, 40)) : attnref_fuzz::hostile_real(r);
  if (r.chance(30)) a.mask_value = attnref_fuzz::hostile_real(r);
  a.pages_per_compute_block = r.chance(200) ? r.range(1, 3) : attnref_fuzz::hostile_int(r, pps);
  a.round_kv_to_bf16 = r.chance(40);
  a.megacore_mode = static_cast<attnref::MegacoreMode>(r.range(0, 3));
  if (w.special_options()) {
    const std::uint8_t which = r.u8();
    if (which & 1) a.sm_scale = special_real(r);
    if (which & 2) a.soft_cap = special_real(r);
    if (which & 4) a.mask_value = special_real(r);
    if (which & 8) a.pages_per_compute_block = special_int(r, pps);
  }
  bool give_k_scales = kQuant, give_v_scales = kQuant;
  if (kFp8) give_k_scales = give_v_scales = r.flag();  // optional: scale 1.0 without
  if (r.chance(20)) give_k_scales = !give_k_scales;
  if (r.chance(20)) give_v_scales = !give_v_scales;

  // --- hostile mutations -------------------------------------------------------------------
  const int mutations = r.u8() % 4 == 0 ? static_cast<int>(r.range(1, 3)) : 0;
  for (int m = 0; m < mutations; ++m) {
    const int target = r.u8() % 15;
    const int field = r.u8() % 6;  // read for every target: the corpus decodes this way
    if (target < 7) {
      attnref_fuzz::mutate_nth(r, target, field, mutation_target(q_g, dim),
                               mutation_target(k_g, page_size), mutation_target(v_g, page_size),
                               mutation_target(len_g, batch), mutation_target(pi_g, pps),
                               mutation_target(ks_g, dim), mutation_target(vs_g, dim));
      continue;
    }
    switch (target) {
      case 7:
      case 8:
        if (!lengths.empty()) {
          lengths[static_cast<size_t>(r.range(0, batch - 1))] =
              attnref_fuzz::hostile_int(r, capacity);
        }
        break;
      case 9:
      case 10:
        if (!table.empty()) {
          table[static_cast<size_t>(r.range(0, batch * pps - 1))] =
              attnref_fuzz::hostile_int(r, total_pages);
        }
        break;
      case 11:
        a.sm_scale = attnref_fuzz::hostile_real(r);
        break;
      case 12:
        a.soft_cap = attnref_fuzz::hostile_real(r);
        break;
      case 13: {  // K, V (and their scales) together, so P1 (same shape) still holds
        const size_t i = static_cast<size_t>(r.u8() % 3);
        const std::int64_t x = attnref_fuzz::hostile_int(r, page_size);
        for (Geometry<4>* g : {&k_g, &v_g, &ks_g, &vs_g}) {
          g->extents[i] = x;
          g->mutated = true;
        }
        break;
      }
      default:
        a.mask_value = attnref_fuzz::hostile_real(r);
        break;
    }
  }

  if (w.int64_meta() && sizeof(Index) == 8) {  // lengths and page indices past int32
    const std::uint8_t which = r.u8();
    if ((which & 1) && !lengths.empty())
      lengths[static_cast<size_t>(r.range(0, batch - 1))] = past_int32(r);
    if ((which & 2) && !table.empty())
      table[static_cast<size_t>(r.range(0, batch * pps - 1))] = past_int32(r);
  }

  // Engine features, drawn last: a sliding window, sinks and ALiBi slopes (finite sinks: a NaN
  // sink is bad data, which the output check below does not expect; slopes may be hostile, the
  // metadata tier refuses those). Slopes stay small so that the bias keeps the logits in the
  // range the float comparison below is sized for.
  a.sliding_window = draw_window(r, capacity);
  // Over huge stride-0 pages, often a window of a few keys: the only such calls light enough
  // to run, and the ones that reach the decode steps near the end of int64.
  if (stride0_slots && r.flag()) a.sliding_window = r.range(1, 300);
  Buffer<float, 1> sinks, slopes;
  if (draw_head_values(r, rng, hq, 1.0f, false, &sinks)) a.sinks = sinks.cview();
  if (draw_head_values(r, rng, hq, 1.0f / 16, true, &slopes)) a.alibi_slopes = slopes.cview();
  draw_conventions(r, &a);
  const NarrowV narrow_v = draw_narrow_v(r, k_g, scale_per_element, stride0_slots, &v_g, &vs_g);

  // --- buffers -----------------------------------------------------------------------------
  Buffer<float, 3> q;
  make_buffer(q_g, kNaN, &q);
  KV kv_poison{};
  if constexpr (kQuant)
    kv_poison = KV(127);
  else if constexpr (kFp8)
    kv_poison = KV{0xFF};  // NaN in both fp8 formats
  else
    kv_poison = static_cast<KV>(kNaN);
  Buffer<KV, 4> k, v;
  make_buffer(k_g, kv_poison, &k);
  make_buffer(v_g, kv_poison, &v);
  if (narrow_v.alias_k) {  // V: the first head_dim_v columns of K's own buffer
    v.data.reset();
    v.size = 0;
    v.view = TensorView<KV, 4>(k.view.data, v_g.extents, k.view.strides, k.size);
  }
  Buffer<float, 4> ks, vs;
  make_buffer(ks_g, kNaN, &ks);
  make_buffer(vs_g, kNaN, &vs);
  // Index values go in through the geometry the harness built, bounded by the allocation: a
  // mutated view may then show the validator anything (that is the point).
  Buffer<Index, 1> len_b;
  make_buffer(len_g, static_cast<Index>(dead_entry > kIndexMax ? kIndexMax : dead_entry), &len_b);
  Buffer<Index, 2> pi_b;
  make_buffer(pi_g, static_cast<Index>(dead_entry > kIndexMax ? kIndexMax : dead_entry), &pi_b);
  auto narrow = [](std::int64_t x) {
    if (x > kIndexMax) return kIndexMax;
    if (x < std::numeric_limits<Index>::min())
      return std::int64_t{std::numeric_limits<Index>::min()};
    return x;
  };
  for (std::int64_t b = 0; b < batch; ++b) {
    const std::int64_t off = safe_offset(len_g, {b}, len_b.size);
    if (off >= 0)
      len_b.data[static_cast<size_t>(off)] =
          static_cast<Index>(narrow(lengths[static_cast<size_t>(b)]));
    for (std::int64_t j = 0; j < pps; ++j) {
      const std::int64_t o = safe_offset(pi_g, {b, j}, pi_b.size);
      if (o >= 0)
        pi_b.data[static_cast<size_t>(o)] =
            static_cast<Index>(narrow(table[static_cast<size_t>(b * pps + j)]));
    }
  }
  a.q = q.cview();
  a.k_pages = k.cview();
  a.v_pages = v.cview();
  a.lengths = len_b.cview();
  a.page_indices = pi_b.cview();
  if (give_k_scales) a.k_scales = ks.cview();
  if (give_v_scales) a.v_scales = vs.cview();

  // --- validate ----------------------------------------------------------------------------
  DataSize data;
  data.add(q).add(k).add(v).add(ks).add(vs).add(len_b).add(pi_b).add(sinks).add(slopes);
  Status jax, ref;
  {
    BudgetScope budget("check_paged", data);
    jax = attnref::check_paged(a, attnref::Profile::kJax);
    ref = attnref::check_paged(a, attnref::Profile::kReference);
    check_conventions(a, jax, ref,
                      [](const Args& x, attnref::Profile p) { return attnref::check_paged(x, p); });
  }
  attnref_fuzz::check_error_renders(jax);
  attnref_fuzz::check_error_renders(ref);
  if (std::getenv("ATTNREF_FUZZ_VERBOSE") != nullptr)
    std::fprintf(stderr, "status: jax %s, reference %s\n", attnref::error_code_name(jax.code()),
                 attnref::error_code_name(ref.code()));
  ATTNREF_FUZZ_CHECK(!jax.ok() || ref.ok(),
                     "jax profile accepted what reference rejected: " + ref.to_string());
  ATTNREF_FUZZ_CHECK(
      a.k_pages.extents[3] == a.v_pages.extents[3] || jax.code() == ErrorCode::kShapeMismatch,
      "jax profile took a V head_dim other than K's: " + jax.to_string());

  if (!ref.ok()) {
    // The kernel entry point must report the same error and not touch out.
    float sentinel = 12345.0f;
    TensorView<float, 3> out(&sentinel, a.q.extents, a.q.strides, 1);
    Status s;
    {
      BudgetScope budget("try_paged_attention (invalid call)", DataSize(data).add_raw(1, 4));
      s = attnref::try_paged_attention(a, out, counted(attnref::SerialExecutor{}));
    }
    ATTNREF_FUZZ_CHECK(s.code() == ref.code(),
                       "try_paged_attention: " + s.to_string() + " vs " + ref.to_string());
    ATTNREF_FUZZ_CHECK(sentinel == 12345.0f, "out written on error");
    return;
  }

  // --- data: finite values in the used region only -----------------------------------------
  const std::int64_t B = a.batch(), Hq = a.num_q_heads(), D = a.head_dim(), S = a.page_size();
  const std::int64_t Dv = a.head_dim_v(), Dmax = std::max(D, Dv);
  // Keys before a sliding window are never read: they keep their NaN (and their pages may be
  // dead entries), and they cost nothing, so a window of a few keys at the end of a huge
  // stride-0 page runs.
  const auto first_key = [&](std::int64_t b) {
    return attnref::detail::first_window_key(a.lengths(b), a.sliding_window);
  };
  // A valid call may describe far more elements than its buffers hold (stride-0 views), and the
  // kernel's work is then legitimately that large; skip the run above a work cap so one input
  // stays well under the 10 s timeout (the validation above has already run on it).
  {
    std::int64_t work = 0, live = 0, step = 0;
    bool fits = attnref::checked_mul(B, Hq, &work) && attnref::checked_mul(work, Dmax, &work);
    for (std::int64_t b = 0; b < B && fits; ++b)
      fits = attnref::checked_add(live, a.lengths(b) - first_key(b), &live);
    fits = fits && attnref::checked_mul(live, Hq, &step) &&  // every query head reads each row
           attnref::checked_mul(step, Dmax, &step) && attnref::checked_add(work, step, &work);
    if (!fits || work > kMaxElements) return;
  }
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t h = 0; h < Hq; ++h)
      for (std::int64_t d = 0; d < D; ++d) q.view(b, h, d) = rng.small();
  auto kv_value = [&]() -> KV {
    if constexpr (kQuant) {
      return static_cast<KV>(static_cast<int>(rng.next() % 255) - 127);
    } else if constexpr (kFp8) {  // a finite code of magnitude at most 4
      for (;;) {
        const KV x{static_cast<std::uint8_t>(rng.next() % 256)};
        if (x.is_finite() && std::fabs(x.to_float()) <= 4.0f) return x;
      }
    } else {
      return static_cast<KV>(rng.small());
    }
  };
  for (std::int64_t b = 0; b < B; ++b) {
    for (std::int64_t t = first_key(b); t < a.lengths(b); ++t) {
      const std::int64_t page = a.page_indices(b, t / S), slot = t % S;
      for (std::int64_t h = 0; h < a.num_kv_heads(); ++h) {
        for (std::int64_t d = 0; d < Dmax; ++d) {  // (V over K's memory: V's value stays)
          if (d < D) k.view(h, page, slot, d) = kv_value();
          if (d < Dv) v.view(h, page, slot, d) = kv_value();
        }
        if constexpr (Args::kScaled) {
          // K and V scales may differ in their last extent (per-token vs per-channel); fp8
          // scales may be absent (empty views: no extent to fill).
          for (std::int64_t d = 0; d < a.k_scales.extents[3]; ++d)
            ks.view(h, page, slot, d) = 0.25f + static_cast<float>(rng.next() % 8) / 4.0f;
          for (std::int64_t d = 0; d < a.v_scales.extents[3]; ++d)
            vs.view(h, page, slot, d) = 0.25f + static_cast<float>(rng.next() % 8) / 4.0f;
        }
      }
    }
  }
  {
    BudgetScope budget("check_paged_data", data);
    attnref_fuzz::check_accepts_finite(attnref::check_paged_data(a));
  }
  bool poisoned = false;
  if (r.chance(25)) {  // NaN or Inf inside the used region: the data tier must see it
    const float bad = r.flag() ? kNaN : std::numeric_limits<float>::infinity();
    if (B > 0 && r.flag()) {
      q.view(r.range(0, B - 1), r.range(0, Hq - 1), r.range(0, D - 1)) = bad;
      poisoned = true;
    } else {
      for (std::int64_t b = 0; b < B && !poisoned; ++b) {
        if (a.lengths(b) == 0) continue;
        const std::int64_t t = r.range(first_key(b), a.lengths(b) - 1);  // a key it reads
        const std::int64_t page = a.page_indices(b, t / S), h = r.range(0, a.num_kv_heads() - 1);
        if constexpr (kQuant) {
          (r.flag() ? ks : vs).view(h, page, t % S, 0) = bad;
        } else if constexpr (kFp8) {  // a NaN or infinity code
          const bool e5m2 = std::is_same<KV, attnref::float8_e5m2>::value;
          const KV code{static_cast<std::uint8_t>(r.flag() ? 0xFF : e5m2 ? 0x7C : 0x7F)};
          const bool in_k = r.flag();
          (in_k ? k : v).view(h, page, t % S, r.range(0, (in_k ? D : Dv) - 1)) = code;
        } else {
          const bool in_k = r.flag();
          (in_k ? k : v).view(h, page, t % S, r.range(0, (in_k ? D : Dv) - 1)) =
              static_cast<KV>(bad);
        }
        poisoned = true;
      }
    }
    if (poisoned) {
      attnref_fuzz::check_reports_non_finite(attnref::check_paged_data(a));
    }
  }

  // --- output buffer, [B, Hq, Dv] (or q's shape: an error when Dv != D) ------------------------
  const Geometry<3> out_g = attnref_fuzz::output_geometry<3>(
      r, narrow_v.out_like_q ? a.q.extents : std::array<std::int64_t, 3>{B, Hq, Dv}, 20,
      /*zero_stride=*/false);
  if (std::getenv("ATTNREF_FUZZ_VERBOSE") != nullptr) {  // describe the call (debugging a crash)
    auto ext = [](const auto& v) {
      std::string t;
      for (size_t i = 0; i < v.extents.size(); ++i)
        t += std::to_string(v.extents[i]) + "/" + std::to_string(v.strides[i]) + " ";
      return t + "buf " + std::to_string(v.buffer_size);
    };
    std::fprintf(stderr,
                 "kv=%s index=%s executor=%d sm_scale=%g soft_cap=%g round_bf16=%d alibi=%d "
                 "order=%d slopes=%d\n",
                 attnref::dtype_name(attnref::dtype_of<KV>), sizeof(Index) == 4 ? "int32" : "int64",
                 executor_kind, static_cast<double>(a.sm_scale),
                 a.soft_cap ? static_cast<double>(*a.soft_cap) : 0.0, a.round_kv_to_bf16 ? 1 : 0,
                 static_cast<int>(a.alibi_convention), static_cast<int>(a.soft_cap_order),
                 a.alibi_slopes.empty_view() ? 0 : 1);
    std::fprintf(stderr, "q %s\nk %s\nv %s\nks %s\nout %s\n", ext(a.q).c_str(),
                 ext(a.k_pages).c_str(), ext(a.v_pages).c_str(), ext(a.k_scales).c_str(),
                 ext(TensorView<const float, 3>(nullptr, out_g.extents, out_g.strides)).c_str());
    for (std::int64_t b = 0; b < B; ++b) {
      std::fprintf(stderr, "len[%lld]=%lld pages:", static_cast<long long>(b),
                   static_cast<long long>(a.lengths(b)));
      for (std::int64_t j = 0; j < a.pages_per_sequence(); ++j)
        std::fprintf(stderr, " %lld", static_cast<long long>(a.page_indices(b, j)));
      std::fprintf(stderr, "\n");
    }
  }
  Buffer<float, 3> out;
  make_buffer(out_g, kNaN, &out);
  const std::vector<float> before = attnref_fuzz::snapshot(out);
  Status s;
  {
    BudgetScope budget("try_paged_attention", DataSize(data).add(out));
    switch (executor_kind) {
      case 0:
        s = attnref::try_paged_attention(a, out.view, counted(attnref::SerialExecutor{}));
        break;
      case 1:
        s = attnref::try_paged_attention(
            a, out.view, counted(ClaimedConcurrency{static_cast<int>(r.range(2, 9))}));
        break;
      default:
        s = attnref::try_paged_attention(a, out.view, counted(PoolRef{}));
        break;
    }
  }
  attnref_fuzz::check_error_renders(s);
  const Status out_check = attnref::check_paged_output(a, out.view);
  ATTNREF_FUZZ_CHECK(s.code() == out_check.code(),
                     "try_paged_attention vs check_paged_output: " + s.to_string());
  if (!s.ok()) {
    ATTNREF_FUZZ_CHECK(attnref_fuzz::unchanged(out, before), "out written on error");
    return;
  }
  if (poisoned) return;  // NaN in, NaN out: nothing more to compare
  // An output view whose elements overlap (a stride of 0, or strides that interleave) passes
  // check_paged_output; rows then overwrite each other, so only "no crash" is asked of it.
  {
    if (out.view.numel_or_zero() == 0 && B * Hq * Dv == 0) return;  // nothing was written
    std::array<size_t, 3> order = {0, 1, 2};
    const auto& ov = out.view;
    std::sort(order.begin(), order.end(),
              [&](size_t x, size_t y) { return ov.strides[x] < ov.strides[y]; });
    std::int64_t reach_below = 0;  // largest offset reachable by the faster dimensions
    for (size_t i : order) {
      if (ov.extents[i] <= 1) continue;
      if (ov.strides[i] <= reach_below) return;  // overlapping elements
      std::int64_t step = 0;
      if (!attnref::checked_mul(ov.strides[i], ov.extents[i] - 1, &step) ||
          !attnref::checked_add(reach_below, step, &reach_below))
        return;  // (a view with an element reaching this far holds no elements)
    }
  }

  // --- float64 reference -------------------------------------------------------------------
  attnref::reference::PagedBounds bounds;
  const std::vector<double> reference = attnref::reference::paged_attention(a, &bounds);
  std::int64_t compared = 0;  // elements compared with float64 (ATTNREF_FUZZ_VERBOSE reports)
  for (std::int64_t b = 0; b < B; ++b) {
    for (std::int64_t qh = 0; qh < Hq; ++qh) {
      const double max_raw = bounds.max_logit[static_cast<size_t>(b * Hq + qh)];
      for (std::int64_t d = 0; d < Dv; ++d) {
        const size_t i = static_cast<size_t>((b * Hq + qh) * Dv + d);
        const double want = reference[i], lo = bounds.lo[i], hi = bounds.hi[i];
        const double got = static_cast<double>(out.view(b, qh, d));
        const std::string where = "b=" + std::to_string(b) + " qh=" + std::to_string(qh) +
                                  " d=" + std::to_string(d) + " got=" + std::to_string(got) +
                                  " want=" + std::to_string(want);
        // Scores past float's range overflow in the float kernel (as in JAX's f32 kernel): only
        // "no crash" is asked of those.
        if (max_raw > 1e36) continue;
        ATTNREF_FUZZ_CHECK(std::isfinite(got), "non-finite output for finite inputs: " + where);
        const double span = std::max(std::fabs(lo), std::fabs(hi));
        // A softmax-weighted mean stays within the values' range (float rounding aside).
        ATTNREF_FUZZ_CHECK(got >= lo - 1e-3 * (1 + span) && got <= hi + 1e-3 * (1 + span),
                           "output outside the range of V: " + where);
        // Float scores carry an absolute error ~ |sm_scale * q.k| * 2^-24 * D before the cap
        // (a cap near 0 amplifies it: an exact 0 in float64 may be 1e-8 * 1e30 in float), so
        // compare where the uncapped scores are small.
        if (max_raw * static_cast<double>(D) < 1e3) {
          const double tol = 2e-3 * (1.0 + span) * (1.0 + max_raw * static_cast<double>(D) * 1e-3);
          ATTNREF_FUZZ_CHECK(std::fabs(got - want) <= tol, "output differs from float64: " + where);
          ++compared;
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
      run_case<float, std::int32_t>,
      run_case<float, std::int64_t>,
      run_case<std::int8_t, std::int32_t>,
      run_case<std::int8_t, std::int64_t>,
      run_case<attnref::float8_e4m3fn, std::int32_t>,
      run_case<attnref::float8_e5m2, std::int64_t>,
  };
  return attnref_fuzz::run_one(data, size, kCases);
}
