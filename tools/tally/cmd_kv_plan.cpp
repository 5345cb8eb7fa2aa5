// tally kv-plan: sizes the KV cache of a model shape (stub until the planner lands).
#include "commands.h"

namespace tally::cli {

void add_kv_plan(CLI::App& app) {
  app.add_subcommand("kv-plan", "size the KV cache of a model shape");
}

}  // namespace tally::cli
