#include "option_checks.h"

#include <fmt/format.h>

#include <cfloat>
#include <stdexcept>
#include <string>

#include "core/byte_size.h"
#include "core/error.h"
#include "core/number_text.h"
#include "core/printable.h"
#include "io/atomic_file.h"

namespace tally::cli {
namespace {

// The name every range validator carries, so that strict_numbers can check that each number has one.
constexpr const char* kRange = "range";
// A token count's range: its validator reads "8k" itself, which the plain integer reading would refuse.
constexpr const char* kTokenRange = "token range";

// The validators see the text before CLI11 converts it: on success they
// rewrite it as plain decimal, which CLI11's base-0 strtoll reads back exactly.
// CLI11 puts the option's name before the message.
CLI::Validator integer_validator(int64_t min, int64_t max, std::string description) {
  return CLI::Validator(
      [min, max](std::string& s) {
        std::string e = integer_error("", s, min, max);
        if (e.empty()) s = fmt::format("{}", *parse_integer(s));
        return e.empty() ? e : e.substr(1);
      },
      std::move(description));
}

CLI::Validator unsigned_validator(uint64_t max, std::string description) {
  return CLI::Validator(
      [max](std::string& s) {
        std::string e = unsigned_error("", s, max);
        if (e.empty()) s = fmt::format("{}", *parse_whole(trim(s)));
        return e.empty() ? e : e.substr(1);
      },
      std::move(description));
}

CLI::Validator real_validator(double min, double max, std::string description) {
  return CLI::Validator(
      [min, max](std::string& s) {
        std::string e = real_error("", s, min, max);
        if (e.empty()) s = fmt::format("{}", *parse_real(s));  // shortest form that reads back exactly
        return e.empty() ? e : e.substr(1);
      },
      std::move(description));
}

}  // namespace

CLI::Validator nonempty_path() {
  return CLI::Validator([](std::string& s) { return s.empty() ? std::string("the path is empty") : std::string(); },
                        "");
}

CLI::Validator nonempty_text(std::string flag) {
  return CLI::Validator(
      [flag](std::string& s) { return s.empty() ? fmt::format("{} must not be empty", flag) : std::string(); }, "");
}

CLI::Validator output_file(std::string what) {
  return CLI::Validator(
      [what](std::string& s) {
        try {
          resolve_write_target(s, what);
        } catch (const Error& e) {
          return std::string(e.what());
        }
        return std::string();
      },
      "");
}

CLI::Validator byte_count_in(std::string flag, uint64_t min, uint64_t max) {
  return CLI::Validator(
      [flag, min, max](std::string& s) {
        try {
          const uint64_t n = parse_byte_count(s, flag);
          if (n < min || n > max)
            return fmt::format("{} is outside [{}, {}]", format_bytes(n), format_bytes(min), format_bytes(max));
        } catch (const Error& e) {
          return std::string(e.what());
        }
        return std::string();
      },
      "");
}

CLI::Validator integer_in(int64_t min, int64_t max) {
  return integer_validator(min, max, fmt::format("INT in [{} - {}]", min, max)).name(kRange);
}

CLI::Validator unsigned_in(uint64_t max) {
  return unsigned_validator(max, fmt::format("UINT in [0 - {}]", max)).name(kRange);
}

CLI::Validator token_count_in(int64_t min, int64_t max) {
  return CLI::Validator(
             [min, max](std::string& s) {
               if (const auto v = parse_integer(s); v && (*v < min || *v > max))  // "-1": a number, out of range
                 return fmt::format("{} is out of range ({} to {})", *v, min, max);
               try {
                 const uint64_t n = parse_token_count(s, "");
                 if (n < static_cast<uint64_t>(min) || n > static_cast<uint64_t>(max))
                   return fmt::format("{} is out of range ({} to {})", excerpt(trim(s), 40), min, max);
                 s = fmt::format("{}", n);
               } catch (const Error& e) {
                 return std::string(trim(e.what()));
               }
               return std::string();
             },
             fmt::format("TOKENS in [{} - {}], e.g. 8k", min, max))
      .name(kTokenRange);
}

CLI::Validator real_in(double min, double max) {
  return real_validator(min, max, fmt::format("FLOAT in [{} - {}]", min, max)).name(kRange);
}

CLI::Validator one_of(std::vector<std::string> choices) {
  std::string list;
  for (const auto& c : choices) list += (list.empty() ? "" : ", ") + c;
  return CLI::Validator(
      [choices, list](std::string& s) {
        for (const auto& c : choices)
          if (s == c) return std::string();
        return fmt::format("'{}' is not one of {}", excerpt(s, 40), list);
      },
      "");
}

void strict_numbers(CLI::App& app) {
  for (CLI::Option* opt : app.get_options()) {
    const std::string type = opt->get_type_name();
    if (type != "INT" && type != "UINT" && type != "FLOAT") continue;
    auto has = [opt](const char* name) {
      try {
        opt->get_validator(name);
        return true;
      } catch (const CLI::OptionNotFound&) {
        return false;
      }
    };
    if (has(kTokenRange)) continue;
    if (!has(kRange))
      throw std::logic_error(fmt::format("{} {} has no range (integer_in, unsigned_in, token_count_in or real_in)",
                                         app.get_name(), opt->get_name()));
    if (type == "INT")
      opt->transform(integer_validator(INT64_MIN, INT64_MAX, ""));
    else if (type == "UINT")
      opt->transform(unsigned_validator(UINT64_MAX, ""));
    else if (type == "FLOAT")
      opt->transform(real_validator(-FLT_MAX, FLT_MAX, ""));
  }
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) strict_numbers(*sub);
}

}  // namespace tally::cli
