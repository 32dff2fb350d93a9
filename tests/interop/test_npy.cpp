// SPDX-License-Identifier: Apache-2.0
// .npy reader and writer: round trips of every dtype, the exact bytes numpy writes, and one
// malformed input per error path (code kBadFile, message naming the file and the problem).
#include "attnref/io/npy.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace attnref {
namespace {

using Bytes = std::vector<unsigned char>;

/// A .npy file built by hand: magic, version, little-endian header length, header, data.
Bytes npy_file(const std::string& header, const Bytes& data = {}, int major = 1, int minor = 0) {
  Bytes b = {0x93,
             'N',
             'U',
             'M',
             'P',
             'Y',
             static_cast<unsigned char>(major),
             static_cast<unsigned char>(minor)};
  const auto len = static_cast<std::uint32_t>(header.size());
  b.push_back(static_cast<unsigned char>(len & 0xFF));
  b.push_back(static_cast<unsigned char>((len >> 8) & 0xFF));
  if (major >= 2) {
    b.push_back(static_cast<unsigned char>((len >> 16) & 0xFF));
    b.push_back(static_cast<unsigned char>((len >> 24) & 0xFF));
  }
  b.insert(b.end(), header.begin(), header.end());
  b.insert(b.end(), data.begin(), data.end());
  return b;
}

std::string dict(const std::string& descr, const std::string& shape, bool fortran = false) {
  return "{'descr': '" + descr + "', 'fortran_order': " + (fortran ? "True" : "False") +
         ", 'shape': " + shape + ", }\n";
}

NpyStatus parse(const Bytes& b, NpyArray* out) {
  return parse_npy(b.data(), b.size(), out, "test.npy");
}

std::string temp_path(const std::string& name) {
  return ::testing::TempDir() + "attnref_test_npy_" + name;
}

// --- what numpy writes -------------------------------------------------------------------

TEST(Npy, EncodesExactlyWhatNumpySaveWrites) {
  // numpy.save of numpy.arange(6, dtype='<f4').reshape(2, 3): header padded with spaces so that
  // magic (6) + version (2) + length (2) + header is 128 bytes, ending in '\n'.
  const float values[6] = {0, 1, 2, 3, 4, 5};
  Bytes encoded;
  ASSERT_TRUE(encode_npy(make_npy_array<float>({2, 3}, values), &encoded).ok());
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
  header.resize(117, ' ');
  header += '\n';
  Bytes expected = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, 118, 0};
  expected.insert(expected.end(), header.begin(), header.end());
  const auto* raw = reinterpret_cast<const unsigned char*>(values);
  expected.insert(expected.end(), raw, raw + sizeof values);
  EXPECT_EQ(encoded, expected);
}

TEST(Npy, OneDimensionalAndScalarShapesAreWrittenAsPythonTuples) {
  const std::int32_t v[3] = {1, 2, 3};
  Bytes encoded;
  ASSERT_TRUE(encode_npy(make_npy_array<std::int32_t>({3}, v), &encoded).ok());
  EXPECT_NE(std::string(encoded.begin(), encoded.end()).find("'shape': (3,), }"),
            std::string::npos);
  ASSERT_TRUE(encode_npy(make_npy_array<std::int32_t>({}, v), &encoded).ok());
  EXPECT_NE(std::string(encoded.begin(), encoded.end()).find("'shape': (), }"), std::string::npos);
  // magic + version + length (10) + the 54-byte dict + '\n' pass 64: padded to 128.
  EXPECT_EQ(encoded.size(), 128u + 4u);
  EXPECT_EQ(encoded[127], '\n');
}

// --- round trips -------------------------------------------------------------------------

template <class T>
void expect_round_trip(DType dtype, const char* descr, const std::vector<T>& values,
                       std::vector<std::int64_t> shape) {
  SCOPED_TRACE(descr);
  std::unique_ptr<T[]> raw(new T[values.size() + 1]);  // not values.data(): vector<bool>
  std::copy(values.begin(), values.end(), raw.get());
  const NpyArray a = make_npy_array<T>(shape, raw.get());
  ASSERT_EQ(a.dtype, dtype);
  Bytes encoded;
  ASSERT_TRUE(encode_npy(a, &encoded).ok());
  EXPECT_NE(std::string(encoded.begin(), encoded.end()).find(descr), std::string::npos);
  NpyArray back;
  const NpyStatus s = parse(encoded, &back);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(back.dtype, dtype);
  EXPECT_EQ(back.shape, shape);
  if (!values.empty()) {
    ASSERT_NE(back.data<T>(), nullptr);
  }
  EXPECT_EQ(back.to_vector<T>(), values);

  const std::string path = temp_path(std::string("round_trip_") + dtype_name(dtype) + ".npy");
  ASSERT_TRUE(write_npy(path, a).ok());
  NpyArray from_file;
  const NpyStatus f = read_npy(path, &from_file);
  ASSERT_TRUE(f.ok()) << f.message();
  EXPECT_EQ(from_file.shape, shape);
  EXPECT_EQ(from_file.to_vector<T>(), values);
  std::remove(path.c_str());
}

TEST(Npy, RoundTripsEveryDtype) {
  expect_round_trip<float>(DType::kFloat32, "'<f4'", {1.5f, -2.25f, 3e-38f, 1e38f, 0.0f, -0.0f},
                           {2, 3});
  expect_round_trip<double>(DType::kFloat64, "'<f8'", {1e-300, -2.5, 3.0, 1e300}, {4});
  expect_round_trip<std::int8_t>(DType::kInt8, "'|i1'", {-128, -1, 0, 1, 127, 5}, {3, 2});
  expect_round_trip<std::int32_t>(DType::kInt32, "'<i4'", {INT32_MIN, -1, 0, INT32_MAX}, {1, 2, 2});
  expect_round_trip<std::int64_t>(DType::kInt64, "'<i8'", {INT64_MIN, -7, 0, INT64_MAX}, {2, 2});
  expect_round_trip<bool>(DType::kBool, "'|b1'", {true, false, false, true, true}, {5});
  expect_round_trip<float>(DType::kFloat32, "'<f4'", {}, {0, 3});  // empty
  expect_round_trip<float>(DType::kFloat32, "'<f4'", {7.0f}, {});  // 0-d scalar
}

// Raw codes of bf16 and fp8 dumps: uint8/uint16, and numpy's void as np.save writes it for
// ml_dtypes' types (byte-order mark '|' or '<'; '>' is accepted too: bytes have no order).
TEST(Npy, ReadsRawCodesAsUnsignedOrVoid) {
  struct Case {
    const char* descr;
    DType dtype;
    std::size_t itemsize;
  } cases[] = {{"|u1", DType::kUInt8, 1},  {"<u1", DType::kUInt8, 1},  {"<u2", DType::kUInt16, 2},
               {"|V1", DType::kVoid8, 1},  {"<V1", DType::kVoid8, 1},  {">V1", DType::kVoid8, 1},
               {"|V2", DType::kVoid16, 2}, {"<V2", DType::kVoid16, 2}, {">V2", DType::kVoid16, 2}};
  for (const Case& c : cases) {
    const Bytes data{0x80, 0x3F, 0x00, 0x40};
    NpyArray a;
    const NpyStatus s =
        parse(npy_file(dict(c.descr, "(" + std::to_string(4 / c.itemsize) + ",)"), data), &a);
    ASSERT_TRUE(s.ok()) << c.descr << ": " << s.message();
    EXPECT_EQ(a.dtype, c.dtype) << c.descr;
    EXPECT_EQ(a.bytes, data) << c.descr;
  }
  // The writer names them as numpy does.
  const std::uint8_t codes[2] = {0x38, 0x7F};
  for (DType t : {DType::kUInt8, DType::kVoid8}) {
    Bytes encoded;
    ASSERT_TRUE(encode_npy(make_npy_array(t, {2}, codes), &encoded).ok());
    NpyArray back;
    ASSERT_TRUE(parse(encoded, &back).ok());
    EXPECT_EQ(back.dtype, t);
    EXPECT_EQ(back.bytes, Bytes(codes, codes + 2));
  }
  EXPECT_STREQ(npy_descr(DType::kVoid16), "|V2");
  EXPECT_STREQ(npy_descr(DType::kUInt16), "<u2");
}

TEST(Npy, RoundTripsFloat16FromItsBits) {
  // 1.0, -2.0, 65504 (max half), smallest subnormal: IEEE binary16 bit patterns.
  const std::uint16_t bits[4] = {0x3C00, 0xC000, 0x7BFF, 0x0001};
  const NpyArray a = make_npy_array(DType::kFloat16, {2, 2}, bits);
  Bytes encoded;
  ASSERT_TRUE(encode_npy(a, &encoded).ok());
  EXPECT_NE(std::string(encoded.begin(), encoded.end()).find("'<f2'"), std::string::npos);
  NpyArray back;
  ASSERT_TRUE(parse(encoded, &back).ok());
  EXPECT_EQ(back.dtype, DType::kFloat16);
  EXPECT_EQ(back.bytes, a.bytes);
}

TEST(Npy, ReadsFormatVersions2And3AndDoubleQuotedKeys) {
  const std::int32_t v[2] = {4, 5};
  const Bytes data(reinterpret_cast<const unsigned char*>(v),
                   reinterpret_cast<const unsigned char*>(v) + sizeof v);
  for (int major : {2, 3}) {
    NpyArray a;
    const NpyStatus s = parse(npy_file(dict("<i4", "(2,)"), data, major), &a);
    ASSERT_TRUE(s.ok()) << s.message();
    EXPECT_EQ(a.to_vector<std::int32_t>(), (std::vector<std::int32_t>{4, 5}));
  }
  NpyArray a;
  const NpyStatus s = parse(
      npy_file("{\"shape\": (1, 2), \"fortran_order\": False, \"descr\": \"<i4\"}", data), &a);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(a.shape, (std::vector<std::int64_t>{1, 2}));
}

// numpy.save of a column-major array writes fortran_order: True; the reader returns C order.
TEST(Npy, FortranOrderIsReadInCOrder) {
  std::vector<std::int32_t> column_major(24);
  for (std::int32_t i = 0; i < 24; ++i) column_major[static_cast<std::size_t>(i)] = i;
  const auto* raw = reinterpret_cast<const unsigned char*>(column_major.data());
  const Bytes file = npy_file(dict("<i4", "(2, 3, 4)", true), Bytes(raw, raw + 24 * 4));
  std::vector<std::int32_t> want;  // element (i, j, k) of a column-major (2, 3, 4) array
  for (int i = 0; i < 2; ++i) {
    for (int j = 0; j < 3; ++j) {
      for (int k = 0; k < 4; ++k) want.push_back(i + 2 * (j + 3 * k));
    }
  }
  NpyArray a;
  NpyStatus s = parse(file, &a);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(a.shape, (std::vector<std::int64_t>{2, 3, 4}));
  EXPECT_EQ(a.to_vector<std::int32_t>(), want);
  const std::string path = temp_path("fortran.npy");
  std::FILE* f = std::fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(std::fwrite(file.data(), 1, file.size(), f), file.size());
  std::fclose(f);
  s = read_npy(path, &a);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(a.to_vector<std::int32_t>(), want);
  std::remove(path.c_str());
  // One dimension and no elements read as they are.
  s = parse(npy_file(dict("<i4", "(3,)", true), Bytes(raw, raw + 12)), &a);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(a.to_vector<std::int32_t>(), (std::vector<std::int32_t>{0, 1, 2}));
  s = parse(npy_file(dict("<i4", "(2, 0)", true), Bytes()), &a);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(a.shape, (std::vector<std::int64_t>{2, 0}));
}

// A well-formed file of a numpy dtype attnref does not hold names that dtype, so a front end
// can report the argument's dtype; other failures name none.
TEST(Npy, UnreadDtypesAreNamed) {
  NpyArray a;
  EXPECT_EQ(parse(npy_file(dict("<u4", "(1,)"), Bytes(4, 0)), &a).unread_dtype(), "uint32");
  EXPECT_EQ(parse(npy_file(dict("<i2", "(2,)"), Bytes(4, 0)), &a).unread_dtype(), "int16");
  EXPECT_EQ(parse(npy_file(dict(">f4", "(1,)"), Bytes(4, 0)), &a).unread_dtype(), "");
  EXPECT_EQ(parse(npy_file(dict("|O", "(1,)"), Bytes(8, 0)), &a).unread_dtype(), "");
  EXPECT_EQ(parse(npy_file(dict("<f4", "(2,)"), Bytes(4, 0)), &a).unread_dtype(), "");
}

TEST(Npy, LargeHeadersAreWrittenAsVersion2) {
  // A rank-64 shape of ones does not need a v2 header; check the writer's v1 limit another way:
  // the header length field is 2 bytes in v1, so any header under 65535 bytes stays v1.
  std::vector<std::int64_t> shape(64, 1);
  const float x = 3.0f;
  Bytes encoded;
  ASSERT_TRUE(encode_npy(make_npy_array<float>(shape, &x), &encoded).ok());
  EXPECT_EQ(encoded[6], 1);
  EXPECT_EQ((encoded.size() - 4) % 64, 0u);
  NpyArray back;
  ASSERT_TRUE(parse(encoded, &back).ok());
  EXPECT_EQ(back.rank(), 64u);
}

TEST(Npy, TypedAccessorsRefuseTheWrongType) {
  const std::int32_t v[2] = {1, 2};
  NpyArray a = make_npy_array<std::int32_t>({2}, v);
  EXPECT_EQ(a.data<float>(), nullptr);
  EXPECT_EQ(a.data<std::int64_t>(), nullptr);
  EXPECT_EQ(a.mutable_data<float>(), nullptr);
  EXPECT_TRUE(a.to_vector<float>().empty());
  ASSERT_NE(a.mutable_data<std::int32_t>(), nullptr);
  a.mutable_data<std::int32_t>()[1] = 9;
  EXPECT_EQ(a.data<std::int32_t>()[1], 9);
  EXPECT_EQ(a.numel(), 2);
  EXPECT_EQ(NpyArray().data<float>(), nullptr);
}

// --- malformed input: one case per error path ----------------------------------------------

struct BadCase {
  const char* name;
  Bytes bytes;
  const char* problem;  // substring of the message
};

Bytes f32_data(std::size_t n) { return Bytes(n * 4, 0); }

std::vector<BadCase> bad_cases() {
  Bytes v5 = npy_file(dict("<f4", "(1,)"), f32_data(1));
  v5[6] = 4;
  Bytes minor1 = npy_file(dict("<f4", "(1,)"), f32_data(1));
  minor1[7] = 1;
  Bytes huge_header = npy_file(dict("<f4", "(1,)"), f32_data(1), 2);
  huge_header[10] = 0x20;  // header length 0x00200000+... > 1 MiB
  Bytes long_header = npy_file(dict("<f4", "(1,)"), f32_data(1));
  long_header[8] = 0xFF;  // header length 0x??FF, past the end of the file
  long_header[9] = 0x7F;
  const Bytes magic_only = {0x93, 'N', 'U', 'M', 'P', 'Y'};
  const Bytes no_length = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, 10};
  const Bytes no_length_v2 = {0x93, 'N', 'U', 'M', 'P', 'Y', 2, 0, 10, 0, 0};
  std::string rank65 = "(";
  for (int i = 0; i < 65; ++i) rank65 += "1, ";
  rank65 += ")";
  return {
      {"empty", {}, "not a .npy file"},
      {"text", Bytes{'h', 'e', 'l', 'l', 'o', ' ', 'w', 'o', 'r', 'l', 'd'}, "not a .npy file"},
      {"npz", Bytes{'P', 'K', 3, 4, 0, 0, 0, 0, 0, 0}, "not a .npy file"},
      {"magic only", magic_only, "ends inside the format version"},
      {"version 4.0", v5, "unsupported .npy format version 4.0"},
      {"version 1.1", minor1, "unsupported .npy format version 1.1"},
      {"no header length", no_length, "ends inside the header length field"},
      {"no header length v2", no_length_v2, "ends inside the header length field"},
      {"header over 1 MiB", huge_header, "more than the 1 MiB"},
      {"header past the end", long_header, "truncated header"},
      {"not a dict", npy_file("['descr', '<f4']\n", f32_data(1)), "not a Python dict"},
      {"big-endian f4", npy_file(dict(">f4", "(1,)"), f32_data(1)), "big-endian"},
      {"big-endian i8", npy_file(dict(">i8", "(1,)"), Bytes(8, 0)), "big-endian"},
      {"native-order f4", npy_file(dict("=f4", "(1,)"), f32_data(1)), "unsupported dtype '=f4'"},
      {"big-endian uint16", npy_file(dict(">u2", "(1,)"), Bytes(2, 0)), "big-endian"},
      {"uint32", npy_file(dict("<u4", "(1,)"), Bytes(4, 0)), "unsupported dtype '<u4'"},
      {"void of 3 bytes", npy_file(dict("|V3", "(1,)"), Bytes(3, 0)), "unsupported dtype '|V3'"},
      {"void truncated", npy_file(dict("|V1", "(3,)"), Bytes(2, 0)),
       "data is truncated: shape (3,) of void8 needs 3 bytes, the file has 2"},
      {"complex", npy_file(dict("<c8", "(1,)"), Bytes(8, 0)), "unsupported dtype '<c8'"},
      {"object", npy_file(dict("|O", "(1,)"), Bytes(8, 0)), "unsupported dtype '|O'"},
      {"structured",
       npy_file("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,), }", f32_data(1)),
       "structured dtype"},
      {"descr not a string",
       npy_file("{'descr': 4, 'fortran_order': False, 'shape': (1,), }", f32_data(1)),
       "'descr' is not a quoted dtype string"},
      {"missing shape", npy_file("{'descr': '<f4', 'fortran_order': False}", f32_data(1)),
       "lacks the key 'shape'"},
      {"missing descr", npy_file("{'fortran_order': False, 'shape': (1,)}", f32_data(1)),
       "lacks the key 'descr'"},
      {"duplicate key",
       npy_file("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (1,)}",
                f32_data(1)),
       "'descr' appears twice"},
      {"unknown key",
       npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'x': 1}", f32_data(1)),
       "unexpected key 'x'"},
      {"fortran_order not a bool",
       npy_file("{'descr': '<f4', 'fortran_order': 0, 'shape': (1,)}", f32_data(1)),
       "neither True nor False"},
      {"shape not a tuple",
       npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': [1]}", f32_data(1)),
       "'shape' is not a tuple"},
      {"shape (5)", npy_file(dict("<f4", "(5)"), f32_data(5)), "a number rather than a tuple"},
      {"negative extent", npy_file(dict("<f4", "(2, -1)"), f32_data(0)), "negative extent"},
      {"non-integer extent", npy_file(dict("<f4", "(2, 'a')"), f32_data(0)),
       "something other than integers"},
      {"float extent", npy_file(dict("<f4", "(2.5,)"), f32_data(0)), "expected ',' or ')'"},
      {"unclosed shape",
       npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (1, ", f32_data(1)),
       "not closed"},
      {"extent beyond int64", npy_file(dict("<f4", "(99999999999999999999,)"), f32_data(1)),
       "does not fit in int64"},
      {"element count overflows", npy_file(dict("<f4", "(4294967296, 4294967296)"), f32_data(1)),
       "more elements than int64 can count"},
      {"byte count overflows", npy_file(dict("<f8", "(2305843009213693952,)"), f32_data(1)),
       "needs more bytes than int64 can count"},
      {"absurd shape, tiny file", npy_file(dict("<f4", "(1000000000, 1000000000)"), f32_data(1)),
       "data is truncated"},
      {"rank 65", npy_file(dict("<f4", rank65), f32_data(1)), "more than 64 dimensions"},
      {"truncated data", npy_file(dict("<f4", "(2, 3)"), f32_data(5)), "data is truncated"},
      {"surplus data", npy_file(dict("<f4", "(2, 3)"), f32_data(7)),
       "data is longer than the shape"},
      {"bool byte 2", npy_file(dict("|b1", "(3,)"), Bytes{0, 1, 2}), "holds the byte 2"},
      {"text after dict", npy_file(dict("<f4", "(1,)") + "junk", f32_data(1)),
       "unexpected text after the header dict"},
      {"unterminated string", npy_file("{'descr: '<f4'}", f32_data(1)), "expected ':'"},
      {"escape in string", npy_file("{'de\\scr': '<f4'}", f32_data(1)), "expected a quoted key"},
      {"missing colon", npy_file("{'descr' '<f4'}", f32_data(1)), "expected ':'"},
      {"missing comma",
       npy_file("{'descr': '<f4' 'fortran_order': False, 'shape': (1,)}", f32_data(1)),
       "expected ',' or '}'"},
      {"unclosed dict", npy_file("{'descr': '<f4', ", f32_data(1)), "expected a quoted key"},
      {"control bytes in descr", npy_file(dict(std::string("<f\x01", 3), "(1,)"), f32_data(1)),
       "unsupported dtype '<f\\x01'"},
  };
}

TEST(Npy, EveryMalformedInputIsABadFileErrorNamingTheFileAndTheProblem) {
  for (const BadCase& c : bad_cases()) {
    SCOPED_TRACE(c.name);
    NpyArray a;
    a.shape = {99};  // must be cleared on error
    const NpyStatus s = parse(c.bytes, &a);
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.code(), ErrorCode::kBadFile);
    EXPECT_EQ(s.status().code(), ErrorCode::kBadFile);
    EXPECT_EQ(s.file(), "test.npy");
    EXPECT_EQ(s.message().rfind("test.npy: ", 0), 0u) << s.message();
    EXPECT_NE(s.message().find(c.problem), std::string::npos) << s.message();
    EXPECT_FALSE(s.hint().empty());
    EXPECT_TRUE(a.shape.empty());
    EXPECT_TRUE(a.bytes.empty());
  }
}

TEST(Npy, EveryMalformedFileGivesTheSameErrorFromDisk) {
  for (const BadCase& c : bad_cases()) {
    SCOPED_TRACE(c.name);
    const std::string path = temp_path("bad.npy");
    std::FILE* f = std::fopen(path.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    if (!c.bytes.empty()) std::fwrite(c.bytes.data(), 1, c.bytes.size(), f);
    std::fclose(f);
    NpyArray a;
    const NpyStatus s = read_npy(path, &a);
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.code(), ErrorCode::kBadFile);
    EXPECT_EQ(s.message().rfind(path + ": ", 0), 0u) << s.message();
    EXPECT_NE(s.message().find(c.problem), std::string::npos) << s.message();
    std::remove(path.c_str());
  }
}

TEST(Npy, EveryTruncationOfAValidFileIsRejected) {
  const float values[6] = {1, 2, 3, 4, 5, 6};
  Bytes full;
  ASSERT_TRUE(encode_npy(make_npy_array<float>({2, 3}, values), &full).ok());
  for (std::size_t n = 0; n < full.size(); ++n) {
    NpyArray a;
    const NpyStatus s = parse_npy(full.data(), n, &a, "cut.npy");
    ASSERT_FALSE(s.ok()) << "prefix of " << n << " bytes was accepted";
    EXPECT_EQ(s.code(), ErrorCode::kBadFile);
  }
  NpyArray a;
  EXPECT_TRUE(parse_npy(full.data(), full.size(), &a).ok());
}

TEST(Npy, RandomCorruptionNeverCrashesAndIsEitherValidOrBadFile) {
  const std::int64_t values[4] = {1, 2, 3, 4};
  Bytes valid;
  ASSERT_TRUE(encode_npy(make_npy_array<std::int64_t>({2, 2}, values), &valid).ok());
  std::mt19937 rng(1234);
  for (int iter = 0; iter < 20000; ++iter) {
    Bytes b = valid;
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      const std::size_t at = rng() % b.size();
      b[at] = rng() % 4 == 0 ? static_cast<unsigned char>("0123456789(),' -{}:"[rng() % 19])
                             : static_cast<unsigned char>(rng() % 256);
    }
    if (rng() % 8 == 0) b.resize(rng() % b.size());
    NpyArray a;
    const NpyStatus s = parse_npy(b.data(), b.size(), &a, "fuzz.npy");
    if (s.ok()) {
      EXPECT_EQ(static_cast<std::int64_t>(a.bytes.size()), a.numel() * npy_itemsize(a.dtype));
    } else {
      EXPECT_EQ(s.code(), ErrorCode::kBadFile);
      EXPECT_EQ(s.message().rfind("fuzz.npy: ", 0), 0u);
    }
  }
}

TEST(Npy, NullBufferWithBytesIsRejected) {
  NpyArray a;
  const NpyStatus s = parse_npy(nullptr, 10, &a, "null.npy");
  EXPECT_EQ(s.code(), ErrorCode::kBadFile);
  EXPECT_NE(s.message().find("null buffer"), std::string::npos);
}

// --- files ---------------------------------------------------------------------------------

TEST(Npy, MissingFileAndDirectoryAreBadFiles) {
  NpyArray a;
  const std::string missing = temp_path("does_not_exist.npy");
  NpyStatus s = read_npy(missing, &a);
  EXPECT_EQ(s.code(), ErrorCode::kBadFile);
  EXPECT_EQ(s.message(), missing + ": cannot open: No such file or directory");

  s = read_npy(::testing::TempDir(), &a);  // a directory
  EXPECT_EQ(s.code(), ErrorCode::kBadFile);
  EXPECT_EQ(s.message().rfind(::testing::TempDir() + ": cannot", 0), 0u) << s.message();
}

TEST(Npy, WriterRejectsArraysItCannotWrite) {
  const std::string path = temp_path("w.npy");
  NpyArray wrong_size = make_npy_array<float>({2}, std::vector<float>{1, 2}.data());
  wrong_size.bytes.pop_back();
  NpyStatus s = write_npy(path, wrong_size);
  EXPECT_EQ(s.code(), ErrorCode::kBadFile);
  EXPECT_EQ(s.message(), path + ": the array holds 7 bytes but shape (2,) of float32 needs 8");

  NpyArray bf16;
  bf16.dtype = DType::kBFloat16;
  s = write_npy(path, bf16);
  EXPECT_EQ(s.code(), ErrorCode::kBadFile);
  EXPECT_NE(s.message().find("cannot write dtype bfloat16"), std::string::npos);

  NpyArray negative;
  negative.dtype = DType::kFloat32;
  negative.shape = {-1};
  s = write_npy(path, negative);
  EXPECT_EQ(s.code(), ErrorCode::kBadFile);
  EXPECT_NE(s.message().find("cannot write the shape (-1,)"), std::string::npos);

  const float x = 1.0f;
  const std::string no_dir = temp_path("no_such_dir/out.npy");
  s = write_npy(no_dir, make_npy_array<float>({1}, &x));
  EXPECT_EQ(s.code(), ErrorCode::kBadFile);
  EXPECT_EQ(s.message(), no_dir + ": cannot create: No such file or directory");
}

TEST(Npy, MakeArrayRejectsUnusableShapes) {
  const float x = 1.0f;
  EXPECT_EQ(make_npy_array(DType::kFloat32, {-1}, &x).dtype, DType::kUnknown);
  EXPECT_EQ(make_npy_array(DType::kFloat32, {INT64_MAX, 2}, &x).dtype, DType::kUnknown);
  EXPECT_EQ(make_npy_array(DType::kBFloat16, {1}, &x).dtype, DType::kUnknown);
  EXPECT_EQ(make_npy_array(DType::kFloat32, {1}, nullptr).dtype, DType::kUnknown);
  EXPECT_EQ(make_npy_array(DType::kFloat32, {0}, nullptr).dtype, DType::kFloat32);
}

}  // namespace
}  // namespace attnref
