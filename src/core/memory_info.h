#pragma once
// What this machine can give a new allocation: the kernel's estimate of the
// memory available without swapping. Read afresh at every call (no cache: it
// changes as other processes run); thread-safe.
#include <cstdint>

namespace tally {

// MemAvailable of /proc/meminfo in bytes; where that is missing, the free
// physical pages (sysconf); UINT64_MAX when neither can be read.
uint64_t available_memory_bytes();

}  // namespace tally
