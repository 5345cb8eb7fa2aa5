#pragma once
// A member of a wheel (a zip file, libzip), read as a stream of chunks.
// Errors name the wheel and the member; a member that is not there, a zip
// that does not open, or a chunk that fails to inflate (a damaged or cut
// download) all throw tally::Error.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

namespace tally {

// Calls sink(data, n) for each chunk of `member` in order; returns its size.
uint64_t read_wheel_member(const std::string& wheel, const std::string& member,
                           const std::function<void(const char*, size_t)>& sink);

}  // namespace tally
