#pragma once
// The held tasks of the lab's speculation experiment, compiled in from
// bench/speculative_tasks.json (CMakeLists.txt), the file the comparison
// scripts read: one set of tasks for the lab and the benchmarks.
#include <cstddef>

namespace tally {

extern const unsigned char kSpeculativeTasksJson[];
extern const size_t kSpeculativeTasksJsonSize;

}  // namespace tally
