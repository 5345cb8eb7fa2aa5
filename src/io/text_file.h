#pragma once
// The whole of an input file as bytes: -f FILE, --config FILE, --text FILE,
// the JSON and template files of a model folder, an API key file. Every
// input is read here, under the same rules:
//   - it is opened without blocking, so neither a FIFO nor a device can hold
//     the open;
//   - a directory or a block device is refused, and where only a file makes
//     sense (InputKind::File: the files of a model folder) anything but a
//     regular file is refused;
//   - otherwise a pipe, a FIFO, a character device (a terminal, /dev/zero)
//     or a socket is read to its end as `cat` would, except that a FIFO that
//     no process has open for writing is refused at once, not waited on;
//   - more than `max_bytes` is refused: a file by its size before a byte is
//     read, a stream as soon as the count passes the limit (/dev/zero ends
//     with an error after max_bytes, not with memory exhausted).
// Errors are tally::Error, one line naming the path and `what` ("text file").
#include <cstdint>
#include <string>
#include <string_view>

namespace tally {

// The most text one input may hold: about what the tokenizer encodes at once
// (INT32_MAX / 4 bytes).
inline constexpr uint64_t kMaxTextBytes = uint64_t{512} << 20;
// A config file (config.json, tokenizer_config.json, a catalog): real ones
// are a few KiB.
inline constexpr uint64_t kMaxConfigBytes = uint64_t{16} << 20;

enum class InputKind {
  File,          // a regular file only
  FileOrStream,  // a regular file, a pipe, a FIFO with a writer, a character device, a socket
};

std::string read_text_file(const std::string& path, std::string_view what, uint64_t max_bytes,
                           InputKind kind = InputKind::FileOrStream);

}  // namespace tally
