// The validators in a CUDA translation unit, compiled by nvcc (C++17): what a kernel author
// writes on the host before a launch. Host code only: nothing here touches a GPU, so the test
// runs on machines without one. Exits 0 when every check gives the expected answer.
#include <attnref/interop/flashinfer.hpp>
#include <attnref/interop/vllm.hpp>
#include <attnref/validate.hpp>

#include <cstdint>
#include <cstdio>
#include <vector>

// Shape tier at compile time, as at model build time.
static_assert(attnref::check_heads(32, 8).ok(), "Llama-3-8B heads");
static_assert(!attnref::check_heads(8, 6).ok(), "8 / 6 is not a GQA ratio");

namespace {

int failures = 0;

void expect(bool condition, const char* what, const attnref::Status& s) {
  if (condition) return;
  ++failures;
  std::printf("FAILED: %s: %s\n", what, s.to_string().c_str());
}

/// The pre-flight a launcher would run on its host mirrors of the metadata.
attnref::Status preflight(const std::vector<float>& q, const std::vector<float>& k,
                          const std::vector<std::int32_t>& lengths,
                          const std::vector<std::int32_t>& table, std::int64_t batch,
                          std::int64_t hq, std::int64_t hkv, std::int64_t dim, std::int64_t pages,
                          std::int64_t page_size, std::int64_t pps) {
  attnref::PagedAttentionArgs<float> args;
  args.q = {q.data(), {batch, hq, dim}};
  args.k_pages = attnref::kv_pages_view(k.data(), attnref::KvLayout::kNhd, hkv, pages, page_size,
                                        dim, static_cast<std::int64_t>(k.size()));
  args.v_pages = args.k_pages;
  args.lengths = {lengths.data(), {batch}};
  args.page_indices = {table.data(), {batch, pps}};
  return attnref::check_paged(args, attnref::Profile::kJax);
}

}  // namespace

int main() {
  const std::int64_t batch = 2, hq = 8, hkv = 2, dim = 4, pages = 6, page_size = 4, pps = 3;
  std::vector<float> q(batch * hq * dim, 0.5f), k(pages * page_size * hkv * dim, 1.0f);
  std::vector<std::int32_t> lengths{5, 12}, table{4, 0, 0, 1, 2, 5};

  attnref::Status s = attnref::check_heads(hq, hkv);
  expect(s.ok(), "check_heads(8, 2)", s);
  s = attnref::check_heads(8, 6);
  expect(s.code() == attnref::ErrorCode::kGqaNotDivisible, "check_heads(8, 6)", s);

  s = preflight(q, k, lengths, table, batch, hq, hkv, dim, pages, page_size, pps);
  expect(s.ok(), "check_paged on a valid batch", s);
  table[4] = 6;  // a live page past the pool
  s = preflight(q, k, lengths, table, batch, hq, hkv, dim, pages, page_size, pps);
  expect(s.code() == attnref::ErrorCode::kPageIndexOutOfRange, "check_paged, page 6 of 6", s);
  table[4] = 2;
  lengths[1] = 13;  // past 3 pages of 4 tokens
  s = preflight(q, k, lengths, table, batch, hq, hkv, dim, pages, page_size, pps);
  expect(s.code() == attnref::ErrorCode::kLengthOutOfRange, "check_paged, length 13", s);

  // The FlashInfer adapter on the host side of a launcher.
  std::vector<std::int32_t> indptr{0, 2, 5}, indices{4, 0, 1, 2, 5}, last{1, 5};
  attnref::FlashInferPageTable<std::int32_t> csr;
  csr.kv_indptr = {indptr.data(), {3}};
  csr.kv_indices = {indices.data(), {5}};
  csr.kv_last_page_len = {last.data(), {2}};
  s = attnref::check_flashinfer_page_table(csr, page_size, pages);
  expect(s.code() == attnref::ErrorCode::kInvalidLastPageLen, "CSR last_page_len 5 > 4", s);

  std::printf("%s\n", failures == 0 ? "nvcc host build: all checks as expected" : "FAILED");
  return failures == 0 ? 0 : 1;
}
