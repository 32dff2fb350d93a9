// SPDX-License-Identifier: Apache-2.0
/// @file report.hpp
/// The comparison report of a user's kernel output against attnref's reference: totals, where
/// the mismatches are (per sequence and query head, per query row, along the key positions),
/// and the likely causes that `compare/paged.hpp`, `compare/ragged.hpp` and
/// `compare/splash.hpp` find by re-running the reference with one change at a time.
///
/// Family-agnostic: an output is described by its rows (a row is one query token: its
/// sequence, its key position and whether it is a decode, prefill or padding row) and its
/// heads, in `[row, head, dim]` or `[head, row, dim]` order.
///
/// Example:
/// @code
///   attnref::compare::Report r = attnref::compare::compare_paged(args, got, {});
///   if (!r.ok()) std::cerr << attnref::compare::format_report(r);
/// @endcode
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace attnref {
namespace compare {

/// An element matches when |got - expected| <= atol + rtol * |expected|; non-finite values match
/// only the same non-finite value (NaN matches NaN).
struct Tolerance {
  double atol = 1e-5;
  double rtol = 1e-5;
};

inline bool close(double got, double expected, Tolerance tol) noexcept {
  if (std::isnan(got) || std::isnan(expected)) return std::isnan(got) && std::isnan(expected);
  if (!std::isfinite(got) || !std::isfinite(expected)) return got == expected;
  return std::fabs(got - expected) <= tol.atol + tol.rtol * std::fabs(expected);
}

/// What to compare and how hard to try.
struct Options {
  Tolerance tol;
  /// Padding rows (rows past cu_q_lens[num_seqs], sequences of length 0) are not compared.
  bool ignore_padding = false;
  /// Hypotheses re-run the reference on at most this many (row, key) products times head_dim
  /// per change, on the mismatching sequences and heads only; beyond it they take the first
  /// sequences/heads that fit, and the report says so.
  std::int64_t work_cap = std::int64_t{1} << 26;
};

/// How the caller makes a cause's change to reproduce the user's output, as data: which field
/// (an option or input, by its name in the family's args: "soft_cap", "lengths", "k_pages"),
/// which value, and what is done with it. Each front end words it in its own terms
/// (`words_of` below in C++ terms).
struct Reproduce {
  enum class Kind {
    kNone,                  ///< nothing the caller can change
    kSet,                   ///< option `field` set to `value` ("offset", "local_left": the mask's)
    kUnset,                 ///< option `field` left out
    kEnable,                ///< the boolean option `field` turned on
    kSwap,                  ///< inputs `field` and `other` swapped; `value` "scales": theirs too;
                            ///< `other` empty: K and V inside the combined pool `field`
    kInterleaveQueryHeads,  ///< input `field` (q) with its heads reordered (head h * group +
                            ///< g := query head g * num_kv_heads + h), the output's put back
    kRelayout,              ///< option `field` (kv_layout) set to `value`, with the inputs `other`
                            ///< ("k_pages/v_pages") reshaped (same bytes) to that layout's shape
    kShiftEach,             ///< each entry of input `field` shifted by `value` ("-1", "+1")
    kQueryLengths,          ///< input `field` set to each sequence's query length
    kLseLog2,               ///< the logsumexp output divided by ln 2
  };
  Kind kind = Kind::kNone;
  std::string field, value, other;
};

/// One change to the reference under which the user's output matches.
struct Cause {
  std::string what;     ///< "sm_scale 1/sqrt(D) = 0.125 was used instead of 1"
  Reproduce reproduce;  ///< how to reproduce the user's output
  double max_abs = 0;   ///< the largest |got - reference| under that change
};

/// `r` in the C++ library's terms: "soft_cap = 30", "k_pages and v_pages swapped".
inline std::string words_of(const Reproduce& r) {
  using K = Reproduce::Kind;
  switch (r.kind) {
    case K::kSet:
      return r.field + " = " + r.value;
    case K::kUnset:
      return r.field + " left out";
    case K::kEnable:
      return r.field + " = true";
    case K::kSwap:
      if (r.other.empty()) return "K and V swapped in " + r.field;
      return r.field + " and " + r.other + " swapped" +
             (r.value == "scales" ? " (and their scales)" : "");
    case K::kInterleaveQueryHeads:
      return r.field +
             " with its heads reordered (head h * group + g := query head g * num_kv_heads + "
             "h) and the output's heads put back";
    case K::kRelayout:
      return r.field + " = " + r.value + " with " + r.other + " reshaped (same bytes) to the " +
             r.value + " shape";
    case K::kShiftEach:
      return r.field + " with each length " + r.value.substr(0, 1) + " " + r.value.substr(1);
    case K::kQueryLengths:
      return r.field + " set to each sequence's query length";
    case K::kLseLog2:
      return "the logsumexp divided by ln 2";
    case K::kNone:
      break;
  }
  return "";
}

/// A front end's wording of a Reproduce.
using ReproduceWords = std::string (*)(const Reproduce&);

/// The role of one output row.
enum class RowKind { kPlain, kDecode, kPrefill, kPadding };

/// One query row of the output: its sequence, its key position (-1: none) and role.
struct RowInfo {
  std::int64_t sequence = 0;
  std::int64_t position = -1;
  RowKind kind = RowKind::kPlain;
};

/// The shape of an output: `rows` query rows of `heads` heads of `dim` values each.
struct OutputShape {
  std::vector<RowInfo> rows;
  std::int64_t heads = 0;
  std::int64_t dim = 0;
  bool head_major = false;  ///< [head, row, dim] (splash) rather than [row, head, dim]
  /// Flat index of element (row, head, d).
  std::int64_t index(std::int64_t row, std::int64_t head, std::int64_t d) const noexcept {
    const auto n = static_cast<std::int64_t>(rows.size());
    return head_major ? (head * n + row) * dim + d : (row * heads + head) * dim + d;
  }
  /// Flat index of logsumexp (row, head).
  std::int64_t lse_index(std::int64_t row, std::int64_t head) const noexcept {
    const auto n = static_cast<std::int64_t>(rows.size());
    return head_major ? head * n + row : row * heads + head;
  }
};

/// The report. `ok()` when every compared element (and logsumexp, when given) matches.
struct Report {
  std::int64_t count = 0;       ///< elements compared (output and logsumexp)
  std::int64_t mismatches = 0;  ///< output elements beyond tolerance
  std::int64_t lse_mismatches = 0;
  double max_abs = 0, max_rel = 0, lse_max_abs = 0;
  std::int64_t ignored_padding = 0;  ///< padding elements left out by `ignore_padding`
  bool padding_only = false;         ///< every mismatch is on a padding row
  std::vector<std::string> where;    ///< localization, one line each
  std::vector<Cause> causes;         ///< most specific first
  std::string cap_note;              ///< set when the hypotheses ran on a cut subset
  std::vector<std::string> skipped;  ///< hypotheses that could not be tried, and why
  bool ok() const noexcept { return mismatches == 0 && lse_mismatches == 0; }
};

namespace detail {

inline std::string num(double x) {
  std::ostringstream s;
  s.precision(6);
  s << x;
  return s.str();
}

/// "0, 3-5, 9" (at most `limit` ranges, then "...").
inline std::string ranges(const std::vector<std::int64_t>& sorted, std::size_t limit = 8) {
  std::string s;
  std::size_t shown = 0;
  for (std::size_t i = 0; i < sorted.size();) {
    std::size_t j = i;
    while (j + 1 < sorted.size() && sorted[j + 1] == sorted[j] + 1) ++j;
    if (shown == limit) return s + ", ...";
    if (!s.empty()) s += ", ";
    s += std::to_string(sorted[i]);
    if (j > i) s += "-" + std::to_string(sorted[j]);
    ++shown;
    i = j + 1;
  }
  return s;
}

}  // namespace detail

/// Per (row, head): the largest error, the values compared and those beyond tolerance.
struct RowErrors {
  std::vector<double> max_abs;         ///< [rows * heads], row-major over (row, head)
  std::vector<std::int64_t> compared;  ///< [rows * heads]
  std::vector<std::int64_t> bad;       ///< [rows * heads]
};

/// Compares `got` with `expected` (both in `shape`'s order) and fills the totals of `r`;
/// `got_lse`/`expected_lse` (empty: not compared) are `[rows, heads]` or `[heads, rows]`.
inline RowErrors tally(const OutputShape& shape, const std::vector<double>& got,
                       const std::vector<double>& expected, const std::vector<double>& got_lse,
                       const std::vector<double>& expected_lse, const Options& opt, Report* r) {
  const auto rows = static_cast<std::int64_t>(shape.rows.size());
  RowErrors e;
  e.max_abs.assign(static_cast<std::size_t>(rows * shape.heads), 0.0);
  e.bad.assign(e.max_abs.size(), 0);
  e.compared.assign(e.max_abs.size(), 0);
  const bool with_lse = !got_lse.empty();
  for (std::int64_t row = 0; row < rows; ++row) {
    const bool padding = shape.rows[static_cast<std::size_t>(row)].kind == RowKind::kPadding;
    for (std::int64_t h = 0; h < shape.heads; ++h) {
      const auto rh = static_cast<std::size_t>(row * shape.heads + h);
      if (padding && opt.ignore_padding) {
        r->ignored_padding += shape.dim + (with_lse ? 1 : 0);
        continue;
      }
      for (std::int64_t d = 0; d < shape.dim; ++d) {
        const auto i = static_cast<std::size_t>(shape.index(row, h, d));
        const double a = got[i], x = expected[i];
        const double err = std::fabs(a - x);
        ++r->count;
        ++e.compared[rh];
        if (!close(a, x, opt.tol)) {
          ++r->mismatches;
          ++e.bad[rh];
          e.max_abs[rh] = std::isnan(err) ? std::numeric_limits<double>::infinity()
                                          : std::max(e.max_abs[rh], err);
        }
        if (!std::isnan(err)) {
          r->max_abs = std::max(r->max_abs, err);
          if (x != 0) r->max_rel = std::max(r->max_rel, err / std::fabs(x));
        }
      }
      if (with_lse) {
        const auto i = static_cast<std::size_t>(shape.lse_index(row, h));
        ++r->count;
        ++e.compared[rh];
        if (!close(got_lse[i], expected_lse[i], opt.tol)) {
          ++r->lse_mismatches;
          ++e.bad[rh];
        }
        const double err = std::fabs(got_lse[i] - expected_lse[i]);
        if (!std::isnan(err)) r->lse_max_abs = std::max(r->lse_max_abs, err);
      }
    }
  }
  return e;
}

namespace detail {

/// The per-sequence tallies `localize` words: per (sequence, head) values compared and values
/// beyond tolerance, the rows that differ, and the decode/prefill counts.
struct SequenceErrors {
  std::int64_t num_seqs = 0;
  std::vector<std::int64_t> total, bad;  ///< [num_seqs * heads]
  std::vector<std::int64_t> bad_rows, padding_bad_rows;
  std::int64_t decode_bad = 0, decode_rows = 0, prefill_bad = 0, prefill_rows = 0;
  bool multi_row = false;  ///< some sequence has more than one row
};

inline SequenceErrors sequence_errors(const OutputShape& shape, const RowErrors& e) {
  const auto rows = static_cast<std::int64_t>(shape.rows.size());
  SequenceErrors t;
  for (const RowInfo& ri : shape.rows)
    if (ri.kind != RowKind::kPadding) t.num_seqs = std::max(t.num_seqs, ri.sequence + 1);
  t.total.assign(static_cast<std::size_t>(t.num_seqs * shape.heads), 0);
  t.bad = t.total;
  for (std::int64_t row = 0; row < rows; ++row) {
    const RowInfo& ri = shape.rows[static_cast<std::size_t>(row)];
    bool row_bad = false;
    for (std::int64_t h = 0; h < shape.heads; ++h)
      row_bad = row_bad || e.bad[static_cast<std::size_t>(row * shape.heads + h)] != 0;
    if (ri.kind == RowKind::kPadding) {
      if (row_bad) t.padding_bad_rows.push_back(row);
      continue;
    }
    if (row > 0 && shape.rows[static_cast<std::size_t>(row - 1)].sequence == ri.sequence &&
        shape.rows[static_cast<std::size_t>(row - 1)].kind != RowKind::kPadding)
      t.multi_row = true;
    if (row_bad) t.bad_rows.push_back(row);
    if (ri.kind == RowKind::kDecode) {
      ++t.decode_rows;
      t.decode_bad += row_bad ? 1 : 0;
    } else if (ri.kind == RowKind::kPrefill) {
      ++t.prefill_rows;
      t.prefill_bad += row_bad ? 1 : 0;
    }
    for (std::int64_t h = 0; h < shape.heads; ++h) {
      const auto sh = static_cast<std::size_t>(ri.sequence * shape.heads + h);
      t.total[sh] += e.compared[static_cast<std::size_t>(row * shape.heads + h)];
      t.bad[sh] += e.bad[static_cast<std::size_t>(row * shape.heads + h)];
    }
  }
  return t;
}

/// Per sequence: which heads are all wrong, partly wrong (a summary, then at most 8 sequences).
inline void where_heads(const OutputShape& shape, const SequenceErrors& t, Report* r) {
  std::int64_t all = 0, part = 0, right = 0;
  std::vector<std::string> lines;
  for (std::int64_t s = 0; s < t.num_seqs; ++s) {
    std::vector<std::int64_t> all_h, part_h;
    for (std::int64_t h = 0; h < shape.heads; ++h) {
      const auto sh = static_cast<std::size_t>(s * shape.heads + h);
      if (t.total[sh] == 0) continue;
      if (t.bad[sh] == 0) {
        ++right;
      } else if (t.bad[sh] == t.total[sh]) {
        ++all;
        all_h.push_back(h);
      } else {
        ++part;
        part_h.push_back(h);
      }
    }
    if (all_h.empty() && part_h.empty()) continue;
    std::string line = "  sequence " + std::to_string(s) + ":";
    if (!all_h.empty()) line += " heads " + ranges(all_h) + " all wrong";
    if (!part_h.empty())
      line += std::string(all_h.empty() ? "" : ";") + " heads " + ranges(part_h) + " partly wrong";
    lines.push_back(line);
  }
  if (all + part == 0) return;
  r->where.push_back("per sequence and query head: " + std::to_string(all) + " all wrong, " +
                     std::to_string(part) + " partly wrong, " + std::to_string(right) + " right");
  const std::size_t shown = std::min<std::size_t>(lines.size(), 8);
  for (std::size_t i = 0; i < shown; ++i) r->where.push_back(lines[i]);
  if (lines.size() > shown)
    r->where.push_back("  ... and " + std::to_string(lines.size() - shown) + " more sequences");
}

/// One row per sequence (decode): when exactly the sequences past some length differ.
inline void where_long_sequences(const OutputShape& shape, const SequenceErrors& t, Report* r) {
  const auto rows = static_cast<std::int64_t>(shape.rows.size());
  std::int64_t longest_right = -1, shortest_bad = std::numeric_limits<std::int64_t>::max();
  for (std::int64_t row = 0; row < rows; ++row) {
    const RowInfo& ri = shape.rows[static_cast<std::size_t>(row)];
    if (ri.kind == RowKind::kPadding || ri.position < 0) continue;
    const bool is_bad = std::binary_search(t.bad_rows.begin(), t.bad_rows.end(), row);
    if (is_bad) {
      shortest_bad = std::min(shortest_bad, ri.position + 1);
    } else {
      longest_right = std::max(longest_right, ri.position + 1);
    }
  }
  if (longest_right >= 0 && shortest_bad > longest_right) {
    r->where.push_back("only sequences longer than " + std::to_string(longest_right) +
                       " keys differ (the shortest that differs has " +
                       std::to_string(shortest_bad) + ")");
  }
}

/// Sequence s's rows as (key position, the row's largest error beyond tolerance or 0), in
/// position order.
inline std::vector<std::pair<std::int64_t, double>> position_errors(const OutputShape& shape,
                                                                    const RowErrors& e,
                                                                    std::int64_t s) {
  const auto rows = static_cast<std::int64_t>(shape.rows.size());
  std::vector<std::pair<std::int64_t, double>> errs;
  for (std::int64_t row = 0; row < rows; ++row) {
    const RowInfo& ri = shape.rows[static_cast<std::size_t>(row)];
    if (ri.kind == RowKind::kPadding || ri.sequence != s) continue;
    double m = 0;
    bool any = false;
    for (std::int64_t h = 0; h < shape.heads; ++h) {
      const auto rh = static_cast<std::size_t>(row * shape.heads + h);
      any = any || e.bad[rh] != 0;
      m = std::max(m, e.max_abs[rh]);
    }
    errs.emplace_back(ri.position, any ? m : 0.0);
  }
  std::sort(errs.begin(), errs.end());
  return errs;
}

/// Along the key positions: the rows of each sequence in position order; when every row
/// before some position matches and the error after it rises, report the position.
inline void where_growth(const OutputShape& shape, const RowErrors& e, std::int64_t num_seqs,
                         Report* r) {
  std::int64_t first_bad = -1, grows = 0, seqs = 0;
  double lo = 0, hi = 0;
  for (std::int64_t s = 0; s < num_seqs; ++s) {
    const std::vector<std::pair<std::int64_t, double>> errs = position_errors(shape, e, s);
    std::size_t k = 0;
    while (k < errs.size() && errs[k].second == 0) ++k;
    if (k == errs.size() || errs.size() < 3) continue;
    ++seqs;
    // Grows: from the first bad row on every row is bad and the last error is the largest
    // half of the range.
    bool all_bad = true;
    for (std::size_t i = k; i < errs.size(); ++i) all_bad = all_bad && errs[i].second > 0;
    if (all_bad && errs.back().second > errs[k].second && errs.size() - k >= 2) {
      ++grows;
      if (first_bad < 0) {
        first_bad = errs[k].first;
        lo = errs[k].second;
        hi = errs.back().second;
      }
    }
  }
  if (grows > 0 && grows == seqs) {
    r->where.push_back("the error grows along the sequence: rows before key position " +
                       std::to_string(first_bad) + " match, then it rises from " + num(lo) +
                       " to " + num(hi));
  }
}

}  // namespace detail

/// The localization lines of `r` from the per-(row, head) errors: padding, per sequence and
/// head, per row (when rows are not one per sequence), decode versus prefill, and the key
/// position from which the error grows.
inline void localize(const OutputShape& shape, const RowErrors& e, Report* r) {
  using detail::ranges;
  const auto rows = static_cast<std::int64_t>(shape.rows.size());
  const detail::SequenceErrors t = detail::sequence_errors(shape, e);
  r->padding_only = !t.padding_bad_rows.empty() && t.bad_rows.empty();
  if (!t.padding_bad_rows.empty()) {
    r->where.push_back("padding rows that differ: " + std::to_string(t.padding_bad_rows.size()) +
                       " (rows " + ranges(t.padding_bad_rows) + ")");
  }
  detail::where_heads(shape, t, r);
  const std::int64_t seq_rows = t.decode_rows + t.prefill_rows;
  if (t.multi_row && !t.bad_rows.empty()) {
    r->where.push_back("query rows that differ: " + std::to_string(t.bad_rows.size()) + " of " +
                       std::to_string(seq_rows > 0 ? seq_rows : rows) + " (rows " +
                       ranges(t.bad_rows) + ")");
  }
  if (seq_rows > 0 && t.decode_bad + t.prefill_bad > 0) {
    r->where.push_back("decode rows that differ: " + std::to_string(t.decode_bad) + " of " +
                       std::to_string(t.decode_rows) + "; prefill rows that differ: " +
                       std::to_string(t.prefill_bad) + " of " + std::to_string(t.prefill_rows));
  }
  if (!t.multi_row && !t.bad_rows.empty()) detail::where_long_sequences(shape, t, r);
  if (t.multi_row) detail::where_growth(shape, e, t.num_seqs, r);
}

/// A report without re-running anything (e.g. for merged states): the totals and where, and
/// as the one cause tried, a logsumexp in log2 (`got_lse` matching `expected_lse / ln 2`).
inline Report compare_values(const OutputShape& shape, const std::vector<double>& got,
                             const std::vector<double>& expected,
                             const std::vector<double>& got_lse,
                             const std::vector<double>& expected_lse, const Options& opt) {
  Report r;
  const RowErrors e = tally(shape, got, expected, got_lse, expected_lse, opt, &r);
  localize(shape, e, &r);
  if (r.mismatches == 0 && r.lse_mismatches > 0) {
    double worst = 0;
    bool match = true;
    for (std::size_t i = 0; i < got_lse.size(); ++i) {
      const double want = expected_lse[i] / std::log(2.0);
      match = match && close(got_lse[i], want, opt.tol);
      if (std::isfinite(want)) worst = std::max(worst, std::fabs(got_lse[i] - want));
    }
    if (match)
      r.causes.push_back({"logsumexp in log2 (base 2) instead of the natural log",
                          {Reproduce::Kind::kLseLog2, "", "", ""},
                          worst});
  }
  return r;
}

/// The explaining part of the report: the likely causes (or "no likely cause found"), the
/// notes, then where the mismatches are; one line each. `words` words the changes.
inline std::string format_causes(const Report& r, ReproduceWords words = words_of) {
  using detail::num;
  std::string s;
  if (r.padding_only) {
    s += "likely cause: only padding rows differ (rows past cu_q_lens[num_seqs] or sequences "
         "of length 0); " +
         words({Reproduce::Kind::kEnable, "ignore_padding", "", ""}) + " leaves them out\n";
  }
  for (const Cause& c : r.causes) {
    s += "likely cause: " + c.what + " (max abs error " + num(c.max_abs) + " under it)";
    if (c.reproduce.kind != Reproduce::Kind::kNone) s += "; reproduce with " + words(c.reproduce);
    s += "\n";
  }
  if (r.causes.empty() && !r.padding_only) s += "no likely cause found\n";
  if (!r.cap_note.empty()) s += "note: " + r.cap_note + "\n";
  for (const std::string& w : r.skipped) s += "not tried: " + w + "\n";
  for (const std::string& w : r.where) s += "where: " + w + "\n";
  return s;
}

/// The report as text: totals, then `format_causes`.
inline std::string format_report(const Report& r, ReproduceWords words = words_of) {
  using detail::num;
  std::string s = "mismatches: " + std::to_string(r.mismatches) + " of " + std::to_string(r.count) +
                  " elements";
  if (r.lse_mismatches > 0) s += " (and " + std::to_string(r.lse_mismatches) + " logsumexp values)";
  s += "\nmax abs error: " + num(r.max_abs) + "\nmax rel error: " + num(r.max_rel) + "\n";
  if (r.lse_mismatches > 0) s += "logsumexp max abs error: " + num(r.lse_max_abs) + "\n";
  if (r.ignored_padding > 0)
    s += "ignored: " + std::to_string(r.ignored_padding) + " padding values\n";
  if (r.ok()) return s;
  return s + format_causes(r, words);
}

}  // namespace compare
}  // namespace attnref
