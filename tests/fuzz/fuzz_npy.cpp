// SPDX-License-Identifier: Apache-2.0
// libFuzzer harness of the .npy reader. An input that starts with \x93 is a whole file; any
// other input is a structured one (version byte, then header text and data separated by a
// length byte) wrapped in a valid preamble, so the fuzzer reaches the header parser quickly.
//
// Invariants:
//  - parse_npy (from memory) and read_npy (from a file) agree: both fail, or both give the same
//    array;
//  - an error is kBadFile with a message naming the file, and leaves the array empty;
//  - a success holds exactly numel * itemsize bytes, a known dtype and non-negative extents,
//    and encode_npy -> parse_npy gives the same array back;
//  - no allocation is sized from a header number the file's length does not back (libFuzzer's
//    -malloc_limit_mb catches any that is), and parse_npy / read_npy hold at most the
//    BudgetScope budget of the file's bytes at once (fuzz_common.hpp): a shape such as
//    (2^40, 0) or (0, 2^62) buys nothing.
// The corpus has such shapes, and int64 data past int32.
#include <unistd.h>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <attnref/io/npy.hpp>

#include "fuzz_common.hpp"

namespace {

const std::string& temp_path() {
  static const std::string path = [] {
    const char* dir = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    return std::string(dir) + "/attnref_fuzz_npy_" + std::to_string(getpid()) + ".npy";
  }();
  return path;
}

bool same_array(const attnref::NpyArray& x, const attnref::NpyArray& y) {
  return x.dtype == y.dtype && x.shape == y.shape && x.bytes == y.bytes;
}

void check_array(const attnref::NpyArray& a) {
  ATTNREF_FUZZ_CHECK(a.dtype != attnref::DType::kUnknown, "a success without a dtype");
  for (std::int64_t e : a.shape) ATTNREF_FUZZ_CHECK(e >= 0, "a negative extent");
  const std::int64_t numel = a.numel();
  ATTNREF_FUZZ_CHECK(numel >= 0, "numel overflows");
  ATTNREF_FUZZ_CHECK(
      static_cast<std::int64_t>(a.bytes.size()) == numel * attnref::npy_itemsize(a.dtype),
      "bytes do not match the shape");
  if (a.dtype == attnref::DType::kBool) {
    for (unsigned char c : a.bytes) ATTNREF_FUZZ_CHECK(c <= 1, "a bool byte other than 0/1");
    ATTNREF_FUZZ_CHECK(static_cast<std::int64_t>(a.to_vector<bool>().size()) == numel,
                       "to_vector<bool> size");
  }
  if (a.dtype == attnref::DType::kFloat32) {
    ATTNREF_FUZZ_CHECK(a.data<float>() != nullptr || numel == 0, "data<float>() null");
    ATTNREF_FUZZ_CHECK(a.data<double>() == nullptr, "data<double>() of a float32 array");
  }
  std::vector<unsigned char> encoded;
  const attnref::NpyStatus e = attnref::encode_npy(a, &encoded);
  ATTNREF_FUZZ_CHECK(e.ok(), "encode_npy of a parsed array failed: " + e.message());
  attnref::NpyArray back;
  const attnref::NpyStatus p = attnref::parse_npy(encoded.data(), encoded.size(), &back);
  ATTNREF_FUZZ_CHECK(p.ok(), "re-parse failed: " + p.message());
  ATTNREF_FUZZ_CHECK(same_array(a, back), "encode/parse round trip changed the array");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::vector<unsigned char> file;
  if (size > 0 && data[0] == 0x93) {
    file.assign(data, data + size);
  } else {
    attnref_fuzz::Reader r(data, size);
    const int version = 1 + r.u8() % 3;
    const std::size_t header_len = r.u8() | (static_cast<std::size_t>(r.u8() & 0x3) << 8);
    std::string header;
    for (std::size_t i = 0; i < header_len && !r.empty(); ++i) header += static_cast<char>(r.u8());
    const std::string rest(reinterpret_cast<const char*>(data) + (size - r.remaining()),
                           r.remaining());
    const unsigned char magic[8] = {
        0x93, 'N', 'U', 'M', 'P', 'Y', static_cast<unsigned char>(version), 0};
    file.assign(magic, magic + 8);
    const auto len = static_cast<std::uint32_t>(header.size());
    for (int i = 0; i < (version == 1 ? 2 : 4); ++i)
      file.push_back(static_cast<unsigned char>((len >> (8 * i)) & 0xFF));
    file.insert(file.end(), header.begin(), header.end());
    file.insert(file.end(), rest.begin(), rest.end());
  }

  attnref_fuzz::DataSize budget_data;
  budget_data.add(file);
  attnref::NpyArray mem;
  attnref::NpyStatus ms;
  {
    attnref_fuzz::BudgetScope budget("parse_npy", budget_data);
    ms = attnref::parse_npy(file.data(), file.size(), &mem, "fuzz.npy");
  }
  if (ms.ok()) {
    check_array(mem);
  } else {
    ATTNREF_FUZZ_CHECK(ms.code() == attnref::ErrorCode::kBadFile, "error code is not kBadFile");
    ATTNREF_FUZZ_CHECK(ms.message().rfind("fuzz.npy: ", 0) == 0, "message does not name the file");
    ATTNREF_FUZZ_CHECK(mem.shape.empty() && mem.bytes.empty(), "array not empty on error");
    ATTNREF_FUZZ_CHECK(!ms.status().ok(), "status() of an error is ok");
  }

  // The file reader must agree with the buffer reader.
  std::FILE* f = std::fopen(temp_path().c_str(), "wb");
  if (f == nullptr) return 0;
  const bool written = std::fwrite(file.data(), 1, file.size(), f) == file.size();
  std::fclose(f);
  if (!written) return 0;
  attnref::NpyArray disk;
  attnref::NpyStatus ds;
  {
    attnref_fuzz::BudgetScope budget("read_npy", budget_data);
    ds = attnref::read_npy(temp_path(), &disk);
  }
  ATTNREF_FUZZ_CHECK(ds.ok() == ms.ok(),
                     "read_npy and parse_npy disagree: " + ds.message() + " vs " + ms.message());
  if (ds.ok()) ATTNREF_FUZZ_CHECK(same_array(disk, mem), "read_npy and parse_npy differ");
  return 0;
}
