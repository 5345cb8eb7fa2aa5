#pragma once
// Writing to stdout so that nothing is lost silently: a failed write (a full
// disk, a closed pipe) is an error with a message and a non-zero exit.
#include <nlohmann/json.hpp>

namespace tally::cli {

// Flushes stdout; throws tally::Error naming the OS error when the output
// could not be written (now or by an earlier buffered write).
void flush_stdout();

// One JSON document and a newline, then flush_stdout(). Like every JSON the
// CLI prints: bytes that are not UTF-8 (in paths, file metadata, generated
// text) become U+FFFD, so the output is always valid JSON. indent < 0: one line.
void print_json(const nlohmann::json& j, int indent = -1);

}  // namespace tally::cli
