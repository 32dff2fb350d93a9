// SPDX-License-Identifier: Apache-2.0
/// @file npy.hpp
/// numpy `.npy` files: a strict reader (from a byte buffer or a file) and a writer, for dumping
/// tensors from Python and comparing against attnref. Little-endian, C or Fortran order (the
/// reader returns C order), format versions 1.0, 2.0 and 3.0; dtypes `<f2 <f4 <f8 |i1 <i4 <i8 |b1`,
/// and the raw codes of bf16 and fp8 dumps: `|u1 <u2` and numpy's void `|V1 |V2` (what `np.save`
/// writes for ml_dtypes' float8 and bfloat16 arrays; any byte-order mark). `npy_reinterpret` then
/// reads raw codes as bfloat16 or fp8. Everything else (big-endian or unknown dtypes, truncated or
/// surplus data, a malformed header, a shape whose size overflows int64) is an
/// `ErrorCode::kBadFile` error that names the file and the problem. No allocation is ever sized
/// from a header number before it has been checked against the real number of bytes. No Eigen.
///
/// Example:
/// @code
///   attnref::NpyArray q;
///   if (attnref::NpyStatus s = attnref::read_npy("q.npy", &q); !s.ok()) {
///     std::cerr << s.message() << "\n";   // "q.npy: data is truncated: ..."
///     return 1;
///   }
///   const float* data = q.data<float>();  // nullptr unless q.dtype == DType::kFloat32
///
///   std::vector<float> out(2 * 3);
///   attnref::write_npy("out.npy", attnref::make_npy_array<float>({2, 3}, out.data()));
/// @endcode
#pragma once

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "attnref/core/checked_math.hpp"
#include "attnref/core/dtype.hpp"
#include "attnref/core/status.hpp"

#if defined(__BYTE_ORDER__) && defined(__ORDER_LITTLE_ENDIAN__)
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "attnref's .npy reader assumes a little-endian host");
#endif

namespace attnref {

/// A dense C-order array read from, or to be written to, a `.npy` file. Owns its bytes.
struct NpyArray {
  DType dtype = DType::kUnknown;     ///< element type
  std::vector<std::int64_t> shape;   ///< extents; empty for a 0-d (scalar) array
  std::vector<unsigned char> bytes;  ///< numel() * itemsize bytes, little-endian, C order

  /// Number of dimensions.
  std::size_t rank() const noexcept { return shape.size(); }
  /// Product of the extents (1 for a scalar). Valid for arrays the reader produced.
  std::int64_t numel() const noexcept {
    std::int64_t n = 1;
    for (std::int64_t e : shape)
      if (!checked_mul(n, e, &n)) return -1;
    return n;
  }
  /// The elements as `T`, or nullptr when `T` is not this array's dtype (an array of zero
  /// elements may also give nullptr).
  template <class T>
  const T* data() const noexcept {
    if (dtype_of<T> != dtype || dtype == DType::kUnknown) return nullptr;
    return reinterpret_cast<const T*>(bytes.data());
  }
  /// Mutable elements as `T`, or nullptr when `T` is not this array's dtype.
  template <class T>
  T* mutable_data() noexcept {
    if (dtype_of<T> != dtype || dtype == DType::kUnknown) return nullptr;
    return reinterpret_cast<T*>(bytes.data());
  }
  /// A copy of the elements as `T` (empty when `T` is not this array's dtype).
  template <class T>
  std::vector<T> to_vector() const {
    if (dtype_of<T> != dtype || dtype == DType::kUnknown) return {};
    std::vector<T> out;  // element by element: also right for std::vector<bool>
    out.reserve(bytes.size() / sizeof(T));
    for (std::size_t at = 0; at + sizeof(T) <= bytes.size(); at += sizeof(T)) {
      T x;
      std::memcpy(static_cast<void*>(&x), bytes.data() + at, sizeof(T));
      out.push_back(x);
    }
    return out;
  }
};

/// The outcome of reading or writing a `.npy` file: success, or `ErrorCode::kBadFile` with a
/// message naming the file and the problem (`"k.npy: data is truncated: ..."`) and a hint.
/// (A `Status` only holds string literals, so a file name needs this owning companion;
/// `status()` gives the code as a `Status` for code paths that take one.)
class NpyStatus {
 public:
  /// Success.
  NpyStatus() = default;
  /// A `kBadFile` error about `file`.
  NpyStatus(std::string file, std::string problem, std::string hint)
      : code_(ErrorCode::kBadFile),
        file_(std::move(file)),
        problem_(std::move(problem)),
        hint_(std::move(hint)) {}

  /// A `kBadFile` error about a well-formed file of a numpy dtype attnref does not read;
  /// `unread_dtype` is numpy's name of it ("uint32").
  NpyStatus(std::string file, std::string problem, std::string hint, std::string unread_dtype)
      : NpyStatus(std::move(file), std::move(problem), std::move(hint)) {
    unread_dtype_ = std::move(unread_dtype);
  }

  bool ok() const noexcept { return code_ == ErrorCode::kOk; }
  ErrorCode code() const noexcept { return code_; }
  /// numpy's name of the file's dtype when the file is well formed but attnref does not read
  /// that dtype ("uint32", "int16"), else empty: a front end reports it as the argument's
  /// dtype error rather than as a bad file.
  const std::string& unread_dtype() const noexcept { return unread_dtype_; }
  /// The file the error is about ("<buffer>" for in-memory data).
  const std::string& file() const noexcept { return file_; }
  /// `"<file>: <problem>"`, or "ok".
  std::string message() const { return ok() ? std::string("ok") : file_ + ": " + problem_; }
  /// How to fix it.
  const std::string& hint() const noexcept { return hint_; }
  /// The code as a `Status` (its message is generic; use `message()` for the details).
  Status status() const noexcept {
    if (ok()) return Status();
    return Status(ErrorCode::kBadFile, "", "a .npy file is unreadable or malformed",
                  "see the reader's message for the file and the problem");
  }

 private:
  ErrorCode code_ = ErrorCode::kOk;
  std::string file_;
  std::string problem_;
  std::string hint_;
  std::string unread_dtype_;
};

/// Bytes per element of a dtype the `.npy` code handles; 0 for others (bfloat16, unknown).
constexpr std::int64_t npy_itemsize(DType t) noexcept {
  switch (t) {
    case DType::kFloat16:
      return 2;
    case DType::kFloat32:
      return 4;
    case DType::kFloat64:
      return 8;
    case DType::kInt8:
      return 1;
    case DType::kInt32:
      return 4;
    case DType::kInt64:
      return 8;
    case DType::kBool:
    case DType::kUInt8:
    case DType::kVoid8:
      return 1;
    case DType::kUInt16:
    case DType::kVoid16:
      return 2;
    default:
      return 0;
  }
}

/// The `.npy` descr string of a dtype (`"<f4"`), or nullptr when it has none here.
constexpr const char* npy_descr(DType t) noexcept {
  switch (t) {
    case DType::kFloat16:
      return "<f2";
    case DType::kFloat32:
      return "<f4";
    case DType::kFloat64:
      return "<f8";
    case DType::kInt8:
      return "|i1";
    case DType::kInt32:
      return "<i4";
    case DType::kInt64:
      return "<i8";
    case DType::kBool:
      return "|b1";
    case DType::kUInt8:
      return "|u1";
    case DType::kUInt16:
      return "<u2";
    case DType::kVoid8:
      return "|V1";
    case DType::kVoid16:
      return "|V2";
    default:
      return nullptr;
  }
}

namespace detail {

/// The decoded header of a `.npy` file, every number validated.
struct NpyHeader {
  DType dtype = DType::kUnknown;
  std::vector<std::int64_t> shape;
  std::int64_t data_offset = 0;  ///< bytes before the data: magic, version, length, header
  std::int64_t data_bytes = 0;   ///< numel * itemsize, proven not to overflow
  bool fortran_order = false;    ///< the data is column-major (numpy.save of an F-ordered array)
};

inline constexpr std::int64_t kNpyMaxHeaderBytes = std::int64_t{1} << 20;
inline constexpr std::size_t kNpyMaxRank = 64;
inline constexpr const char* kNpyDtypeList = "<f2 <f4 <f8 |i1 <i4 <i8 |b1 |u1 <u2 |V1 |V2";
inline constexpr const char* kNpyRewriteHint =
    "write it with numpy.save(path, numpy.ascontiguousarray(x, dtype=x.dtype.newbyteorder('<')))";

inline std::string npy_shape_string(const std::vector<std::int64_t>& shape) {
  std::string s = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) s += ", ";
    s += std::to_string(shape[i]);
  }
  if (shape.size() == 1) s += ",";
  return s + ")";
}

/// A printable excerpt of untrusted header text (non-printing bytes escaped, at most 40 chars).
inline std::string npy_excerpt(const char* p, std::size_t n) {
  std::string s;
  for (std::size_t i = 0; i < n && i < 40; ++i) {
    const auto c = static_cast<unsigned char>(p[i]);
    if (c >= 0x20 && c < 0x7f) {
      s += static_cast<char>(c);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      s += buf;
    }
  }
  if (n > 40) s += "...";
  return s;
}

/// Recursive-descent parser of the header's Python dict literal:
/// `{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }`.
class NpyHeaderParser {
 public:
  NpyHeaderParser(const char* text, std::size_t size) : p_(text), end_(text + size) {}

  /// Parses the dict into `out->dtype` and `out->shape`; on failure returns false and sets
  /// `problem` and `hint`, and `unread` to numpy's name of a dtype attnref does not read.
  bool parse(NpyHeader* out, std::string* problem, std::string* hint, std::string* unread) {
    problem_ = problem;
    hint_ = hint;
    unread_ = unread;
    skip_ws();
    if (!eat('{')) return fail("the header is not a Python dict (it does not start with '{')");
    bool have_descr = false, have_fortran = false, have_shape = false;
    std::string descr;
    bool fortran = false;
    skip_ws();
    while (!at('}')) {
      std::string key;
      if (!parse_string(&key)) return fail("expected a quoted key in the header dict");
      skip_ws();
      if (!eat(':')) return fail("expected ':' after the key '" + key + "'");
      skip_ws();
      if (key == "descr") {
        if (have_descr) return fail("the key 'descr' appears twice");
        have_descr = true;
        if (at('[')) {
          return fail("'descr' is a list (a structured dtype), which is not supported",
                      std::string("save a plain array of one of: ") + kNpyDtypeList);
        }
        if (!parse_string(&descr)) return fail("'descr' is not a quoted dtype string");
      } else if (key == "fortran_order") {
        if (have_fortran) return fail("the key 'fortran_order' appears twice");
        have_fortran = true;
        if (match_word("True")) {
          fortran = true;
        } else if (match_word("False")) {
          fortran = false;
        } else {
          return fail("'fortran_order' is neither True nor False");
        }
      } else if (key == "shape") {
        if (have_shape) return fail("the key 'shape' appears twice");
        have_shape = true;
        if (!parse_shape(&out->shape)) return false;
      } else {
        return fail("unexpected key '" + key +
                    "' in the header (expected 'descr', "
                    "'fortran_order' and 'shape')");
      }
      skip_ws();
      if (eat(',')) {
        skip_ws();
        continue;
      }
      if (!at('}')) return fail("expected ',' or '}' in the header dict");
    }
    ++p_;  // '}'
    skip_ws();
    if (p_ != end_) {
      return fail("unexpected text after the header dict: '" + npy_excerpt(p_, rest()) + "'");
    }
    if (!have_descr || !have_fortran || !have_shape) {
      return fail(std::string("the header lacks the key '") +
                  (!have_descr     ? "descr"
                   : !have_fortran ? "fortran_order"
                                   : "shape") +
                  "'");
    }
    out->fortran_order = fortran;
    return decode_descr(descr, &out->dtype);
  }

 private:
  std::size_t rest() const { return static_cast<std::size_t>(end_ - p_); }
  bool at(char c) const { return p_ != end_ && *p_ == c; }
  bool eat(char c) {
    if (!at(c)) return false;
    ++p_;
    return true;
  }
  void skip_ws() {
    while (p_ != end_ && (*p_ == ' ' || *p_ == '\t' || *p_ == '\n' || *p_ == '\r')) ++p_;
  }
  bool match_word(const char* word) {
    const std::size_t n = std::strlen(word);
    if (rest() < n || std::memcmp(p_, word, n) != 0) return false;
    p_ += n;
    return true;
  }
  bool fail(std::string problem, std::string hint = "") {
    *problem_ = std::move(problem);
    *hint_ = hint.empty() ? std::string("the header is not what numpy.save writes; ") +
                                "re-save the array with numpy.save"
                          : std::move(hint);
    return false;
  }

  /// A single- or double-quoted string without escapes.
  bool parse_string(std::string* out) {
    if (!at('\'') && !at('"')) return false;
    const char quote = *p_++;
    const char* start = p_;
    while (p_ != end_ && *p_ != quote) {
      if (*p_ == '\\' || *p_ == '\n') return false;
      ++p_;
    }
    if (p_ == end_) return false;
    out->assign(start, p_);
    ++p_;
    return true;
  }

  /// `()`, `(n,)`, `(n, m)`, `(n, m,)`: non-negative decimal integers within int64.
  bool parse_shape(std::vector<std::int64_t>* shape) {
    if (!eat('(')) return fail("'shape' is not a tuple");
    shape->clear();
    skip_ws();
    bool trailing_comma = false;
    while (!at(')')) {
      if (p_ == end_) return fail("'shape' is not closed by ')'");
      if (*p_ == '-') return fail("'shape' has a negative extent");
      if (*p_ < '0' || *p_ > '9') {
        return fail("'shape' holds something other than integers: '" + npy_excerpt(p_, rest()) +
                    "'");
      }
      std::int64_t value = 0;
      while (p_ != end_ && *p_ >= '0' && *p_ <= '9') {
        if (!checked_mul(value, 10, &value) || !checked_add(value, *p_ - '0', &value)) {
          return fail("an extent in 'shape' does not fit in int64");
        }
        ++p_;
      }
      if (shape->size() == kNpyMaxRank) {
        return fail("'shape' has more than " + std::to_string(kNpyMaxRank) + " dimensions");
      }
      shape->push_back(value);
      skip_ws();
      trailing_comma = eat(',');
      skip_ws();
      if (!trailing_comma && !at(')')) return fail("expected ',' or ')' in 'shape'");
    }
    ++p_;  // ')'
    if (shape->size() == 1 && !trailing_comma) {
      return fail("'shape' is (" + std::to_string((*shape)[0]) +
                  "), a number rather than a tuple; a 1-d shape is written (n,)");
    }
    return true;
  }

  bool decode_descr(const std::string& d, DType* dtype) {
    const std::string supported = std::string("attnref reads ") + kNpyDtypeList;
    // One-byte types and void (raw bytes) have no byte order.
    const std::string body = d.size() >= 2 ? d.substr(1) : std::string();
    if (d.size() >= 2 && d[0] == '>' && body != "i1" && body != "b1" && body != "u1" &&
        body != "V1" && body != "V2") {
      return fail("the data is big-endian (descr '" + d + "'); attnref reads little-endian only",
                  "convert with x.astype(x.dtype.newbyteorder('<')) before numpy.save");
    }
    static constexpr struct {
      const char* descr;
      DType dtype;
    } kTable[] = {{"<f2", DType::kFloat16}, {"<f4", DType::kFloat32}, {"<f8", DType::kFloat64},
                  {"<i4", DType::kInt32},   {"<i8", DType::kInt64},   {"|i1", DType::kInt8},
                  {"<i1", DType::kInt8},    {">i1", DType::kInt8},    {"|b1", DType::kBool},
                  {"<b1", DType::kBool},    {">b1", DType::kBool},    {"|u1", DType::kUInt8},
                  {"<u1", DType::kUInt8},   {">u1", DType::kUInt8},   {"<u2", DType::kUInt16},
                  {"|V1", DType::kVoid8},   {"<V1", DType::kVoid8},   {">V1", DType::kVoid8},
                  {"|V2", DType::kVoid16},  {"<V2", DType::kVoid16},  {">V2", DType::kVoid16}};
    for (const auto& row : kTable) {
      if (d == row.descr) {
        *dtype = row.dtype;
        return true;
      }
    }
    static constexpr struct {
      const char* descr;
      const char* name;
    } kUnread[] = {{"<i2", "int16"},
                   {"<u4", "uint32"},
                   {"<u8", "uint64"},
                   {"<c8", "complex64"},
                   {"<c16", "complex128"}};
    for (const auto& row : kUnread) {
      if (d == row.descr) *unread_ = row.name;
    }
    return fail("unsupported dtype '" + npy_excerpt(d.data(), d.size()) + "'; " + supported,
                "convert with x.astype('<f4') (or another supported dtype) before numpy.save");
  }

  const char* p_;
  const char* end_;
  std::string* problem_ = nullptr;
  std::string* hint_ = nullptr;
  std::string* unread_ = nullptr;
};

inline std::uint32_t npy_read_le(const unsigned char* p, int n) noexcept {
  std::uint32_t v = 0;
  for (int i = n; i-- > 0;) v = (v << 8) | p[i];
  return v;
}

/// Validates the preamble (magic, version, header length) found in the first `size` bytes and
/// returns the header's length and offset. `size` may be smaller than the whole file: only the
/// first 12 bytes are looked at. `total` is the real size of the whole file or buffer.
inline NpyStatus npy_parse_preamble(const std::string& file, const unsigned char* p,
                                    std::int64_t size, std::int64_t total,
                                    std::int64_t* header_offset, std::int64_t* header_len) {
  static constexpr unsigned char kMagic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
  const std::string resave = "re-save the array with numpy.save";
  if (size < 8 || std::memcmp(p, kMagic, 6) != 0) {
    if (size >= 6 && std::memcmp(p, kMagic, 6) == 0) {
      return NpyStatus(file, "truncated: the file ends inside the format version", resave);
    }
    return NpyStatus(
        file,
        "not a .npy file (it does not start with \\x93NUMPY; " + std::to_string(total) + " bytes)",
        "attnref reads files written by numpy.save; .npz archives are not read");
  }
  const int major = p[6], minor = p[7];
  if ((major != 1 && major != 2 && major != 3) || minor != 0) {
    return NpyStatus(file,
                     "unsupported .npy format version " + std::to_string(major) + "." +
                         std::to_string(minor) + " (attnref reads 1.0, 2.0 and 3.0)",
                     resave);
  }
  const int len_bytes = major == 1 ? 2 : 4;
  if (size < 8 + len_bytes) {
    return NpyStatus(file, "truncated: the file ends inside the header length field", resave);
  }
  *header_offset = 8 + len_bytes;
  *header_len = static_cast<std::int64_t>(npy_read_le(p + 8, len_bytes));
  if (*header_len > kNpyMaxHeaderBytes) {
    return NpyStatus(file,
                     "the header claims " + std::to_string(*header_len) +
                         " bytes, more than the 1 MiB attnref accepts",
                     resave);
  }
  if (*header_len > total - *header_offset) {
    return NpyStatus(file,
                     "truncated header: it claims " + std::to_string(*header_len) +
                         " bytes but the file has only " + std::to_string(total - *header_offset) +
                         " after the length field",
                     resave);
  }
  return NpyStatus();
}

/// Parses the header text and proves that the data size is numel * itemsize and that exactly
/// that many bytes follow the header (`data_available`).
inline NpyStatus npy_parse_header(const std::string& file, const char* text, std::int64_t len,
                                  std::int64_t data_offset, std::int64_t data_available,
                                  NpyHeader* out) {
  std::string problem, hint, unread;
  NpyHeaderParser parser(text, static_cast<std::size_t>(len));
  if (!parser.parse(out, &problem, &hint, &unread)) return NpyStatus(file, problem, hint, unread);
  out->data_offset = data_offset;
  const std::int64_t itemsize = npy_itemsize(out->dtype);
  std::int64_t numel = 1;
  for (std::int64_t e : out->shape) {
    if (!checked_mul(numel, e, &numel)) {
      return NpyStatus(
          file,
          "the shape " + npy_shape_string(out->shape) + " has more elements than int64 can count",
          "the header is corrupt; re-save the array with numpy.save");
    }
  }
  if (!checked_mul(numel, itemsize, &out->data_bytes)) {
    return NpyStatus(file,
                     "the shape " + npy_shape_string(out->shape) + " of " + dtype_name(out->dtype) +
                         " needs more bytes than int64 can count",
                     "the header is corrupt; re-save the array with numpy.save");
  }
  if (data_available != out->data_bytes) {
    const std::string what =
        data_available < out->data_bytes ? "data is truncated" : "data is longer than the shape";
    return NpyStatus(file,
                     what + ": shape " + npy_shape_string(out->shape) + " of " +
                         dtype_name(out->dtype) + " needs " + std::to_string(out->data_bytes) +
                         " bytes, the file has " + std::to_string(data_available) +
                         " after the header",
                     "the file was cut short or its header does not describe it; re-save it");
  }
  return NpyStatus();
}

/// Reorders the bytes of a column-major array (fortran_order: True) into row-major order, the
/// order every NpyArray holds: C index (i0, ..., in-1) reads the element at
/// i0 + d0 * (i1 + d1 * (...)).
inline void npy_fortran_to_c(NpyArray& a) {
  const std::size_t rank = a.shape.size();
  const auto item = static_cast<std::size_t>(npy_itemsize(a.dtype));
  if (rank < 2 || a.bytes.empty()) return;
  std::vector<std::int64_t> stride(rank);  // column-major strides, in elements
  std::int64_t numel = 1;
  for (std::size_t k = 0; k < rank; ++k) {
    stride[k] = numel;
    numel *= a.shape[k];  // the header check proved numel * itemsize fits
  }
  std::vector<unsigned char> c_order(a.bytes.size());
  std::vector<std::int64_t> index(rank, 0);
  std::int64_t from = 0;
  for (std::int64_t i = 0; i < numel; ++i) {
    std::memcpy(&c_order[static_cast<std::size_t>(i) * item],
                &a.bytes[static_cast<std::size_t>(from) * item], item);
    for (std::size_t k = rank; k-- > 0;) {  // the next C index: the last dimension fastest
      if (++index[k] < a.shape[k]) {
        from += stride[k];
        break;
      }
      from -= stride[k] * (a.shape[k] - 1);
      index[k] = 0;
    }
  }
  a.bytes.swap(c_order);
}

/// Every bool byte must be 0 or 1 (anything else is not a valid C++ bool).
inline NpyStatus npy_check_bools(const std::string& file, const NpyArray& a) {
  if (a.dtype != DType::kBool) return NpyStatus();
  for (std::size_t i = 0; i < a.bytes.size(); ++i) {
    if (a.bytes[i] > 1) {
      return NpyStatus(file,
                       "bool element " + std::to_string(i) + " holds the byte " +
                           std::to_string(static_cast<int>(a.bytes[i])) + " (expected 0 or 1)",
                       "save x.astype(bool)");
    }
  }
  return NpyStatus();
}

}  // namespace detail

/// Parses a whole `.npy` file held in memory. `name` names it in messages. On error `*out` is
/// left empty.
inline NpyStatus parse_npy(const void* data, std::size_t size, NpyArray* out,
                           const std::string& name = "<buffer>") {
  *out = NpyArray();
  const auto* p = static_cast<const unsigned char*>(data);
  if (p == nullptr && size != 0) return NpyStatus(name, "null buffer", "pass the file's bytes");
  const auto total = static_cast<std::int64_t>(size);
  std::int64_t header_offset = 0, header_len = 0;
  NpyStatus s = detail::npy_parse_preamble(name, p, total, total, &header_offset, &header_len);
  if (!s.ok()) return s;
  detail::NpyHeader header;
  const std::int64_t data_offset = header_offset + header_len;
  s = detail::npy_parse_header(name, reinterpret_cast<const char*>(p + header_offset), header_len,
                               data_offset, total - data_offset, &header);
  if (!s.ok()) return s;
  NpyArray a;
  a.dtype = header.dtype;
  a.shape = std::move(header.shape);
  a.bytes.assign(p + data_offset, p + data_offset + header.data_bytes);
  if (header.fortran_order) detail::npy_fortran_to_c(a);
  s = detail::npy_check_bools(name, a);
  if (!s.ok()) return s;
  *out = std::move(a);
  return NpyStatus();
}

/// Reads a `.npy` file. Messages name the file by `path`. On error `*out` is left empty.
inline NpyStatus read_npy(const std::string& path, NpyArray* out) {
  *out = NpyArray();
  struct Closer {
    std::FILE* f;
    ~Closer() {
      if (f != nullptr) std::fclose(f);
    }
  } file{std::fopen(path.c_str(), "rb")};
  if (file.f == nullptr) {
    return NpyStatus(path, std::string("cannot open: ") + std::strerror(errno),
                     "check the path and the file's permissions");
  }
  const std::string reread = "check that the path names a regular .npy file";
  if (std::fseek(file.f, 0, SEEK_END) != 0) {
    return NpyStatus(path, std::string("cannot seek: ") + std::strerror(errno), reread);
  }
  const long end = std::ftell(file.f);
  if (end < 0 || std::fseek(file.f, 0, SEEK_SET) != 0) {
    return NpyStatus(path, "cannot determine the file size", reread);
  }
  const auto total = static_cast<std::int64_t>(end);
  unsigned char preamble[12] = {};
  const std::size_t got = std::fread(preamble, 1, sizeof preamble, file.f);
  if (got < sizeof preamble && std::ferror(file.f)) {
    return NpyStatus(path, std::string("cannot read: ") + std::strerror(errno), reread);
  }
  std::int64_t header_offset = 0, header_len = 0;
  NpyStatus s = detail::npy_parse_preamble(path, preamble, static_cast<std::int64_t>(got), total,
                                           &header_offset, &header_len);
  if (!s.ok()) return s;
  // header_len is at most 1 MiB and within the file (checked above).
  std::string header_text(static_cast<std::size_t>(header_len), '\0');
  if (std::fseek(file.f, static_cast<long>(header_offset), SEEK_SET) != 0 ||
      std::fread(&header_text[0], 1, header_text.size(), file.f) != header_text.size()) {
    return NpyStatus(path, "cannot read the header", reread);
  }
  detail::NpyHeader header;
  const std::int64_t data_offset = header_offset + header_len;
  s = detail::npy_parse_header(path, header_text.data(), header_len, data_offset,
                               total - data_offset, &header);
  if (!s.ok()) return s;
  // data_bytes equals the bytes the file really holds (checked above).
  NpyArray a;
  a.dtype = header.dtype;
  a.shape = std::move(header.shape);
  a.bytes.resize(static_cast<std::size_t>(header.data_bytes));
  if (!a.bytes.empty() && std::fread(a.bytes.data(), 1, a.bytes.size(), file.f) != a.bytes.size()) {
    return NpyStatus(path, "data is truncated: the file shrank while being read", reread);
  }
  if (header.fortran_order) detail::npy_fortran_to_c(a);
  s = detail::npy_check_bools(path, a);
  if (!s.ok()) return s;
  *out = std::move(a);
  return NpyStatus();
}

/// Encodes `a` as a `.npy` file (format 1.0, or 2.0 when the header needs it). Fails with
/// `kBadFile` when the dtype has no `.npy` name here or the bytes do not match the shape.
inline NpyStatus encode_npy(const NpyArray& a, std::vector<unsigned char>* out,
                            const std::string& name = "<buffer>") {
  out->clear();
  const char* descr = npy_descr(a.dtype);
  if (descr == nullptr) {
    return NpyStatus(name, std::string("cannot write dtype ") + dtype_name(a.dtype),
                     std::string("attnref writes ") + detail::kNpyDtypeList);
  }
  std::int64_t numel = 1, bytes = 0;
  for (std::int64_t e : a.shape) {
    if (e < 0 || !checked_mul(numel, e, &numel)) {
      return NpyStatus(name, "cannot write the shape " + detail::npy_shape_string(a.shape),
                       "extents must be non-negative and their product must fit in int64");
    }
  }
  if (!checked_mul(numel, npy_itemsize(a.dtype), &bytes) ||
      bytes != static_cast<std::int64_t>(a.bytes.size())) {
    return NpyStatus(name,
                     "the array holds " + std::to_string(a.bytes.size()) + " bytes but shape " +
                         detail::npy_shape_string(a.shape) + " of " + dtype_name(a.dtype) +
                         " needs " + std::to_string(bytes),
                     "fill NpyArray::bytes with numel * itemsize bytes");
  }
  std::string header = std::string("{'descr': '") + descr + "', 'fortran_order': False, " +
                       "'shape': " + detail::npy_shape_string(a.shape) + ", }";
  // Pad with spaces and end with '\n' so the data starts at a multiple of 64 bytes.
  std::size_t prefix = 10;
  std::size_t padded = ((prefix + header.size() + 1 + 63) / 64) * 64 - prefix;
  int major = 1;
  if (padded > 0xFFFF) {
    major = 2;
    prefix = 12;
    padded = ((prefix + header.size() + 1 + 63) / 64) * 64 - prefix;
  }
  header.resize(padded - 1, ' ');
  header += '\n';
  out->reserve(prefix + header.size() + a.bytes.size());
  const unsigned char magic[8] = {0x93, 'N', 'U', 'M', 'P', 'Y', static_cast<unsigned char>(major),
                                  0};
  out->insert(out->end(), magic, magic + 8);
  const auto len = static_cast<std::uint32_t>(header.size());
  for (std::size_t i = 0; i < prefix - 8; ++i) {
    out->push_back(static_cast<unsigned char>((len >> (8 * i)) & 0xFF));
  }
  out->insert(out->end(), header.begin(), header.end());
  out->insert(out->end(), a.bytes.begin(), a.bytes.end());
  return NpyStatus();
}

/// Writes `a` to `path` as a `.npy` file.
inline NpyStatus write_npy(const std::string& path, const NpyArray& a) {
  std::vector<unsigned char> encoded;
  NpyStatus s = encode_npy(a, &encoded, path);
  if (!s.ok()) return s;
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) {
    return NpyStatus(path, std::string("cannot create: ") + std::strerror(errno),
                     "check that the directory exists and is writable");
  }
  const bool written = std::fwrite(encoded.data(), 1, encoded.size(), f) == encoded.size();
  const bool closed = std::fclose(f) == 0;
  if (!written || !closed) {
    return NpyStatus(path, "cannot write all bytes (disk full?)", "check the free space");
  }
  return NpyStatus();
}

/// An array of `dtype` and `shape` holding a copy of `numel * itemsize` bytes from `data`.
/// Returns an empty array (dtype kUnknown) when the dtype or shape is unusable.
inline NpyArray make_npy_array(DType dtype, std::vector<std::int64_t> shape, const void* data) {
  NpyArray a;
  std::int64_t numel = 1, bytes = 0;
  for (std::int64_t e : shape)
    if (e < 0 || !checked_mul(numel, e, &numel)) return a;
  if (npy_itemsize(dtype) == 0 || !checked_mul(numel, npy_itemsize(dtype), &bytes)) return a;
  if (data == nullptr && bytes != 0) return a;
  a.dtype = dtype;
  a.shape = std::move(shape);
  const auto* p = static_cast<const unsigned char*>(data);
  if (bytes > 0) a.bytes.assign(p, p + bytes);
  return a;
}

/// An array of element type `T` (float, double, Eigen::half, int8_t, int32_t, int64_t, bool)
/// holding a copy of the C-order elements at `data`.
template <class T>
NpyArray make_npy_array(std::vector<std::int64_t> shape, const T* data) {
  static_assert(npy_itemsize(dtype_of<T>) == static_cast<std::int64_t>(sizeof(T)),
                "T must be a dtype .npy files hold here (bfloat16 has no .npy name)");
  return make_npy_array(dtype_of<T>, std::move(shape), static_cast<const void*>(data));
}

}  // namespace attnref
