// SPDX-License-Identifier: Apache-2.0
// attnref-run config: checks one attention layer's configuration (no tensors), as a model
// builder would at load time.
#include <iostream>

#include "attnref/validate/heads.hpp"
#include "attnref/validate/model_config.hpp"
#include "cli_common.hpp"

namespace attnref {
namespace cli {

int run_config(int argc, char** argv) {
  static const CommandSpec kSpec{
      "config",
      "--q-heads N --kv-heads N --head-dim N [--kv-head-dim N] [--page-size N]",
      "Checks an attention configuration: positive head counts, query heads a multiple of KV\n"
      "heads (with the valid KV head counts as a hint), positive head_dim, K/V head_dim equal to\n"
      "q's, positive page size. Prints ok, or the error and a hint on stderr (exit 2).",
      {{"--q-heads", "N", "number of query heads"},
       {"--kv-heads", "N", "number of KV heads"},
       {"--head-dim", "N", "head_dim of q (and K/V unless --kv-head-dim is given)"},
       {"--kv-head-dim", "N", "head_dim of the K/V pages, when it may differ from q's"},
       {"--page-size", "N", "tokens per KV page"}}};
  const ParsedArgs args(kSpec, argc, argv);
  if (args.help_requested()) return print_help(kSpec);

  AttentionConfig config;
  config.num_q_heads = args.required_int64("--q-heads");
  config.num_kv_heads = args.required_int64("--kv-heads");
  config.head_dim = args.required_int64("--head-dim");
  if (std::optional<std::int64_t> page_size = args.int64("--page-size")) {
    config.page_size = *page_size;
  }
  fail_if_error(check_heads(config.num_q_heads, config.num_kv_heads));
  fail_if_error(check_config(config));
  if (std::optional<std::int64_t> kv_head_dim = args.int64("--kv-head-dim")) {
    fail_if_error(check_head_dim(config.head_dim, *kv_head_dim));
  }
  std::cout << "ok\n";
  return kExitOk;
}

}  // namespace cli
}  // namespace attnref
