#pragma once
// Checks of option values, run by CLI11 before a command runs (a failure is a
// usage error, exit 2). Numbers: CLI11's own conversion reads "-1" into an
// unsigned flag as 2^64 - 1, saturates numbers past 64 bits, takes "010" as
// octal and "inf" as a temperature; these validators read the text with
// core/number_text.h instead, refuse what does not fit, and hand CLI11 the
// number in plain decimal.
#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <vector>

namespace tally::cli {

// For a path option: the path is not empty (an empty -m would otherwise mean
// "the default model", silently).
CLI::Validator nonempty_path();
// For a text option that must not be empty (`flag` names it).
CLI::Validator nonempty_text(std::string flag);
// For a path the command writes (io/atomic_file.h): not empty, and a regular
// file, a symlink to one, or nothing yet; `what` names it in the error.
CLI::Validator output_file(std::string what);
// For a byte count (core/byte_size.h: "4194304", "4MiB", "24GB"): within [min, max].
CLI::Validator byte_count_in(std::string flag, uint64_t min, uint64_t max);
// For one option: an integer in [min, max].
CLI::Validator integer_in(int64_t min, int64_t max);
// For an unsigned option: a whole number (no sign) up to max.
CLI::Validator unsigned_in(uint64_t max);
// For a number of tokens ("8192", "8k", "128K"; core/byte_size.h), handed
// to CLI11 in plain decimal: within [min, max].
CLI::Validator token_count_in(int64_t min, int64_t max);
// For one option: a finite number in [min, max].
CLI::Validator real_in(double min, double max);
// For a text option: one of `choices` (the message lists them).
CLI::Validator one_of(std::vector<std::string> choices);

// Gives every numeric option of `app` and its subcommands (CLI11 type INT,
// UINT or FLOAT; list items one by one) the strict reading of its type:
// INT within int64, UINT within uint64 (no sign), FLOAT finite and within
// float. Every numeric option must also carry a range of its own
// (integer_in, unsigned_in, token_count_in, real_in): one without is a programming error
// (std::logic_error), so that no number reaches a narrower type unchecked
// and every refusal names the range. Call after all options are added.
void strict_numbers(CLI::App& app);

}  // namespace tally::cli
