// SPDX-License-Identifier: Apache-2.0
/// @file json.hpp
/// A small strict JSON reader (RFC 8259 values: objects, arrays, strings, numbers, true, false,
/// null) for configuration files such as a Hugging Face `config.json`. Nesting is limited to 64
/// levels and input to 64 MiB, so a hostile file cannot exhaust the stack or memory. No Eigen.
///
/// Example:
/// @code
///   attnref::JsonValue v;
///   attnref::Status s = attnref::parse_json(R"({"num_attention_heads": 32})", &v);
///   const attnref::JsonValue* heads = v.find("num_attention_heads");  // a number, 32
/// @endcode
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "attnref/core/status.hpp"

namespace attnref {

/// One JSON value. Objects keep their members in file order, as parallel lists of keys and
/// values (a repeated key: `find` returns the last).
struct JsonValue {
  enum class Kind { kNull, kBool, kNumber, kString, kArray, kObject };
  Kind kind = Kind::kNull;
  bool boolean = false;
  double number = 0.0;
  std::string string;
  std::vector<JsonValue> array;
  std::vector<std::string> keys;   ///< an object's member names
  std::vector<JsonValue> members;  ///< an object's member values, in the order of `keys`

  /// The member named `key` of an object (the last one of that name), or nullptr.
  const JsonValue* find(std::string_view key) const noexcept {
    const JsonValue* found = nullptr;
    for (std::size_t i = 0; i < keys.size() && i < members.size(); ++i) {
      if (keys[i] == key) found = &members[i];
    }
    return found;
  }
};

namespace detail {

class JsonParser {
 public:
  explicit JsonParser(std::string_view text) : text_(text) {}

  Status parse(JsonValue* out) {
    skip_space();
    if (!value(out, 0)) return error();
    skip_space();
    if (pos_ != text_.size()) return error("text follows the JSON value");
    return Status();
  }

 private:
  static constexpr int kMaxDepth = 64;

  Status error(const char* what = nullptr) const {
    return Status(ErrorCode::kBadFile, "", "the file is not valid JSON: {f} at byte {0}.",
                  "check the file with a JSON validator", {static_cast<std::int64_t>(pos_)}, {},
                  what != nullptr ? what : what_);
  }
  bool fail(const char* what) {
    what_ = what;
    return false;
  }
  void skip_space() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t' ||
                                   text_[pos_] == '\n' || text_[pos_] == '\r')) {
      ++pos_;
    }
  }
  bool literal(std::string_view word) {
    if (text_.substr(pos_, word.size()) != word) return fail("an unknown word");
    pos_ += word.size();
    return true;
  }

  bool value(JsonValue* out, int depth) {
    if (depth > kMaxDepth) return fail("nesting deeper than 64 levels");
    if (pos_ >= text_.size()) return fail("the text ends where a value should be");
    const char c = text_[pos_];
    if (c == '{') return object(out, depth);
    if (c == '[') return array(out, depth);
    if (c == '"') {
      out->kind = JsonValue::Kind::kString;
      return string(&out->string);
    }
    if (c == 't' || c == 'f') {
      out->kind = JsonValue::Kind::kBool;
      out->boolean = c == 't';
      return literal(c == 't' ? "true" : "false");
    }
    if (c == 'n') return literal("null");
    return number(out);
  }

  bool object(JsonValue* out, int depth) {
    out->kind = JsonValue::Kind::kObject;
    ++pos_;
    skip_space();
    if (pos_ < text_.size() && text_[pos_] == '}') return ++pos_, true;
    while (true) {
      skip_space();
      std::string key;
      if (pos_ >= text_.size() || text_[pos_] != '"') return fail("an object key is not a string");
      if (!string(&key)) return false;
      skip_space();
      if (pos_ >= text_.size() || text_[pos_] != ':') return fail("a ':' is missing");
      ++pos_;
      skip_space();
      JsonValue member;
      if (!value(&member, depth + 1)) return false;
      out->keys.push_back(std::move(key));
      out->members.push_back(std::move(member));
      skip_space();
      if (pos_ < text_.size() && text_[pos_] == ',') {
        ++pos_;
        continue;
      }
      if (pos_ < text_.size() && text_[pos_] == '}') return ++pos_, true;
      return fail("a ',' or '}' is missing");
    }
  }

  bool array(JsonValue* out, int depth) {
    out->kind = JsonValue::Kind::kArray;
    ++pos_;
    skip_space();
    if (pos_ < text_.size() && text_[pos_] == ']') return ++pos_, true;
    while (true) {
      skip_space();
      JsonValue element;
      if (!value(&element, depth + 1)) return false;
      out->array.push_back(std::move(element));
      skip_space();
      if (pos_ < text_.size() && text_[pos_] == ',') {
        ++pos_;
        continue;
      }
      if (pos_ < text_.size() && text_[pos_] == ']') return ++pos_, true;
      return fail("a ',' or ']' is missing");
    }
  }

  static int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }

  // Appends code point `cp` as UTF-8 (surrogate halves are kept as they are).
  static void append_utf8(std::string* s, unsigned cp) {
    if (cp < 0x80) {
      s->push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
      s->push_back(static_cast<char>(0xC0 | (cp >> 6)));
      s->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
      s->push_back(static_cast<char>(0xE0 | (cp >> 12)));
      s->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      s->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
  }

  bool escape(std::string* out) {
    if (pos_ >= text_.size()) return fail("the text ends inside a string");
    const char e = text_[pos_++];
    switch (e) {
      case '"':
      case '\\':
      case '/':
        out->push_back(e);
        return true;
      case 'b':
        out->push_back('\b');
        return true;
      case 'f':
        out->push_back('\f');
        return true;
      case 'n':
        out->push_back('\n');
        return true;
      case 'r':
        out->push_back('\r');
        return true;
      case 't':
        out->push_back('\t');
        return true;
      case 'u': {
        unsigned cp = 0;
        for (int i = 0; i < 4; ++i) {
          const int h = pos_ < text_.size() ? hex_digit(text_[pos_]) : -1;
          if (h < 0) return fail("a \\u escape needs four hex digits");
          cp = cp * 16 + static_cast<unsigned>(h);
          ++pos_;
        }
        append_utf8(out, cp);
        return true;
      }
      default:
        return fail("an unknown escape in a string");
    }
  }

  bool string(std::string* out) {
    ++pos_;  // the opening quote
    while (pos_ < text_.size()) {
      const char c = text_[pos_++];
      if (c == '"') return true;
      if (static_cast<unsigned char>(c) < 0x20) return fail("a control character in a string");
      if (c != '\\') {
        out->push_back(c);
      } else if (!escape(out)) {
        return false;
      }
    }
    return fail("the text ends inside a string");
  }

  bool number(JsonValue* out) {
    const std::size_t start = pos_;
    if (pos_ < text_.size() && text_[pos_] == '-') ++pos_;
    const auto digits = [&] {
      const std::size_t from = pos_;
      while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') ++pos_;
      return pos_ > from;
    };
    if (!digits()) return fail("an unexpected character");
    if (pos_ < text_.size() && text_[pos_] == '.' && (++pos_, !digits())) {
      return fail("a number's fraction has no digits");
    }
    if (pos_ < text_.size() && (text_[pos_] == 'e' || text_[pos_] == 'E')) {
      ++pos_;
      if (pos_ < text_.size() && (text_[pos_] == '+' || text_[pos_] == '-')) ++pos_;
      if (!digits()) return fail("a number's exponent has no digits");
    }
    out->kind = JsonValue::Kind::kNumber;
    out->number = std::strtod(std::string(text_.substr(start, pos_ - start)).c_str(), nullptr);
    return true;
  }

  std::string_view text_;
  std::size_t pos_ = 0;
  const char* what_ = "an unexpected character";
};

}  // namespace detail

/// Parses `text` as one JSON value into `*out`. A malformed text is a `kBadFile` error that says
/// what is wrong and at which byte.
inline Status parse_json(std::string_view text, JsonValue* out) {
  if (text.size() > (std::size_t{64} << 20)) {
    return Status(ErrorCode::kBadFile, "",
                  "the file holds {0} bytes; a JSON configuration is "
                  "read up to 64 MiB.",
                  "pass the configuration file itself", {static_cast<std::int64_t>(text.size())});
  }
  *out = JsonValue();
  return detail::JsonParser(text).parse(out);
}

}  // namespace attnref
