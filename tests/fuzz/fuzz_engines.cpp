// SPDX-License-Identifier: Apache-2.0
// libFuzzer harness of the engine check: a model's config.json (read_hf_config: every field,
// nesting, huge and odd numbers) or explicit fields, then the whole compatibility matrix on a
// drawn architecture at drawn engine releases. An input that starts with '{' is a whole
// config.json; any other is structured: an architecture byte, a version string, then either
// config.json text or the fields as raw 64-bit numbers.
//
// Invariants:
//  - nothing crashes, overflows or hangs, whatever the numbers;
//  - every error renders (a named code, a message) and an unknown architecture or version is
//    kUnknownEngineTarget;
//  - a configuration check_engine_config accepts gives one matrix row per kernel (vLLM's MLA
//    backends for MLA layers only), each naming its release, whose verdict is what its findings
//    add up to; a row's nearest configuration is itself accepted by that kernel;
//  - vLLM's choice of backend gives every backend it passes over a reason.
#include <cstdint>
#include <string>

#include <attnref/io/hf_config.hpp>
#include <attnref/validate/engines.hpp>

#include "fuzz_common.hpp"

namespace {

using attnref::EngineConfig;

EngineConfig drawn_fields(attnref_fuzz::Reader& r) {
  EngineConfig c;
  c.num_q_heads = static_cast<std::int64_t>(r.u64());
  c.num_kv_heads = static_cast<std::int64_t>(r.u64());
  c.head_dim = static_cast<std::int64_t>(r.u64());
  c.head_dim_v = r.flag() ? 0 : static_cast<std::int64_t>(r.u64());
  c.page_size = static_cast<std::int64_t>(r.u64());
  c.q_dtype = static_cast<attnref::DType>(r.u8() % 16);
  c.kv_dtype = static_cast<attnref::DType>(r.u8() % 16);
  c.sliding_window = static_cast<std::int64_t>(r.u64());
  c.soft_cap = r.flag();
  c.alibi = r.flag();
  c.sinks = r.flag();
  c.q_len = static_cast<std::int64_t>(r.u64());
  c.kv_len = static_cast<std::int64_t>(r.u64());
  c.causal = r.flag();
  return c;
}

void check_matrix(const EngineConfig& c, int arch, const attnref::EngineVersions& versions) {
  if (!attnref::check_engine_config(c).ok()) return;
  const auto rows = attnref::engine_matrix(c, arch, 0, versions);
  std::size_t listed = 0;
  for (attnref::EngineKernel k : attnref::kEngineKernels) {
    listed += !attnref::is_vllm_mla_kernel(k) || attnref::value_head_dim(c) != c.head_dim;
  }
  ATTNREF_FUZZ_CHECK(rows.size() == listed, "a kernel without a row");
  const attnref::VllmSelection selection = attnref::vllm_selection(c, arch, versions.vllm);
  for (const attnref::VllmPassedOver& p : selection.passed_over) {
    ATTNREF_FUZZ_CHECK(!p.reasons.empty(), "a backend passed over without a reason");
  }
  for (const attnref::EngineMatrixRow& row : rows) {
    ATTNREF_FUZZ_CHECK(!attnref::engine_version_name(row.target).empty(),
                       "a row without a release");
    ATTNREF_FUZZ_CHECK(row.verdict == attnref::verdict_of(row.findings), "verdict and findings");
    for (const attnref::EngineFinding& f : row.findings) {
      (void)f.to_string();
      (void)f.explanation();
    }
    if (row.has_nearest) {
      const attnref::EngineReport near = attnref::check_engine(row.nearest, row.target);
      ATTNREF_FUZZ_CHECK(near.status.ok() &&
                             attnref::verdict_of(near.findings) == attnref::EngineVerdict::kAccepts,
                         "a nearest configuration its kernel refuses");
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  attnref_fuzz::Reader r(data, size);
  const bool whole_file = size > 0 && data[0] == '{';
  const int arch = whole_file ? 90 : r.u8();
  std::string versions_text;
  for (std::size_t n = whole_file ? 0 : r.u8() % 32; n > 0; --n) {
    versions_text += static_cast<char>(r.u8());
  }
  attnref::EngineVersions versions;
  const attnref::Status v = attnref::parse_engine_versions(versions_text, &versions);
  attnref_fuzz::check_error_renders(v);
  ATTNREF_FUZZ_CHECK(v.ok() || v.code() == attnref::ErrorCode::kUnknownEngineTarget,
                     "a version error of another code");
  const attnref::Status target = attnref::check_engine_target({attnref::EngineKernel{}, arch});
  attnref_fuzz::check_error_renders(target);
  const int checked_arch = target.ok() ? arch : 90;

  if (whole_file || r.flag()) {
    const std::size_t at = whole_file ? 0 : r.offset();
    const std::string text(reinterpret_cast<const char*>(data) + at, size - at);
    attnref::HfAttentionConfig hf;
    const attnref::Status s = attnref::read_hf_config(text, 16, &hf);
    attnref_fuzz::check_error_renders(s);
    if (s.ok()) check_matrix(hf.config, checked_arch, versions);
  } else {
    const EngineConfig c = drawn_fields(r);
    attnref_fuzz::check_error_renders(attnref::check_engine_config(c));
    check_matrix(c, checked_arch, versions);
  }
  return 0;
}
