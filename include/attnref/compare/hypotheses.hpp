// SPDX-License-Identifier: Apache-2.0
/// @file hypotheses.hpp
/// Likely causes of a mismatch: the table of single changes to the reference (a wrong
/// sm_scale, the interleaved GQA mapping, another K/V layout, K and V swapped, a soft cap
/// missing or added, a length off by one, the other causal diagonal, a sliding window off by
/// one, sinks ignored, a log2 logsumexp) and the loop that re-runs the reference under each on
/// the mismatching sequences and heads and keeps the changes under which the user's output
/// matches. A family says which features it has (`Features`) and how to run one change
/// (`predict`); a feature a family gains is one field here and one branch in its `predict`.
/// The parts of a comparison every family shares (the tally against the reference, the common
/// features, the one-head re-run's pages and options) are in `detail` below.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "attnref/compare/report.hpp"
#include "attnref/core/checked_math.hpp"
#include "attnref/core/executor.hpp"
#include "attnref/core/kv_layout.hpp"
#include "attnref/core/status.hpp"
#include "attnref/core/tensor_view.hpp"

namespace attnref {
namespace compare {

/// One change to the reference. Fields left at their defaults change nothing.
struct Change {
  std::string what;     ///< the cause, in words
  Reproduce reproduce;  ///< how the caller reproduces it
  int group = 0;        ///< changes of one group compete: only the closest is reported
  std::optional<float> sm_scale;
  bool change_soft_cap = false;
  std::optional<float> soft_cap;  ///< with change_soft_cap: the cap (none: no cap)
  bool swap_kv = false;
  bool interleaved_heads = false;               ///< query head qh reads KV head qh % Hkv
  std::optional<KvLayout> layout;               ///< the same bytes read in this layout
  std::int64_t length_delta = 0;                ///< +-1 key per sequence
  bool top_left = false;                        ///< causal diagonal at the first key (ragged)
  std::optional<std::int64_t> diagonal_offset;  ///< splash: the causal/local offset
  std::optional<std::int64_t> window;           ///< the sliding window
  std::optional<std::int64_t> local_left;       ///< splash's local mask: its left side
  bool drop_sinks = false;
  bool lse_log2 = false;  ///< the logsumexp is log2 of the denominator
};

/// What the family and the run have, which decides the changes worth trying.
struct Features {
  float sm_scale = 1.0f;
  std::int64_t head_dim = 0;
  std::optional<float> soft_cap;
  std::int64_t num_q_heads = 0, num_kv_heads = 0;
  std::optional<KvLayout> layout;  ///< the pools' layout, when they are dense in one
  const char* layout_inputs = "";  ///< "k_pages/v_pages": the inputs a layout change reshapes
  const char* lengths_field = "";  ///< "lengths", "kv_lens" ("" when no lengths)
  bool causal_rows = false;        ///< ragged: bottom-right causal rows with q_len < kv_len
  std::optional<std::int64_t> splash_offset;  ///< splash causal/local: the asked offset
  std::int64_t q_seq_len = 0, kv_seq_len = 0;
  std::optional<std::int64_t> window;      ///< the asked sliding window
  std::optional<std::int64_t> local_left;  ///< splash's local mask: the asked left side
  bool has_sinks = false;
  /// The inputs K and V come in ("k_pages", "v_pages"; "k", "v"); `swap_second` empty: one
  /// combined pool `swap_first`; `swap_first` empty: K and V cannot swap (their head_dims
  /// differ). `swap_scales`: their scales swap with them.
  const char* swap_first = "";
  const char* swap_second = "";
  bool swap_scales = false;
  bool lse_given = false;
};

namespace detail {

/// Appends to `out` a change named `what`, reproduced by `reproduce`, in `group`; returns it for
/// the caller to set what it changes.
inline Change& add_change(std::vector<Change>* out, std::string what, Reproduce reproduce,
                          int group = 0) {
  Change& c = out->emplace_back();
  c.what = std::move(what);
  c.reproduce = std::move(reproduce);
  c.group = group;
  return c;
}

/// The changes to the inputs: K and V swapped, the other GQA mapping, another K/V layout.
inline void input_changes(const Features& f, std::vector<Change>* out) {
  if (f.swap_first[0] != '\0') {
    add_change(out, "K and V swapped",
               {Reproduce::Kind::kSwap, f.swap_first, f.swap_scales ? "scales" : "", f.swap_second})
        .swap_kv = true;
  }
  // attnref maps qh / G; an output made with qh % Hkv and a reference expecting qh % Hkv are
  // the same relation between the two outputs, so one change covers both directions.
  if (f.num_kv_heads > 1 && f.num_q_heads > f.num_kv_heads) {
    add_change(out,
               "GQA mapping: query head qh read KV head qh % num_kv_heads (interleaved) instead "
               "of qh / group (" +
                   std::to_string(f.num_q_heads / f.num_kv_heads) + " query heads per KV head)",
               {Reproduce::Kind::kInterleaveQueryHeads, "q", "", ""})
        .interleaved_heads = true;
  }
  if (f.layout) {
    for (KvLayout l : {KvLayout::kJax, KvLayout::kNhd, KvLayout::kHnd}) {
      if (l == *f.layout) continue;
      add_change(
          out,
          std::string("K/V pages (stored ") + to_string(*f.layout) + ") read as " + to_string(l),
          {Reproduce::Kind::kRelayout, "kv_layout", to_string(l), f.layout_inputs}, 1)
          .layout = l;
    }
  }
}

/// The changes to which keys a row sees: a length off by one, the other causal diagonal, a
/// sliding window or local mask off by one.
inline void position_changes(const Features& f, std::vector<Change>* out) {
  if (f.lengths_field[0] != '\0') {
    for (int delta : {-1, 1}) {
      add_change(out,
                 delta < 0 ? "length off by one: the last key of each sequence dropped"
                           : "length off by one: one key past each sequence's length read",
                 {Reproduce::Kind::kShiftEach, f.lengths_field, delta < 0 ? "-1" : "+1", ""}, 2)
          .length_delta = delta;
    }
  }
  if (f.causal_rows) {
    add_change(out,
               "causal diagonal aligned top-left (query row r sees keys <= r) instead of "
               "bottom-right (keys <= kv_len - q_len + r)",
               {Reproduce::Kind::kQueryLengths, f.lengths_field, "", ""})
        .top_left = true;
  }
  if (f.splash_offset && f.q_seq_len != f.kv_seq_len) {
    const std::int64_t br = f.kv_seq_len - f.q_seq_len;
    for (std::int64_t o : {std::int64_t{0}, br}) {
      if (o == *f.splash_offset) continue;
      add_change(out,
                 o == 0 ? "causal diagonal aligned top-left (offset 0) instead of at offset " +
                              std::to_string(*f.splash_offset)
                        : "causal diagonal aligned bottom-right (offset kv_seq_len - q_seq_len = " +
                              std::to_string(br) + ") instead of at offset " +
                              std::to_string(*f.splash_offset),
                 {Reproduce::Kind::kSet, "offset", std::to_string(o), ""})
          .diagonal_offset = o;
    }
  }
  // A window and a local mask's left side are apart: a run may have both, each off alone.
  auto off_by_one = [&](std::int64_t asked, const char* field, int group, bool local) {
    for (std::int64_t delta : {-1, 1}) {
      std::int64_t w = 0;
      // A window of INT64_MAX (unbounded) is valid; one more is not a window.
      if (!checked_add(asked, delta, &w) || w <= 0) continue;
      Change& c =
          add_change(out,
                     "sliding window off by one: " + std::to_string(w) + " instead of " +
                         std::to_string(asked) + (local ? " (the local mask's left side)" : ""),
                     {Reproduce::Kind::kSet, field, std::to_string(w), ""}, group);
      (local ? c.local_left : c.window) = w;
    }
  };
  if (f.window) off_by_one(*f.window, "sliding_window", 3, false);
  if (f.local_left) off_by_one(*f.local_left, "local_left", 6, true);
}

/// The changes to the features: sinks ignored, a soft cap missing or added, a log2 logsumexp.
inline void feature_changes(const Features& f, std::vector<Change>* out) {
  if (f.has_sinks) {
    add_change(out, "attention sinks ignored", {Reproduce::Kind::kUnset, "sinks", "", ""})
        .drop_sinks = true;
  }
  if (f.soft_cap) {
    add_change(out, "soft cap " + num(*f.soft_cap) + " not applied",
               {Reproduce::Kind::kUnset, "soft_cap", "", ""})
        .change_soft_cap = true;
  } else {
    for (float cap : {50.0f, 30.0f, 20.0f, 10.0f}) {
      Change& c = add_change(out, "a soft cap of " + num(cap) + " applied that was not asked for",
                             {Reproduce::Kind::kSet, "soft_cap", num(cap), ""}, 4);
      c.change_soft_cap = true;
      c.soft_cap = cap;
    }
  }
  if (f.lse_given) {
    add_change(out, "logsumexp in log2 (base 2) instead of the natural log",
               {Reproduce::Kind::kLseLog2, "", "", ""})
        .lse_log2 = true;
  }
}

/// The changes to sm_scale: 1/sqrt(head_dim), 1, and the scale times or over ln 2.
inline void scale_changes(const Features& f, std::vector<Change>* out) {
  const double s = f.sm_scale, inv_sqrt_d = 1.0 / std::sqrt(static_cast<double>(f.head_dim));
  auto scale = [&](double v, const std::string& why) {
    if (static_cast<float>(v) == f.sm_scale || !(v > 0) || !std::isfinite(v)) return;
    add_change(out, why, {Reproduce::Kind::kSet, "sm_scale", num(v), ""}, 5).sm_scale =
        static_cast<float>(v);
  };
  if (f.head_dim > 0) {
    scale(inv_sqrt_d,
          "sm_scale 1/sqrt(head_dim) = " + num(inv_sqrt_d) + " used instead of " + num(s));
  }
  scale(1.0, "sm_scale 1 used instead of " + num(s));
  scale(s * std::log(2.0),
        "logits scaled by ln 2 (exp2 of sm_scale * q.k without the "
        "log2(e) factor): sm_scale " +
            num(s * std::log(2.0)));
  scale(s / std::log(2.0),
        "logits scaled by 1/ln 2 (log2(e) folded into the scale, then exp): "
        "sm_scale " +
            num(s / std::log(2.0)));
}

}  // namespace detail

/// The changes worth trying for `f`, most specific first.
inline std::vector<Change> candidate_changes(const Features& f) {
  std::vector<Change> out;
  detail::input_changes(f, &out);
  detail::position_changes(f, &out);
  detail::feature_changes(f, &out);
  // The scale last: a scale change can imitate other causes on small inputs.
  detail::scale_changes(f, &out);
  return out;
}

/// The sequences and heads a hypothesis runs on.
struct Subset {
  std::vector<std::int64_t> sequences;
  std::vector<std::int64_t> heads;
};

/// A family's run of one change over `subset`: the output in the order (sequence, head, row
/// of the sequence, dim) and the logsumexp in the order (sequence, head, row). Returns false
/// with `why` set when the change cannot be run (the changed inputs fail validation).
using Predict = std::function<bool(const Change&, const Subset&, std::vector<double>* out,
                                   std::vector<double>* lse, std::string* why)>;

/// Picks the mismatching sequences and heads of `e` within `opt.work_cap`
/// (`cost(sequence)` is the work of one head of it, saturated at INT64_MAX) and notes in `r`
/// when it cuts.
inline Subset pick_subset(const OutputShape& shape, const RowErrors& e,
                          const std::function<std::int64_t(std::int64_t)>& cost, const Options& opt,
                          Report* r) {
  std::vector<std::int64_t> seqs, heads;
  for (std::size_t row = 0; row < shape.rows.size(); ++row) {
    const RowInfo& ri = shape.rows[row];
    if (ri.kind == RowKind::kPadding) continue;
    for (std::int64_t h = 0; h < shape.heads; ++h) {
      if (e.bad[row * static_cast<std::size_t>(shape.heads) + static_cast<std::size_t>(h)] == 0)
        continue;
      seqs.push_back(ri.sequence);
      heads.push_back(h);
    }
  }
  auto unique = [](std::vector<std::int64_t>* v) {
    std::sort(v->begin(), v->end());
    v->erase(std::unique(v->begin(), v->end()), v->end());
  };
  unique(&seqs);
  unique(&heads);
  Subset s;
  std::int64_t work = 0;  // saturates: costs come from lengths up to INT64_MAX
  const auto nh = static_cast<std::int64_t>(heads.size());
  for (std::int64_t q : seqs) {
    const std::int64_t c = std::max<std::int64_t>(cost(q), 1);
    const std::int64_t more = saturating_add(work, saturating_mul(c, nh));
    if (more > opt.work_cap && !s.sequences.empty()) break;
    work = more;
    s.sequences.push_back(q);
  }
  s.heads = heads;
  if (!s.sequences.empty() && work > opt.work_cap) {
    const std::int64_t c = std::max<std::int64_t>(cost(s.sequences[0]), 1);
    const std::int64_t keep = std::max<std::int64_t>(opt.work_cap / c, 1);
    if (keep < nh) s.heads.resize(static_cast<std::size_t>(keep));
  }
  if (s.sequences.size() < seqs.size() || s.heads.size() < heads.size()) {
    r->cap_note = "the hypotheses ran on " + std::to_string(s.sequences.size()) + " of " +
                  std::to_string(seqs.size()) + " mismatching sequences and " +
                  std::to_string(s.heads.size()) + " of " + std::to_string(heads.size()) +
                  " mismatching heads (work cap " + std::to_string(opt.work_cap) + ")";
  }
  return s;
}

/// Runs every change of `changes` on `subset` and records in `r` those under which `got`
/// (and `got_lse`, when not empty) matches within `opt.tol`; of one group only the closest.
/// Once a `StoppableExecutor` running it stops, it returns, `r`'s causes incomplete.
inline void try_changes(const std::vector<Change>& changes, const OutputShape& shape,
                        const Subset& subset, const std::vector<double>& got,
                        const std::vector<double>& got_lse, const Options& opt,
                        const Predict& predict, Report* r) {
  if (subset.sequences.empty() || subset.heads.empty()) return;
  std::vector<std::vector<std::int64_t>> rows_of(subset.sequences.size());
  for (std::size_t i = 0; i < subset.sequences.size(); ++i)
    for (std::size_t row = 0; row < shape.rows.size(); ++row)
      if (shape.rows[row].kind != RowKind::kPadding &&
          shape.rows[row].sequence == subset.sequences[i])
        rows_of[i].push_back(static_cast<std::int64_t>(row));
  std::vector<Cause> found;
  std::vector<int> groups;
  for (const Change& c : changes) {
    if (attnref::detail::stop_requested()) return;
    std::vector<double> out, lse;
    std::string why;
    Change run = c;
    if (c.lse_log2) run = Change{};
    if (!predict(run, subset, &out, &lse, &why)) {
      if (!why.empty()) r->skipped.push_back(c.what + ": " + why);
      continue;
    }
    if (c.lse_log2)
      for (double& x : lse) x /= std::log(2.0);
    bool match = true;
    double worst = 0, lse_worst = 0;
    std::size_t k = 0, kl = 0;
    for (std::size_t i = 0; i < subset.sequences.size() && match; ++i)
      for (std::int64_t h : subset.heads)
        for (std::int64_t row : rows_of[i]) {
          for (std::int64_t d = 0; d < shape.dim; ++d, ++k) {
            const double g = got[static_cast<std::size_t>(shape.index(row, h, d))];
            if (!close(g, out[k], opt.tol)) match = false;
            const double err = std::fabs(g - out[k]);
            if (!std::isnan(err)) worst = std::max(worst, err);
          }
          if (!got_lse.empty()) {
            const double g = got_lse[static_cast<std::size_t>(shape.lse_index(row, h))];
            if (!close(g, lse[kl], opt.tol)) match = false;
            const double err = std::fabs(g - lse[kl]);
            if (!std::isnan(err)) lse_worst = std::max(lse_worst, err);
            ++kl;
          }
        }
    if (!match) continue;
    Cause cause{c.what, c.reproduce, c.lse_log2 ? lse_worst : worst};
    const auto same = std::find(groups.begin(), groups.end(), c.group);
    if (c.group != 0 && same != groups.end()) {
      Cause& prev = found[static_cast<std::size_t>(same - groups.begin())];
      if (cause.max_abs < prev.max_abs) prev = cause;
      continue;
    }
    found.push_back(cause);
    groups.push_back(c.group);
  }
  r->causes = found;
}

/// The layout `view` is dense in (a logical `[Hkv, P, S, D]` view over a page pool stored in
/// that layout), if any; with size-1 extents several coincide and the first is returned.
template <class T>
std::optional<KvLayout> dense_layout(const TensorView<const T, 4>& view) {
  for (KvLayout l : {KvLayout::kJax, KvLayout::kNhd, KvLayout::kHnd}) {
    const TensorView<const T, 4> d = kv_pages_view(view.data, l, view.extents[0], view.extents[1],
                                                   view.extents[2], view.extents[3]);
    if (d.strides == view.strides) return l;
  }
  return std::nullopt;
}

/// `view` (dense in some layout) with its bytes read in `layout` instead.
template <class T>
TensorView<const T, 4> reread_in_layout(const TensorView<const T, 4>& view, KvLayout layout) {
  return kv_pages_view(view.data, layout, view.extents[0], view.extents[1], view.extents[2],
                       view.extents[3], view.buffer_size);
}

/// KV head `h` of a `[Hkv, ...]` view, as a view of one head.
template <class T, std::size_t Rank>
TensorView<const T, Rank> one_head(const TensorView<const T, Rank>& view, std::int64_t h) {
  std::array<std::int64_t, Rank> ext = view.extents;
  ext[0] = 1;
  const std::int64_t size = view.buffer_size < 0 ? -1 : view.buffer_size - h * view.strides[0];
  return TensorView<const T, Rank>(view.data + h * view.strides[0], ext, view.strides, size);
}

namespace detail {

/// `kShapeMismatch` unless `got` holds `expected` values (`what` a literal: "got", "got_lse").
inline Status check_got_size(std::size_t got, std::int64_t expected, const char* what) {
  if (static_cast<std::int64_t>(got) == expected) return Status();
  return Status(ErrorCode::kShapeMismatch, "", "{f} holds {0} values; the reference has {1}",
                "compare an output of the reference's shape",
                {static_cast<std::int64_t>(got), expected}, {}, what);
}

/// A kernel value as double (half and bfloat16 through float).
template <class T>
double value_of(const T& x) {
  if constexpr (std::is_same<T, double>::value) {
    return x;
  } else {
    return static_cast<double>(static_cast<float>(x));
  }
}

template <class T>
std::vector<double> as_doubles(const std::vector<T>& x) {
  std::vector<double> out(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) out[i] = value_of(x[i]);
  return out;
}

/// The reference's output `ref` and logsumexp `ref_lse` against `got` (and `got_lse`, when not
/// empty): the totals of `r` and where the mismatches are.
template <class Out>
RowErrors tally_reference(const OutputShape& shape, const std::vector<double>& got,
                          const std::vector<Out>& ref, const std::vector<double>& got_lse,
                          const std::vector<float>& ref_lse, const Options& opt, Report* r) {
  const std::vector<double> expected_lse =
      got_lse.empty() ? std::vector<double>{} : as_doubles(ref_lse);
  const RowErrors e = tally(shape, got, as_doubles(ref), got_lse, expected_lse, opt, r);
  localize(shape, e, r);
  return e;
}

/// The features every family's arguments `a` have (their options and head counts).
template <class Args>
Features common_features(const Args& a, std::int64_t head_dim, const std::vector<double>& got_lse) {
  Features f;
  f.sm_scale = a.sm_scale;
  f.head_dim = head_dim;
  f.soft_cap = a.soft_cap;
  f.num_q_heads = a.num_q_heads();
  f.num_kv_heads = a.num_kv_heads();
  f.window = a.sliding_window;
  f.has_sinks = !a.sinks.empty_view();
  f.lse_given = !got_lse.empty();
  return f;
}

/// The KV head query head qh reads under change `c`: qh / group, or qh % Hkv (interleaved).
inline std::int64_t kv_head_of(const Change& c, std::int64_t qh, std::int64_t num_q_heads,
                               std::int64_t num_kv_heads) noexcept {
  return c.interleaved_heads ? qh % num_kv_heads : qh / (num_q_heads / num_kv_heads);
}

/// KV head `kv_head` of `a`'s K and V pages as the pages of a one-head re-run `b` under `c`
/// (K and V swapped, or their bytes read in another layout).
template <class Args, class HeadArgs>
void set_head_pages(const Args& a, std::int64_t kv_head, const Change& c, HeadArgs* b) {
  auto k = a.k_pages, v = a.v_pages;
  if (c.layout) {
    k = reread_in_layout(k, *c.layout);
    v = reread_in_layout(v, *c.layout);
  }
  b->k_pages = one_head(c.swap_kv ? v : k, kv_head);
  b->v_pages = one_head(c.swap_kv ? k : v, kv_head);
}

/// The options of a one-head re-run `b` of `a`'s query head qh under `c`: sm_scale, soft cap
/// and sliding window (changed or not), qh's sink (unless dropped) and ALiBi slope.
template <class Args, class HeadArgs>
void set_head_options(const Args& a, std::int64_t qh, const Change& c, HeadArgs* b) {
  using Row = TensorView<const float, 1>;
  b->sm_scale = c.sm_scale ? *c.sm_scale : a.sm_scale;
  b->soft_cap = c.change_soft_cap ? c.soft_cap : a.soft_cap;
  b->sliding_window = c.window ? c.window : a.sliding_window;
  b->sinks = !a.sinks.empty_view() && !c.drop_sinks ? Row(&a.sinks(qh), {1}) : Row();
  b->alibi_slopes = !a.alibi_slopes.empty_view() ? Row(&a.alibi_slopes(qh), {1}) : Row();
}

}  // namespace detail

}  // namespace compare
}  // namespace attnref
