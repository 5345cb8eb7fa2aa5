#include "store/wheel.h"

#include <zip.h>

#include <memory>
#include <vector>

#include "core/error.h"
#include "core/printable.h"

namespace tally {

uint64_t read_wheel_member(const std::string& wheel, const std::string& member,
                           const std::function<void(const char*, size_t)>& sink) {
  int err = 0;
  std::unique_ptr<zip_t, decltype(&zip_discard)> z(zip_open(wheel.c_str(), ZIP_RDONLY | ZIP_CHECKCONS, &err),
                                                   &zip_discard);
  if (!z) {
    zip_error_t e;
    zip_error_init_with_code(&e, err);
    const std::string why = zip_error_strerror(&e);
    zip_error_fini(&e);
    fail("{}: not a readable wheel (zip): {}", wheel, why);
  }
  const zip_int64_t index = zip_name_locate(z.get(), member.c_str(), 0);
  if (index < 0) fail("{}: the wheel has no member '{}'", wheel, excerpt(member, 200));
  std::unique_ptr<zip_file_t, decltype(&zip_fclose)> f(zip_fopen_index(z.get(), static_cast<zip_uint64_t>(index), 0),
                                                       &zip_fclose);
  if (!f) fail("{}: cannot open the member '{}': {}", wheel, excerpt(member, 200), zip_strerror(z.get()));
  std::vector<char> buf(1 << 20);
  uint64_t total = 0;
  for (;;) {
    const zip_int64_t n = zip_fread(f.get(), buf.data(), buf.size());
    if (n < 0) fail("{}: the member '{}' is damaged: {}", wheel, excerpt(member, 200), zip_file_strerror(f.get()));
    if (n == 0) break;
    sink(buf.data(), static_cast<size_t>(n));
    total += static_cast<uint64_t>(n);
  }
  return total;
}

}  // namespace tally
