// A downstream program: validates a GQA config and runs a tiny paged decode.
#include <attnref/attnref.hpp>

#include <cmath>
#include <cstdio>
#include <vector>

int main() {
  static_assert(attnref::check_heads(32, 8).ok(), "Llama-3 heads");
  if (attnref::check_heads(8, 6).ok()) return 1;
  // One sequence, 2 query heads on 1 KV head, head_dim 1, one page of 2 tokens.
  std::vector<float> q{1.0f, 1.0f}, k{0.0f, 0.0f}, v{1.0f, 3.0f}, out(2);
  std::vector<int> lengths{2}, table{0};
  attnref::PagedAttentionArgs<float> args;
  args.q = {q.data(), {1, 2, 1}};
  args.k_pages = {k.data(), {1, 1, 2, 1}};
  args.v_pages = {v.data(), {1, 1, 2, 1}};
  args.lengths = {lengths.data(), {1}};
  args.page_indices = {table.data(), {1, 1}};
  attnref::paged_attention(args, attnref::TensorView<float, 3>(out.data(), {1, 2, 1}));
  std::printf("consumer: %g %g\n", out[0], out[1]);
  return std::fabs(out[0] - 2.0f) < 1e-6f && std::fabs(out[1] - 2.0f) < 1e-6f ? 0 : 1;
}
