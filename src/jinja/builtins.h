#pragma once
// What templates can call: jinja2's filters and tests (with HF's tojson),
// Python's str/dict/list methods as the sandbox exposes them, the operators,
// and the globals HF provides (range, namespace, dict, raise_exception,
// strftime_now). Each behaves as under jinja2 3.1 in HF's
// ImmutableSandboxedEnvironment: methods that would modify a list or dict are
// refused, range() is capped at 100,000 items. Errors are raised as
// ValueError with Python's wording where it helps.
#include <memory>
#include <string>
#include <string_view>

#include "jinja/interpreter.h"
#include "jinja/value.h"

namespace tally::jinja {

bool has_filter(std::string_view name);
bool has_test(std::string_view name);

Value apply_filter(Interpreter& in, const std::string& name, const Value& v, CallArgs& args);
bool apply_test(Interpreter& in, const std::string& name, const Value& v, CallArgs& args);

// obj.name and obj[key] as jinja2's sandbox resolves them (methods first for
// attributes, items first for subscripts; a missing one is undefined).
Value get_attr(Interpreter& in, const Value& obj, const std::string& name);
Value get_item(Interpreter& in, const Value& obj, const Value& key);
Value get_slice(Interpreter& in, const Value& obj, const Value& start, const Value& stop, const Value& step);

// + - * / // % ** ~ on two values; unary minus and plus.
Value binary_op(Interpreter& in, const std::string& op, const Value& a, const Value& b);
Value negate(const Value& v, bool minus);
// The comparison operators and (not) in.
bool compare(const std::string& op, const Value& a, const Value& b);

// The items a for loop visits (a dict's keys, a string's characters); an
// undefined value gives none.
std::vector<Value> iterate(const Value& v);

[[noreturn]] void fail_undefined(const Value& v);

// The globals a template starts with.
void add_globals(Scope& scope);

}  // namespace tally::jinja
