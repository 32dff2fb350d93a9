// SPDX-License-Identifier: Apache-2.0
// libFuzzer harness of the splash family: fuzz bytes become a splash-attention call (head counts
// with GQA, MQA and non-divisible counts, sequence lengths, head dims, strided layouts, segment
// ids, sinks, block sizes forward and backward, sharding, soft cap / scale / mask value, sliding
// window, ALiBi slopes, both ALiBi conventions and soft-cap orders and values no enumerator has)
// and a
// mask (full, causal, local window, chunked causal, dense bool view, predicate, & and |, one per
// head), sometimes made hostile by a few mutations (extents, strides, buffer sizes, null data,
// mask parameters and shapes, block sizes, options).
// Widened draws (the Wide byte, fuzz_common.hpp): empty sequences next to head counts, sequence
// lengths or head dims past int32; up to 2^17 query heads with as many 1x1 per-head masks (most
// distinct); mask offsets, windows and chunks past int32; special scale / soft cap / mask value,
// block sizes and shard counts.
//
// Every buffer the harness allocates holds exactly the elements its view's `buffer_size` claims
// (so AddressSanitizer sees any read past it) and at most 2^20 elements. Data is written only
// through views the validator accepted; padding between rows holds NaN.
//
// Invariants:
//  - check_splash / check_splash_backward: kJax ok implies kReference ok (kJax only adds checks);
//  - the conventions, forward and backward (fuzz_common.hpp's check_conventions): kJax refuses
//    any non-default value (option_not_in_jax), kReference a value no enumerator has
//    (invalid_convention), exactly where the call with the defaults passes;
//  - splash_attention, splash_forward (MaskInfo) and splash_attention_backward throw a ShapeError
//    with exactly the code of the first failing check (validator, MaskInfo build, output views)
//    and leave every output untouched on error;
//  - on success out, logsumexp, dq, dk, dv and dsinks are finite (where the scores fit in the
//    accumulator type) and equal, within the dtype's tolerance, to the float64 forward and
//    backward of tests/reference/splash.hpp (spec §2.5/§2.6), which apply the same conventions;
//  - every error renders (code name, message, hint);
//  - work proportional to input bytes: validation, MaskInfo builds and the kernels stay within
//    the BudgetScope budget of the buffers behind the call (fuzz_common.hpp); a call whose
//    forward output is empty runs too (the budget is then the fixed part) and its dk and dv
//    are zero.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include <attnref/kernels/splash_attention.hpp>
#include <attnref/masks/mask.hpp>
#include <attnref/masks/mask_info.hpp>
#include <attnref/validate/splash.hpp>

#include "fuzz_common.hpp"
#include "reference/splash.hpp"

namespace {

using attnref::Profile;
using attnref::reference::to_double;
using namespace attnref_fuzz;  // the shared harness pieces (fuzz_common.hpp)

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// --- masks --------------------------------------------------------------------------------

enum MaskKind : int {
  kFull,
  kCausal,
  kLocal,
  kChunked,
  kDense,
  kPredicate,
  kAnd,
  kOr,
  kNumSimpleKinds = kPredicate + 1,
};

/// A mask as the harness sees it: parameters plus an independent evaluation (128-bit arithmetic,
/// so hostile offsets never overflow here).
struct MaskSpec {
  int kind = kFull;
  attnref::MaskShape shape{};
  std::int64_t offset = 0;
  std::optional<std::int64_t> left, right;
  std::int64_t chunk = 1;
  std::int64_t shard_count = 1;
  std::int64_t modulus = 2;  // predicate: (q * 3 + kv) % modulus != 0
  std::shared_ptr<Buffer<bool, 2>> dense;
  Geometry<2> dense_geometry;
  std::vector<MaskSpec> children;  // And / Or: two of them
  bool empty_any = false;          // an AnyMask holding nothing (MultiHeadMask heads only)
  std::int64_t repeat_of = -1;     // a copy of that earlier head (shares its AnyMask)

  bool allows(std::int64_t q, std::int64_t kv) const {
    using I = __int128;
    switch (kind) {
      case kFull:
        return true;
      case kCausal:
        return I{q} + offset >= I{kv};
      case kLocal:
        return (!left || I{q} + offset - *left <= I{kv}) &&
               (!right || I{q} + offset + *right >= I{kv});
      case kChunked:
        return q / chunk == kv / chunk && q >= kv;
      case kDense: {
        const auto& g = dense_geometry;
        return dense->data[static_cast<size_t>(q * g.strides[0] + kv * g.strides[1])];
      }
      case kPredicate:
        return (q * 3 + kv) % modulus != 0;
      case kAnd:
        return children[0].allows(q, kv) && children[1].allows(q, kv);
      default:
        return children[0].allows(q, kv) || children[1].allows(q, kv);
    }
  }
};

struct Predicate {
  std::int64_t modulus;
  bool operator()(std::int64_t q, std::int64_t kv) const { return (q * 3 + kv) % modulus != 0; }
};

/// A mask spec of a simple kind, shape (sq, skv) unless mutated, parameters sometimes hostile.
MaskSpec make_simple_spec(Reader& r, attnref_fuzz::Rng& rng, int kind, std::int64_t sq,
                          std::int64_t skv) {
  MaskSpec m;
  m.kind = kind;
  m.shape = {sq, skv};
  if (r.chance(12)) m.shape[r.u8() % 2] = hostile_int(r, r.flag() ? sq : skv);
  if (r.chance(12))
    m.shard_count = hostile_int(r, 2);
  else if (r.chance(30))
    m.shard_count = r.range(1, 3);
  const bool hostile = r.chance(40);
  switch (kind) {
    case kCausal:
      m.offset = hostile ? hostile_int(r, skv - sq) : r.range(-6, 6);
      break;
    case kLocal:
      m.offset = hostile ? hostile_int(r, skv - sq) : r.range(-4, 4);
      if (r.u8() % 4 != 0) m.left = hostile ? hostile_int(r, 4) : r.range(0, 8);
      if (r.u8() % 4 != 0) m.right = hostile && r.flag() ? hostile_int(r, 4) : r.range(0, 8);
      break;
    case kChunked:
      m.chunk = hostile ? hostile_int(r, 4) : r.range(1, 8);
      break;
    case kDense: {
      Geometry<2>& g = m.dense_geometry;
      g.extents = m.shape;
      g.strides = padded_strides<2>(g.extents, r.range(0, 2));
      if (r.chance(24)) mutate(r, g, skv);
      m.dense = std::make_shared<Buffer<bool, 2>>();
      make_buffer(g, false, m.dense.get());
      const int density = static_cast<int>(r.range(0, 4));  // 0: none allowed .. 4: all
      for (std::int64_t i = 0; i < m.dense->size; ++i)
        m.dense->data[static_cast<size_t>(i)] = static_cast<int>(rng.next() % 4) < density;
      break;
    }
    case kPredicate:
      m.modulus = r.range(1, 5);
      break;
    default:
      break;
  }
  return m;
}

attnref::AnyMask to_any(const MaskSpec& m);

template <class Fn>
auto with_simple_mask(const MaskSpec& m, Fn&& fn) {
  switch (m.kind) {
    case kFull:
      return fn(attnref::FullMask(m.shape));
    case kCausal:
      return fn(attnref::CausalMask(m.shape, m.offset, m.shard_count));
    case kLocal:
      return fn(attnref::LocalMask(m.shape, m.left, m.right, m.offset, m.shard_count));
    case kChunked:
      return fn(attnref::ChunkedCausalMask(m.shape, m.chunk, m.shard_count));
    case kDense:
      return fn(attnref::DenseMask(m.dense->cview()));
    case kPredicate:
      return fn(attnref::make_predicate_mask(m.shape, Predicate{m.modulus}));
    case kAnd:
      return fn(attnref::AndMask<attnref::AnyMask, attnref::AnyMask>(to_any(m.children[0]),
                                                                     to_any(m.children[1]), true));
    default:
      return fn(attnref::OrMask<attnref::AnyMask, attnref::AnyMask>(to_any(m.children[0]),
                                                                    to_any(m.children[1]), false));
  }
}

attnref::AnyMask to_any(const MaskSpec& m) {
  if (m.empty_any) return attnref::AnyMask();
  return with_simple_mask(m, [](auto mask) { return attnref::AnyMask(std::move(mask)); });
}

/// A single-head spec of any kind; And / Or combine two simple ones.
MaskSpec make_spec(Reader& r, attnref_fuzz::Rng& rng, std::int64_t sq, std::int64_t skv) {
  const int kind = r.u8() % (kOr + 1);
  if (kind != kAnd && kind != kOr) return make_simple_spec(r, rng, kind, sq, skv);
  MaskSpec m;
  m.kind = kind;
  m.children.push_back(make_simple_spec(r, rng, r.u8() % kNumSimpleKinds, sq, skv));
  m.children.push_back(make_simple_spec(r, rng, r.u8() % kNumSimpleKinds, sq, skv));
  m.shape =
      m.children[0].kind == kDense ? m.children[0].dense_geometry.extents : m.children[0].shape;
  return m;
}

/// The code a kernel call threw (kOk when it returned).
template <class Fn>
ErrorCode code_of(Fn&& fn, Status* thrown) {
  try {
    fn();
  } catch (const attnref::ShapeError& e) {
    *thrown = e.status();
    attnref_fuzz::check_error_renders(e.status());
    return e.status().code();
  }
  return ErrorCode::kOk;
}

/// Accumulator epsilon of a dtype pair (f64 when either is double, else f32).
template <class Q, class KV>
constexpr double acc_eps() {
  return std::is_same<Q, double>::value || std::is_same<KV, double>::value ? 0x1p-52 : 0x1p-23;
}

/// hostile_int's `near` must stay small (it negates and doubles it).
std::int64_t small(std::int64_t x) {
  return std::max<std::int64_t>(-(1 << 20), std::min<std::int64_t>(x, 1 << 20));
}

std::optional<std::int64_t> pick_block(Reader& r, std::int64_t seq) {
  seq = small(seq);
  switch (r.u8() % 8) {
    case 0:
      return std::nullopt;
    case 1:
      return 128;
    case 2:
      return std::max<std::int64_t>(seq, 1);
    case 3:
      return hostile_int(r, seq);
    default:
      return r.range(1, 12);
  }
}

/// A 1x1-ish mask head from the PRNG (many-heads draws: the bytes would run out).
MaskSpec cheap_spec(attnref_fuzz::Rng& rng, std::int64_t sq, std::int64_t skv) {
  MaskSpec m;
  m.shape = {sq, skv};
  switch (rng.next() % 5) {
    case 0:
      m.kind = kFull;
      break;
    case 1:
      m.kind = kCausal;
      m.offset = static_cast<std::int64_t>(rng.next() % 5) - 2;
      break;
    case 2:
      m.kind = kLocal;
      m.left = static_cast<std::int64_t>(rng.next() % 3);
      m.right = static_cast<std::int64_t>(rng.next() % 3);
      break;
    case 3: {
      m.kind = kDense;
      Geometry<2>& g = m.dense_geometry;
      g.extents = m.shape;
      g.strides = padded_strides<2>(g.extents, 0);
      m.dense = std::make_shared<Buffer<bool, 2>>();
      make_buffer(g, false, m.dense.get());
      for (std::int64_t i = 0; i < m.dense->size; ++i)
        m.dense->data[static_cast<size_t>(i)] = rng.next() % 2 == 0;
      break;
    }
    default:
      m.kind = kPredicate;
      m.modulus = static_cast<std::int64_t>(1 + rng.next() % 4);
      break;
  }
  return m;
}

template <class Q, class KV>
void run_case(Reader& r, attnref_fuzz::Rng& rng, const Wide& w) {
  using Args = attnref::SplashAttentionArgs<Q, KV>;
  const bool verbose = std::getenv("ATTNREF_FUZZ_VERBOSE") != nullptr;

  // --- a consistent call ---------------------------------------------------------------------
  const bool is_mqa = r.chance(50);
  std::int64_t hkv = is_mqa ? 1 : r.range(1, 3);
  std::int64_t hq = hkv * r.range(1, 4);
  if (r.chance(20)) hq = r.range(1, 8);  // often not a multiple of hkv
  std::int64_t sq = r.range(0, 20);
  std::int64_t skv = r.chance(160) ? sq : r.range(0, 20);
  std::int64_t dqk = r.range(1, 12);
  std::int64_t dv = r.flag() ? dqk : r.range(1, 12);
  if (w.many_heads()) {  // up to 2^17 query heads over one or two rows
    hq = r.range(1, 1 << 16) * r.range(1, 2);
    hkv = is_mqa || r.flag() ? 1 : hq;
    sq = r.range(1, 2);
    skv = r.range(1, 2);
    dqk = r.range(1, 2);
    dv = r.range(1, 2);
  }
  bool huge_heads = false;  // hq past what per-head masks or sinks can hold
  if (w.huge_zero()) {      // empty q and/or K/V next to extents past int32
    const std::uint8_t which = r.u8();
    if (which & 1) hq = huge_extent(r);
    if (which & 2) hkv = is_mqa ? 1 : (which & 1) && r.flag() ? hq : huge_extent(r);
    if (which & 4) sq = huge_extent(r);
    if (which & 8) skv = huge_extent(r);
    if (which & 16) dqk = huge_extent(r);
    if (which & 32) dv = huge_extent(r);
    if ((which & 64) || !(which & 128)) sq = 0;
    if (which & 128) skv = 0;
    huge_heads = hq > (1 << 17);
  }

  Args a;
  a.is_mqa = is_mqa;
  attnref::SplashBlockSizes& b = a.block_sizes;
  b.block_q = pick_block(r, sq).value_or(std::max<std::int64_t>(small(sq), 1));
  b.block_kv = pick_block(r, skv).value_or(std::max<std::int64_t>(small(skv), 1));
  b.block_kv_compute = pick_block(r, b.block_kv);
  if (r.flag()) {
    b.block_q_dkv = pick_block(r, sq);
    b.block_kv_dkv = pick_block(r, skv);
    b.block_kv_dkv_compute = pick_block(r, skv);
    b.block_q_dq = pick_block(r, sq);
    b.block_kv_dq = pick_block(r, skv);
    b.use_fused_bwd_kernel = r.flag();
  }
  if (r.chance(8)) b = attnref::SplashBlockSizes::get_default();
  a.sm_scale = r.chance(200) ? static_cast<float>(r.range(1, 16)) / 8.0f : hostile_real(r);
  if (r.chance(90))
    a.soft_cap = r.chance(200) ? static_cast<float>(r.range(1, 40)) : hostile_real(r);
  if (r.chance(30)) a.mask_value = hostile_real(r);
  if (r.chance(20)) {
    a.sharding.head_shards = r.flag() ? r.range(1, 4) : hostile_int(r, hq);
    a.sharding.q_seq_shards = r.flag() ? r.range(1, 4) : hostile_int(r, sq);
  }
  if (w.special_options()) {
    const std::uint8_t which = r.u8();
    if (which & 1) a.sm_scale = special_real(r);
    if (which & 2) a.soft_cap = special_real(r);
    if (which & 4) a.mask_value = special_real(r);
    if (which & 8) b.block_q = special_int(r, small(sq));
    if (which & 16) b.block_kv = special_int(r, small(skv));
    if (which & 32) b.block_kv_compute = special_int(r, small(skv));
    if (which & 64) (r.flag() ? b.block_q_dkv : b.block_kv_dq) = special_int(r, small(sq));
    if (which & 128) {
      a.sharding.head_shards = special_int(r, small(hq));
      a.sharding.q_seq_shards = special_int(r, small(sq));
    }
  }
  const bool with_segments = r.chance(50);
  const bool with_sinks = r.chance(50);

  // The mask: one single-head mask, or a MultiHeadMask of 1, hq or some other count of heads.
  const bool multi = r.chance(70);
  std::vector<MaskSpec> heads;
  if (multi) {
    std::int64_t n = r.flag() ? hq : 1;
    if (r.chance(20)) n = r.range(0, 9);
    if (huge_heads && n > 9) n = r.flag() ? 1 : r.range(0, 9);
    if (w.many_heads()) {  // per-head masks from the PRNG, a few repeats
      for (std::int64_t h = 0; h < n; ++h) {
        if (h > 0 && rng.next() % 8 == 0) {
          const std::int64_t src =
              static_cast<std::int64_t>(rng.next() % static_cast<std::uint64_t>(h));
          heads.push_back(heads[static_cast<size_t>(src)]);
          heads.back().repeat_of = heads[static_cast<size_t>(src)].repeat_of >= 0
                                       ? heads[static_cast<size_t>(src)].repeat_of
                                       : src;
          continue;
        }
        heads.push_back(cheap_spec(rng, sq, skv));
      }
    }
    for (std::int64_t h = w.many_heads() ? n : 0; h < n; ++h) {
      if (h > 0 && r.chance(100)) {  // a repeat of an earlier head: exercises deduplication
        heads.push_back(heads[static_cast<size_t>(r.range(0, h - 1))]);
        continue;
      }
      heads.push_back(make_spec(r, rng, sq, skv));
      if (r.chance(3)) heads.back().empty_any = true;
    }
  } else {
    heads.push_back(make_spec(r, rng, sq, skv));
  }

  if (w.int64_meta() && !heads.empty()) {  // mask offsets, windows and chunks past int32
    MaskSpec& m =
        heads[static_cast<size_t>(r.range(0, static_cast<std::int64_t>(heads.size()) - 1))];
    MaskSpec& t = m.children.empty() ? m : m.children[r.u8() % 2];
    if (t.repeat_of < 0 && m.repeat_of < 0) {
      t.offset = r.flag() ? past_int32(r) : -past_int32(r);
      if (t.kind == kLocal) {
        if (r.flag()) t.left = r.flag() ? past_int32(r) : special_int(r, 4);
        if (r.flag()) t.right = r.flag() ? past_int32(r) : special_int(r, 4);
      }
      if (t.kind == kChunked) t.chunk = r.flag() ? past_int32(r) : special_int(r, 4);
      if (r.flag()) t.shard_count = r.flag() ? past_int32(r) : special_int(r, 2);
      // Repeats share the changed head's AnyMask (with_mask below), so their specs, which the
      // oracle reads, change with it (they were copies of the old spec: a wrong expected row).
      for (MaskSpec& copy : heads)
        if (copy.repeat_of >= 0 && &heads[static_cast<size_t>(copy.repeat_of)] == &m) {
          const std::int64_t src = copy.repeat_of;
          copy = m;
          copy.repeat_of = src;
        }
    }
  }

  Geometry<3> q_g = layout3(r, hq, sq, dqk);
  Geometry<3> k_g = layout3(r, hkv, skv, dqk);
  Geometry<3> v_g = layout3(r, hkv, skv, dv);
  Geometry<1> qs_g, ks_g, sink_g;
  qs_g.extents = {with_segments ? sq : 0};
  ks_g.extents = {with_segments ? skv : 0};
  sink_g.extents = {with_sinks ? hq : 0};
  qs_g.strides = {r.range(1, 2)};
  ks_g.strides = {r.range(1, 2)};
  sink_g.strides = {r.range(1, 2)};
  q_g.unknown_size = r.chance(40);
  k_g.unknown_size = v_g.unknown_size = r.chance(40);
  if (w.huge_zero()) {  // one value for every position past the data (inputs may alias)
    if (sq > (1 << 16)) qs_g.strides = {0};
    if (skv > (1 << 16)) ks_g.strides = {0};
    if (hq > (1 << 16)) sink_g.strides = {0};
  }

  // --- hostile mutations ---------------------------------------------------------------------
  const int mutations = r.u8() % 4 == 0 ? static_cast<int>(r.range(1, 3)) : 0;
  for (int m = 0; m < mutations; ++m) {
    const int target = r.u8() % 14;
    if (target < 6) {
      attnref_fuzz::mutate_nth(r, target, -1, mutation_target(q_g, dqk), mutation_target(k_g, skv),
                               mutation_target(v_g, skv), mutation_target(qs_g, sq),
                               mutation_target(ks_g, skv), mutation_target(sink_g, hq));
      continue;
    }
    switch (target) {
      case 6:
        b.block_q = hostile_int(r, sq);
        break;
      case 7:
        b.block_kv = hostile_int(r, skv);
        break;
      case 8:
        b.block_kv_compute = hostile_int(r, small(b.block_kv));
        break;
      case 9:
        a.sm_scale = hostile_real(r);
        break;
      case 10:
        a.soft_cap = hostile_real(r);
        break;
      case 11: {  // k and v together, so S6 (same leading dims) still holds
        const size_t i = static_cast<size_t>(r.u8() % 2);
        const std::int64_t x = hostile_int(r, skv);
        k_g.extents[i] = v_g.extents[i] = x;
        k_g.mutated = v_g.mutated = true;
        break;
      }
      case 12:
        a.is_mqa = !a.is_mqa;
        break;
      default:
        a.mask_value = hostile_real(r);
        break;
    }
  }

  // Engine features, drawn last: a sliding window on top of the mask, and ALiBi slopes
  // (sometimes hostile: the metadata tier refuses them; small, so the bias keeps the logits in
  // the range the comparisons below are sized for).
  a.sliding_window = draw_window(r, std::max(sq, skv));
  Buffer<float, 1> slopes;
  if (draw_head_values(r, rng, hq, 1.0f / 16, true, &slopes)) a.alibi_slopes = slopes.cview();
  draw_conventions(r, &a);

  // --- buffers -------------------------------------------------------------------------------
  Buffer<Q, 3> q;
  Buffer<KV, 3> k, v;
  make_buffer(q_g, static_cast<Q>(kNaN), &q);
  make_buffer(k_g, static_cast<KV>(kNaN), &k);
  make_buffer(v_g, static_cast<KV>(kNaN), &v);
  Buffer<std::int32_t, 1> qs, ks;
  make_buffer(qs_g, std::int32_t{0}, &qs);
  make_buffer(ks_g, std::int32_t{0}, &ks);
  for (std::int64_t i = 0; i < qs.size; ++i)
    qs.data[static_cast<size_t>(i)] = static_cast<std::int32_t>(rng.next() % 3);
  for (std::int64_t i = 0; i < ks.size; ++i)
    ks.data[static_cast<size_t>(i)] = static_cast<std::int32_t>(rng.next() % 3);
  Buffer<float, 1> sinks;
  make_buffer(sink_g, std::numeric_limits<float>::quiet_NaN(), &sinks);
  a.q = q.cview();
  a.k = k.cview();
  a.v = v.cview();
  if (with_segments || qs_g.mutated) a.q_segment_ids = qs.cview();
  if (with_segments || ks_g.mutated) a.kv_segment_ids = ks.cview();
  if (with_sinks || sink_g.mutated) a.sinks = sinks.cview();

  // The library's mask: one type per kind, or a MultiHeadMask of AnyMask heads (a repeated
  // spec shares its AnyMask, so deduplication by identity is exercised too).
  auto with_mask = [&](auto&& fn) {
    if (!multi) return with_simple_mask(heads[0], fn);
    std::vector<attnref::AnyMask> any;
    any.reserve(heads.size());
    for (size_t h = 0; h < heads.size(); ++h) {
      if (heads.size() > 64) {  // many heads: repeats share by index (a scan would be O(H^2))
        const std::int64_t src = heads[h].repeat_of;
        any.push_back(src >= 0 ? any[static_cast<size_t>(src)] : to_any(heads[h]));
        continue;
      }
      size_t same = h;
      for (size_t e = 0; e < h; ++e)
        if (heads[e].dense == heads[h].dense && heads[e].kind == heads[h].kind &&
            heads[e].shape == heads[h].shape && heads[e].offset == heads[h].offset &&
            heads[e].chunk == heads[h].chunk && heads[e].modulus == heads[h].modulus &&
            heads[e].left == heads[h].left && heads[e].right == heads[h].right &&
            heads[e].children.empty() && heads[h].children.empty() &&
            heads[e].empty_any == heads[h].empty_any) {
          same = e;
          break;
        }
      any.push_back(same == h ? to_any(heads[h]) : any[same]);
    }
    return fn(attnref::MultiHeadMask(std::move(any)));
  };

  // The inputs' bytes: the views' buffers, and the mask: its dense buffers and, per head, the
  // 64 or so bytes of the mask object the caller built (so a MaskInfo may keep O(1) per head).
  DataSize data;
  data.add(q).add(k).add(v).add(qs).add(ks).add(sinks).add(slopes);
  for (const MaskSpec& m : heads) {
    data.add_raw(1, 64);
    if (m.dense) data.add(*m.dense);
    for (const MaskSpec& c : m.children)
      if (c.dense) data.add(*c.dense);
  }
  const attnref_fuzz::Counted<attnref::SerialExecutor> serial{};

  // --- validate --------------------------------------------------------------------------------
  Status fwd_ref, fwd_jax, bwd_ref, bwd_jax;
  with_mask([&](const auto& mask) {
    BudgetScope budget("check_splash / check_splash_backward", data);
    fwd_jax = attnref::check_splash(a, mask, Profile::kJax);
    fwd_ref = attnref::check_splash(a, mask, Profile::kReference);
    bwd_jax = attnref::check_splash_backward(a, mask, Profile::kJax);
    bwd_ref = attnref::check_splash_backward(a, mask, Profile::kReference);
    check_conventions(a, fwd_jax, fwd_ref,
                      [&](const Args& x, Profile p) { return attnref::check_splash(x, mask, p); });
    check_conventions(a, bwd_jax, bwd_ref, [&](const Args& x, Profile p) {
      return attnref::check_splash_backward(x, mask, p);
    });
    return 0;
  });
  for (const Status* s : {&fwd_jax, &fwd_ref, &bwd_jax, &bwd_ref})
    attnref_fuzz::check_error_renders(*s);
  ATTNREF_FUZZ_CHECK(!fwd_jax.ok() || fwd_ref.ok(),
                     "forward: jax accepted what reference rejected: " + fwd_ref.to_string());
  ATTNREF_FUZZ_CHECK(!bwd_jax.ok() || bwd_ref.ok(),
                     "backward: jax accepted what reference rejected: " + bwd_ref.to_string());
  ATTNREF_FUZZ_CHECK(!bwd_ref.ok() || fwd_ref.ok(), "backward accepted what forward rejected");
  if (verbose)
    std::fprintf(stderr, "status: forward %s, backward %s\n",
                 attnref::error_code_name(fwd_ref.code()),
                 attnref::error_code_name(bwd_ref.code()));
  const Profile fwd_profile = r.chance(60) ? Profile::kJax : Profile::kReference;
  const Profile bwd_profile = r.chance(60) ? Profile::kJax : Profile::kReference;
  const Status& fwd_check = fwd_profile == Profile::kJax ? fwd_jax : fwd_ref;
  const Status& bwd_check = bwd_profile == Profile::kJax ? bwd_jax : bwd_ref;

  if (!fwd_check.ok()) {
    // Every entry point reports the validator's error and writes nothing.
    const std::int64_t e0 = std::max<std::int64_t>(0, std::min<std::int64_t>(a.q.extents[0], 4));
    std::vector<Q> out_buf(4 * 4 * 4, static_cast<Q>(1.5));
    std::vector<float> lse_buf(16, 2.5f);
    TensorView<Q, 3> out(out_buf.data(), a.q.extents, {0, 0, 0}, 1);
    TensorView<float, 2> lse(lse_buf.data(), {e0, 0}, 1);
    Status thrown;
    const ErrorCode got = with_mask([&](const auto& mask) {
      BudgetScope budget("splash_attention (invalid call)",
                         DataSize(data).add(out_buf).add(lse_buf));
      return code_of(
          [&] {
            attnref::throw_if_error(attnref::check_splash(a, mask, fwd_profile));
            attnref::splash_attention(a, mask, out, lse, serial);
          },
          &thrown);
    });
    ATTNREF_FUZZ_CHECK(got == fwd_check.code(), "splash_attention threw " + thrown.to_string() +
                                                    " but the check says " + fwd_check.to_string());
    ATTNREF_FUZZ_CHECK(
        std::all_of(out_buf.begin(), out_buf.end(), [](Q x) { return x == static_cast<Q>(1.5); }) &&
            std::all_of(lse_buf.begin(), lse_buf.end(), [](float x) { return x == 2.5f; }),
        "forward output written on error");
  }
  if (!bwd_check.ok()) {
    std::vector<Q> gq(64, static_cast<Q>(1.5));
    std::vector<KV> gk(64, static_cast<KV>(1.5)), gv(64, static_cast<KV>(1.5));
    std::vector<float> ds(8, 2.5f), dummy(64, 0.0f);
    std::vector<Q> dummy_q(64, static_cast<Q>(0));
    attnref::SplashGradients<Q, KV> grads{
        TensorView<Q, 3>(gq.data(), {1, 1, 1}), TensorView<KV, 3>(gk.data(), {1, 1, 1}),
        TensorView<KV, 3>(gv.data(), {1, 1, 1}), TensorView<float, 1>(ds.data(), {1})};
    Status thrown;
    const ErrorCode got = with_mask([&](const auto& mask) {
      BudgetScope budget("splash_attention_backward (invalid call)",
                         DataSize(data).add(gq).add(gk).add(gv).add(ds).add(dummy).add(dummy_q));
      return code_of(
          [&] {
            attnref::throw_if_error(attnref::check_splash_backward(a, mask, bwd_profile));
            attnref::splash_attention_backward(
                a, mask, TensorView<const Q, 3>(dummy_q.data(), {1, 1, 1}),
                TensorView<const float, 2>(dummy.data(), {1, 1}),
                TensorView<const Q, 3>(dummy_q.data(), {1, 1, 1}), grads, serial);
          },
          &thrown);
    });
    ATTNREF_FUZZ_CHECK(got == bwd_check.code(), "splash_attention_backward threw " +
                                                    thrown.to_string() + " but the check says " +
                                                    bwd_check.to_string());
    ATTNREF_FUZZ_CHECK(
        std::all_of(gq.begin(), gq.end(), [](Q x) { return x == static_cast<Q>(1.5); }) &&
            std::all_of(gk.begin(), gk.end(), [](KV x) { return x == static_cast<KV>(1.5); }) &&
            std::all_of(ds.begin(), ds.end(), [](float x) { return x == 2.5f; }),
        "gradients written on error");
  }
  if (!fwd_ref.ok()) return;

  // --- bounded work ----------------------------------------------------------------------------
  // A valid call may still describe far more work than its buffers hold (stride-0 views): the
  // harness only runs what it can compare in well under a second.
  const std::int64_t HQ = a.num_q_heads(), SQ = a.q_seq_len(), SKV = a.kv_seq_len();
  const std::int64_t DQK = a.head_dim_qk(), DV = a.head_dim_v();
  const std::int64_t HKV = a.is_mqa ? 1 : a.num_kv_heads();
  const std::int64_t work = sat_mul(sat_mul(sat_mul(HQ, SQ), SKV), sat_add(DQK, DV));
  if (HQ > (w.many_heads() ? (1 << 17) : 64) || DQK > 4096 || DV > 4096 ||
      work > (std::int64_t{1} << 19) || sat_mul(SQ, SKV) > (std::int64_t{1} << 14) ||
      sat_mul(sat_mul(HQ, SQ), std::max(DQK, DV)) > kMaxElements / 4 ||
      sat_mul(sat_mul(HKV, SKV), std::max(DQK, DV)) > kMaxElements / 4) {
    // Too big to compare, unless the forward output is empty (a zero next to huge extents):
    // then every entry point runs, within the budget of what the buffers hold.
    if (sat_mul(sat_mul(HQ, SQ), DV) != 0) return;
    Buffer<Q, 3> eo;
    Buffer<float, 2> el;
    make_buffer(output_geometry<3>(r, {HQ, SQ, DV}, 0), static_cast<Q>(kNaN), &eo);
    make_buffer(output_geometry<2>(r, {HQ, SQ}, 0), std::numeric_limits<float>::quiet_NaN(), &el);
    Status expected = fwd_check;
    if (expected.ok())
      expected = with_mask([&](const auto& mask) {
        BudgetScope budget("build_mask_info (empty output)", data);
        attnref::MaskInfo scratch;
        return attnref::build_mask_info(mask, b.block_q, b.block_kv, fwd_profile, &scratch,
                                        a.sharding);
      });
    if (expected.ok()) expected = output_status(eo.view, {HQ, SQ, DV}, "out");
    if (expected.ok()) expected = output_status(el.view, {HQ, SQ}, "logsumexp");
    Status thrown;
    ErrorCode got = with_mask([&](const auto& mask) {
      BudgetScope budget("splash_attention (empty output)", DataSize(data).add(eo).add(el));
      return code_of(
          [&] {
            attnref::throw_if_error(attnref::check_splash(a, mask, fwd_profile));
            attnref::splash_attention(a, mask, eo.view, el.view, serial);
          },
          &thrown);
    });
    ATTNREF_FUZZ_CHECK(got == expected.code(), "splash_attention (empty output) threw " +
                                                   thrown.to_string() + ", expected " +
                                                   expected.to_string());
    if (!bwd_check.ok() || sat_mul(sat_mul(HKV, SKV), std::max(DQK, DV)) > kMaxElements / 4) return;
    // No query rows: dk and dv are zero.
    Buffer<Q, 3> edq;
    Buffer<KV, 3> edk, edv;
    make_buffer(output_geometry<3>(r, {HQ, SQ, DQK}, 0), static_cast<Q>(kNaN), &edq);
    make_buffer(output_geometry<3>(r, {HKV, SKV, DQK}, 0), static_cast<KV>(kNaN), &edk);
    make_buffer(output_geometry<3>(r, {HKV, SKV, DV}, 0), static_cast<KV>(kNaN), &edv);
    const Q dummy_q[1] = {};
    const float dummy_l[1] = {};
    const TensorView<const Q, 3> eout(dummy_q, {HQ, SQ, DV}, eo.view.strides, 1);
    const TensorView<const float, 2> elv(dummy_l, {HQ, SQ}, el.view.strides, 1);
    attnref::SplashGradients<Q, KV> grads{edq.view, edk.view, edv.view, TensorView<float, 1>()};
    expected = with_mask([&](const auto& mask) {
      BudgetScope budget("build_mask_info (backward, empty output)", data);
      attnref::MaskInfo scratch;
      return attnref::build_mask_info(mask, b.q_dkv(), b.kv_dkv(), Profile::kReference, &scratch,
                                      a.sharding);
    });
    if (expected.ok())
      expected = attnref::check_splash_backward_tensors(
          a, TensorView<Q, 3>(eo.view.data, {HQ, SQ, DV}, eo.view.strides, 1), elv,
          TensorView<Q, 3>(eo.view.data, {HQ, SQ, DV}, eo.view.strides, 1), grads.dq, grads.dk,
          grads.dv, grads.dsinks);
    got = with_mask([&](const auto& mask) {
      BudgetScope budget("splash_attention_backward (empty output)",
                         DataSize(data).add(eo).add(el).add(edq).add(edk).add(edv));
      return code_of(
          [&] {
            attnref::throw_if_error(attnref::check_splash_backward(a, mask, bwd_profile));
            attnref::splash_attention_backward(a, mask, eout, elv, eout, grads, serial);
          },
          &thrown);
    });
    ATTNREF_FUZZ_CHECK(got == expected.code(), "splash_attention_backward (empty output) threw " +
                                                   thrown.to_string() + ", expected " +
                                                   expected.to_string());
    if (!expected.ok()) return;
    // O(elements) like the library: 2^40 KV heads of 0 keys are no loop at all.
    if (edk.view.holds_no_elements() || edv.view.holds_no_elements()) return;
    for (std::int64_t h = 0; h < HKV; ++h)
      for (std::int64_t t = 0; t < SKV; ++t) {
        for (std::int64_t d = 0; d < DQK; ++d)
          ATTNREF_FUZZ_CHECK(to_double(edk.view(h, t, d)) == 0.0, "dk not zero without queries");
        for (std::int64_t d = 0; d < DV; ++d)
          ATTNREF_FUZZ_CHECK(to_double(edv.view(h, t, d)) == 0.0, "dv not zero without queries");
      }
    return;
  }

  // --- data: finite values in the live region only ----------------------------------------------
  for (std::int64_t h = 0; h < HQ; ++h)
    for (std::int64_t s = 0; s < SQ; ++s)
      for (std::int64_t d = 0; d < DQK; ++d) q.view(h, s, d) = static_cast<Q>(rng.small());
  for (std::int64_t h = 0; h < a.num_kv_heads(); ++h)
    for (std::int64_t t = 0; t < SKV; ++t) {
      for (std::int64_t d = 0; d < DQK; ++d) k.view(h, t, d) = static_cast<KV>(rng.small());
      for (std::int64_t d = 0; d < DV; ++d) v.view(h, t, d) = static_cast<KV>(rng.small());
    }
  if (a.has_sinks())
    for (std::int64_t h = 0; h < HQ; ++h) sinks.view(h) = rng.small() * 2.0f;

  // The mask as the harness evaluates it (one shared head, or one per query head).
  auto allowed = [&heads](std::int64_t h, std::int64_t q, std::int64_t kv) {
    return heads[heads.size() == 1 ? 0 : static_cast<size_t>(h)].allows(q, kv);
  };
  const double scale = static_cast<double>(a.sm_scale);
  const attnref::reference::SplashForwardResult ref =
      attnref::reference::splash_forward(a, allowed);
  // Scores past the accumulator's range overflow (scaled q is formed first): only "no crash and
  // the checked error behaviour" is asked then. The rounding of the scores, relative to the
  // softmax: delta ~ max |sm_scale * q.k| terms * eps * D.
  double max_scaled_q = 0.0;
  for (std::int64_t h = 0; h < HQ; ++h)
    for (std::int64_t s = 0; s < SQ; ++s)
      for (std::int64_t d = 0; d < DQK; ++d)
        max_scaled_q = std::max(max_scaled_q, std::fabs(to_double(a.q(h, s, d)) * scale));
  constexpr double kEps = acc_eps<Q, KV>();
  const bool overflows = max_scaled_q > 1e30 || ref.max_logit_mag > 1e30;
  const double delta = ref.max_logit_mag * kEps * static_cast<double>(DQK + 4);
  const bool comparable = !overflows && delta < 1e-2;
  const double tol = 1e-4 * (kEps > 1e-10 ? 1.0 : 1e-6) + store_eps<Q>() * 2;
  if (verbose) {
    std::fprintf(stderr,
                 "hq=%lld hkv=%lld sq=%lld skv=%lld dqk=%lld dv=%lld mqa=%d bq=%lld bkv=%lld "
                 "scale=%g cap=%g heads=%zu kinds:",
                 static_cast<long long>(HQ), static_cast<long long>(HKV),
                 static_cast<long long>(SQ), static_cast<long long>(SKV),
                 static_cast<long long>(DQK), static_cast<long long>(DV), a.is_mqa ? 1 : 0,
                 static_cast<long long>(b.block_q), static_cast<long long>(b.block_kv), scale,
                 a.soft_cap ? static_cast<double>(*a.soft_cap) : 0.0, heads.size());
    for (const MaskSpec& m : heads) std::fprintf(stderr, " %d", m.kind);
    std::fprintf(stderr, " max_logit_mag=%g delta=%g", ref.max_logit_mag, delta);
    std::fprintf(stderr, " seg=%d sinks=%d slopes=%d alibi=%d order=%d\n",
                 a.has_segment_ids() ? 1 : 0, a.has_sinks() ? 1 : 0,
                 a.alibi_slopes.empty_view() ? 0 : 1, static_cast<int>(a.alibi_convention),
                 static_cast<int>(a.soft_cap_order));
  }

  std::int64_t compared = 0;  // elements compared with float64 (ATTNREF_FUZZ_VERBOSE reports)
  auto compare = [&](double got, double want, double lo, double hi, double mag,
                     const std::string& what) {
    if (overflows) return;
    ATTNREF_FUZZ_CHECK(std::isfinite(got),
                       "non-finite " + what + " for finite inputs: got " + std::to_string(got));
    if (!std::isfinite(want)) return;
    const double slack = tol * (1.0 + mag);
    ATTNREF_FUZZ_CHECK(got >= lo - slack && got <= hi + slack,
                       what + " outside the range of the values: got " + std::to_string(got) +
                           " in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    if (!comparable) return;
    const double t = (tol + 4.0 * delta) * (1.0 + mag);
    ATTNREF_FUZZ_CHECK(std::fabs(got - want) <= t, what + " differs from float64: got " +
                                                       std::to_string(got) + " want " +
                                                       std::to_string(want));
    ++compared;
  };

  // --- forward: fuzz-shaped outputs, then the comparison
  // --------------------------------------------
  Geometry<3> out_g = output_geometry<3>(r, {HQ, SQ, DV}, 24);
  const bool want_lse = r.u8() % 4 != 0;
  Geometry<2> lse_g = output_geometry<2>(r, {HQ, SQ}, want_lse ? 24 : 0);
  Buffer<Q, 3> out;
  Buffer<float, 2> lse;
  make_buffer(out_g, static_cast<Q>(kNaN), &out);
  make_buffer(lse_g, std::numeric_limits<float>::quiet_NaN(), &lse);
  TensorView<float, 2> lse_view = want_lse ? lse.view : TensorView<float, 2>();

  // MaskInfo path (prebuilt, maybe for other blocks) or the mask path.
  const bool use_info = r.chance(60);
  Status expected;
  Status thrown;
  ErrorCode got;
  attnref::MaskInfo info;
  if (use_info) {
    std::int64_t ibq = b.block_q, ibkv = b.block_kv;
    if (r.chance(30)) ibq = r.range(1, 8);
    if (r.chance(30)) ibkv = r.range(1, 8);
    const Profile ip = r.flag() ? Profile::kJax : Profile::kReference;
    const Status built = with_mask([&](const auto& mask) {
      BudgetScope budget("build_mask_info", data);
      return attnref::build_mask_info(mask, ibq, ibkv, ip, &info, a.sharding);
    });
    attnref_fuzz::check_error_renders(built);
    if (!built.ok()) return;
    expected = attnref::check_splash(a, info, fwd_profile);
    attnref_fuzz::check_error_renders(expected);
    if (expected.ok()) expected = output_status(out.view, {HQ, SQ, DV}, "out");
    if (expected.ok() && want_lse) expected = output_status(lse.view, {HQ, SQ}, "logsumexp");
    const auto before_out = snapshot(out);
    const auto before_lse = snapshot(lse);
    {
      BudgetScope budget("splash_attention (MaskInfo)", DataSize(data).add(out).add(lse));
      got = code_of(
          [&] {
            attnref::throw_if_error(attnref::check_splash(a, info, fwd_profile));
            attnref::SplashPlan<Q, KV> plan;
            attnref::throw_if_error(attnref::make_splash_plan(a, info, &plan));
            attnref::splash_attention(plan, out.view, lse_view, serial);
          },
          &thrown);
    }
    ATTNREF_FUZZ_CHECK(got == expected.code(), "splash_forward threw " + thrown.to_string() +
                                                   ", expected " + expected.to_string());
    if (!expected.ok()) {
      ATTNREF_FUZZ_CHECK(unchanged(out, before_out) && unchanged(lse, before_lse),
                         "splash_forward wrote on error");
      return;
    }
  } else {
    expected = fwd_check;
    if (expected.ok()) {
      expected = with_mask([&](const auto& mask) {
        BudgetScope budget("build_mask_info", data);
        attnref::MaskInfo scratch;
        return attnref::build_mask_info(mask, b.block_q, b.block_kv, fwd_profile, &scratch,
                                        a.sharding);
      });
      attnref_fuzz::check_error_renders(expected);
    }
    if (expected.ok()) expected = output_status(out.view, {HQ, SQ, DV}, "out");
    if (expected.ok() && want_lse) expected = output_status(lse.view, {HQ, SQ}, "logsumexp");
    const auto before_out = snapshot(out);
    const auto before_lse = snapshot(lse);
    got = with_mask([&](const auto& mask) {
      BudgetScope budget("splash_attention", DataSize(data).add(out).add(lse));
      return code_of(
          [&] {
            attnref::throw_if_error(attnref::check_splash(a, mask, fwd_profile));
            attnref::splash_attention(a, mask, out.view, lse_view, serial);
          },
          &thrown);
    });
    ATTNREF_FUZZ_CHECK(got == expected.code(), "splash_attention threw " + thrown.to_string() +
                                                   ", expected " + expected.to_string());
    if (!expected.ok()) {
      ATTNREF_FUZZ_CHECK(unchanged(out, before_out) && unchanged(lse, before_lse),
                         "splash_attention wrote on error");
      return;
    }
  }
  for (std::int64_t h = 0; h < HQ; ++h)
    for (std::int64_t s = 0; s < SQ; ++s) {
      const std::string at = "[" + std::to_string(h) + ", " + std::to_string(s);
      for (std::int64_t d = 0; d < DV; ++d) {
        const size_t i = static_cast<size_t>((h * SQ + s) * DV + d);
        compare(to_double(out.view(h, s, d)), ref.out[i], std::min(0.0, ref.lo[i]),
                std::max(0.0, ref.hi[i]), std::max(std::fabs(ref.lo[i]), std::fabs(ref.hi[i])),
                "out" + at + ", " + std::to_string(d) + "]");
      }
      if (!want_lse || overflows) continue;
      const double want = ref.lse[static_cast<size_t>(h * SQ + s)];
      const double gl = static_cast<double>(lse.view(h, s));
      if (std::isinf(want)) {
        ATTNREF_FUZZ_CHECK(gl == want,
                           "logsumexp" + at + "] should be -inf, got " + std::to_string(gl));
      } else if (comparable) {
        ATTNREF_FUZZ_CHECK(std::fabs(gl - want) <= (1e-4 + 4.0 * delta) * (1.0 + std::fabs(want)),
                           "logsumexp" + at + "] differs: got " + std::to_string(gl) + " want " +
                               std::to_string(want));
      }
    }
  if (verbose)
    std::fprintf(stderr, "forward: compared %lld elements with float64\n",
                 static_cast<long long>(compared));
  if (overflows || !bwd_check.ok() || r.chance(40)) return;

  // --- backward --------------------------------------------------------------------------------
  // out and lse from a clean forward call (the fuzzed lse view may be absent).
  std::vector<Q> fout(static_cast<size_t>(HQ * SQ * DV));
  std::vector<float> flse(static_cast<size_t>(HQ * SQ));
  // (The fuzzed forward may have used a MaskInfo of other blocks; this one uses block_sizes.)
  const ErrorCode clean = with_mask([&](const auto& mask) {
    BudgetScope budget("splash_attention (for the backward)", DataSize(data).add(fout).add(flse));
    return code_of(
        [&] {
          attnref::splash_attention(a, mask, TensorView<Q, 3>(fout.data(), {HQ, SQ, DV}),
                                    TensorView<float, 2>(flse.data(), {HQ, SQ}), serial);
        },
        &thrown);
  });
  if (clean != ErrorCode::kOk) return;
  std::vector<Q> dout(fout.size());
  std::vector<double> dout_d(fout.size()), out_d(fout.size());
  for (size_t i = 0; i < dout.size(); ++i) {
    dout[i] = static_cast<Q>(rng.small());
    dout_d[i] = to_double(dout[i]);
    out_d[i] = to_double(fout[i]);
  }
  // The flash form di = sum o * dO uses the kernel's own out, as the kernel does.
  const attnref::reference::SplashBackwardResult grad =
      attnref::reference::splash_backward(a, allowed, out_d, ref.lse, dout_d);
  Geometry<3> dq_g = output_geometry<3>(r, {HQ, SQ, DQK}, 16);
  Geometry<3> dk_g = output_geometry<3>(r, {a.num_kv_heads(), SKV, DQK}, 16);
  Geometry<3> dv_g = output_geometry<3>(r, {a.num_kv_heads(), SKV, DV}, 16);
  const bool want_dsinks = a.has_sinks() && r.flag();
  Geometry<1> dsink_g = output_geometry<1>(r, {want_dsinks ? HQ : 0}, want_dsinks ? 16 : 0);
  Buffer<Q, 3> dq;
  Buffer<KV, 3> dk, dvb;
  Buffer<float, 1> dsinks;
  make_buffer(dq_g, static_cast<Q>(kNaN), &dq);
  make_buffer(dk_g, static_cast<KV>(kNaN), &dk);
  make_buffer(dv_g, static_cast<KV>(kNaN), &dvb);
  make_buffer(dsink_g, std::numeric_limits<float>::quiet_NaN(), &dsinks);
  attnref::SplashGradients<Q, KV> grads{dq.view, dk.view, dvb.view,
                                        want_dsinks ? dsinks.view : TensorView<float, 1>()};
  const TensorView<const Q, 3> out_c(fout.data(), {HQ, SQ, DV});
  const TensorView<const Q, 3> dout_c(dout.data(), {HQ, SQ, DV});
  const TensorView<const float, 2> lse_c(flse.data(), {HQ, SQ});
  const DataSize bwd_data =
      DataSize(data).add(fout).add(flse).add(dout).add(dq).add(dk).add(dvb).add(dsinks);
  expected = with_mask([&](const auto& mask) {
    BudgetScope budget("build_mask_info (backward)", bwd_data);
    attnref::MaskInfo scratch;
    return attnref::build_mask_info(mask, b.q_dkv(), b.kv_dkv(), Profile::kReference, &scratch,
                                    a.sharding);
  });
  if (expected.ok())
    expected = attnref::check_splash_backward_tensors(
        a, TensorView<Q, 3>(fout.data(), {HQ, SQ, DV}), lse_c,
        TensorView<Q, 3>(dout.data(), {HQ, SQ, DV}), grads.dq, grads.dk, grads.dv, grads.dsinks);
  attnref_fuzz::check_error_renders(expected);
  const auto before_dq = snapshot(dq);
  const auto before_dk = snapshot(dk);
  const auto before_dv = snapshot(dvb);
  const auto before_ds = snapshot(dsinks);
  got = with_mask([&](const auto& mask) {
    BudgetScope budget("splash_attention_backward", bwd_data);
    return code_of(
        [&] {
          attnref::throw_if_error(attnref::check_splash_backward(a, mask, bwd_profile));
          attnref::splash_attention_backward(a, mask, out_c, lse_c, dout_c, grads, serial);
        },
        &thrown);
  });
  ATTNREF_FUZZ_CHECK(got == expected.code(), "splash_attention_backward threw " +
                                                 thrown.to_string() + ", expected " +
                                                 expected.to_string());
  if (!expected.ok()) {
    ATTNREF_FUZZ_CHECK(unchanged(dq, before_dq) && unchanged(dk, before_dk) &&
                           unchanged(dvb, before_dv) && unchanged(dsinks, before_ds),
                       "splash_attention_backward wrote on error");
    return;
  }
  // Gradients: compared against the sums of absolute terms (cancellation-aware), with the
  // rounding of the stored dtype on top.
  // logsumexp is float for every dtype: p = exp(x - lse) carries its rounding.
  double max_lse = 0.0;
  for (float l : flse)
    if (std::isfinite(l)) max_lse = std::max(max_lse, std::fabs(static_cast<double>(l)));
  const double lse_err = 0x1p-23 * (1.0 + max_lse);
  auto gcompare = [&](double gotv, double want, double mag, double eps_store,
                      const std::string& what) {
    // A float logsumexp of magnitude L is off by ~L * 2^-24, a factor exp(that) on p (double
    // inputs too: the residual is f32 by design, as in JAX): past that nothing is asked.
    if (lse_err > 1.0) return;
    ATTNREF_FUZZ_CHECK(std::isfinite(gotv), "non-finite " + what + " for finite inputs");
    if (!comparable || lse_err > 1e-3) return;
    const double t = (1e-4 * (kEps > 1e-10 ? 1.0 : 1e-6) + 8.0 * delta + 4.0 * lse_err +
                      16.0 * kEps * static_cast<double>(DV + DQK)) *
                         (1.0 + mag) +
                     4.0 * eps_store * std::fabs(want) + 1e-300;
    ATTNREF_FUZZ_CHECK(std::fabs(gotv - want) <= t,
                       what + " differs from float64: got " + std::to_string(gotv) + " want " +
                           std::to_string(want) + " mag " + std::to_string(mag));
    ++compared;
  };
  for (std::int64_t h = 0; h < HQ; ++h)
    for (std::int64_t s = 0; s < SQ; ++s)
      for (std::int64_t d = 0; d < DQK; ++d) {
        const size_t i = static_cast<size_t>((h * SQ + s) * DQK + d);
        gcompare(to_double(dq.view(h, s, d)), grad.dq[i], grad.dq_mag[i], store_eps<Q>(), "dq");
      }
  // Under MQA with a [1, ...] view every query head maps to KV head 0, which is what the
  // reference's h / (hq / 1) gives too.
  for (std::int64_t h = 0; h < a.num_kv_heads(); ++h)
    for (std::int64_t t = 0; t < SKV; ++t) {
      for (std::int64_t d = 0; d < DQK; ++d) {
        const size_t i = static_cast<size_t>((h * SKV + t) * DQK + d);
        gcompare(to_double(dk.view(h, t, d)), grad.dk[i], grad.dk_mag[i], store_eps<KV>(), "dk");
      }
      for (std::int64_t d = 0; d < DV; ++d) {
        const size_t i = static_cast<size_t>((h * SKV + t) * DV + d);
        gcompare(to_double(dvb.view(h, t, d)), grad.dv[i], grad.dv_mag[i], store_eps<KV>(), "dv");
      }
    }
  if (want_dsinks)
    for (std::int64_t h = 0; h < HQ; ++h)
      gcompare(static_cast<double>(dsinks.view(h)), grad.dsinks[static_cast<size_t>(h)],
               grad.dsinks_mag[static_cast<size_t>(h)], 0x1p-23, "dsinks");
  if (verbose)
    std::fprintf(stderr, "backward: compared %lld elements with float64 in all\n",
                 static_cast<long long>(compared));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static constexpr attnref_fuzz::CaseFn kCases[] = {
      run_case<float, float>,
      run_case<double, double>,
      run_case<float, Eigen::bfloat16>,
  };
  return attnref_fuzz::run_one(data, size, kCases);
}
