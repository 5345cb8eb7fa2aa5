#pragma once
// A Jinja template as Hugging Face renders chat templates: jinja2 3.1 in an
// ImmutableSandboxedEnvironment with trim_blocks and lstrip_blocks, the
// loopcontrols extension, HF's tojson (json.dumps with ensure_ascii=False),
// raise_exception, strftime_now and namespace. The subset real chat
// templates use is supported (jinja/parser.h lists the grammar,
// jinja/builtins.h what can be called); anything else is refused when the
// template is parsed, naming line and column.
//
// A render is bounded (Limits): loop iterations, macro nesting and the size
// of the output and of every string built on the way; exceeding one is an
// error naming it, never a hang. Each output byte carries where it came
// from: the template, or the input variables (the conversation).
//
// Immutable after parse(); render() may run on several threads at once.
#include <ctime>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "jinja/interpreter.h"

namespace tally::jinja {

// A variable the template sees. Strings of an `input` variable count as
// input text in the output; others (bos_token, flags) as the template's own.
struct Variable {
  std::string name;
  nlohmann::ordered_json value;
  bool input = false;
};

// A run of output bytes of one provenance.
struct Segment {
  std::string text;
  bool from_input = false;
};

struct RenderOptions {
  Limits limits;
  std::optional<std::time_t> now;  // strftime_now's clock; the current time if unset
};

class Template {
 public:
  // Throws tally::Error "ORIGIN: line L, column C: what is wrong".
  static Template parse(std::string_view source, std::string origin);

  // Throws tally::Error "ORIGIN: line L, column C: what went wrong" (a limit,
  // a type error, an undefined value used); a raise_exception() of the
  // template throws TemplateError with the template's message.
  std::vector<Segment> render(const std::vector<Variable>& vars, const RenderOptions& o = {}) const;

  // Every literal the template writes (its text and string constants).
  std::vector<std::string> literals() const;

  const std::string& origin() const { return impl_->origin; }

 private:
  struct Impl {
    std::string origin;
    Body body;
  };
  std::shared_ptr<const Impl> impl_;
};

// raise_exception() was called: the template refuses its input.
class TemplateError : public Error {
 public:
  using Error::Error;
};

}  // namespace tally::jinja
