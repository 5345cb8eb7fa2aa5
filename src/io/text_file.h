#pragma once
// The whole of a text input (-f FILE, --config FILE) as bytes. A regular
// file, or a pipe or FIFO read to its end as `cat` would; a directory or a
// block device is refused, and so is more than `max_bytes` of text (reading
// /dev/zero ends with an error, not with memory exhausted).
#include <cstdint>
#include <string>
#include <string_view>

namespace tally {

// The most text one input may hold: about what the tokenizer encodes at once
// (INT32_MAX / 4 bytes).
inline constexpr uint64_t kMaxTextBytes = uint64_t{512} << 20;

// Throws tally::Error naming the path and `what` ("text file", "config file").
std::string read_text_file(const std::string& path, std::string_view what, uint64_t max_bytes);

}  // namespace tally
