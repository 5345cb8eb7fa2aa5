#pragma once
// The values a Jinja template computes with, behaving as their Python
// counterparts do under jinja2 (str(), repr(), ==, <, truth, json.dumps), so
// that a rendering equals Python's byte for byte.
//
// Every string carries its provenance: for each byte, whether it came from
// the render's input data (messages, tools) or from the template itself. The
// string operations keep it byte for byte (a slice of input text is input
// text; a template literal joined to it stays template text), so the caller
// can tell the markup a template writes from text a user sent.
//
// Values are immutable once built except a namespace's attributes; copies
// share their contents. A Value never outlives the render that made it.
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace tally::jinja {

// A string and, per byte, whether it came from the input data.
// Invariant: `input` is empty (no byte from input) or as long as `s`.
struct Text {
  std::string s;
  std::vector<uint8_t> input;

  Text() = default;
  explicit Text(std::string str, bool from_input = false);
  bool from_input(size_t i) const { return !input.empty() && input[i] != 0; }
  bool any_input() const;
  void append(const Text& t);
  void append(const Text& t, size_t pos, size_t n);
  void append(std::string_view str, bool from_input = false);
  Text substr(size_t pos, size_t n = std::string::npos) const;
};

class Value;
class Interpreter;
struct Array;
struct Object;
struct Function;
struct LoopState;

// Arguments of a call: positional, then keyword ones in the order written.
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

class Value {
 public:
  enum class Kind { Undefined, None, Bool, Int, Float, String, List, Dict, Namespace, Function, Loop };

  Value() = default;  // undefined
  static Value undefined(std::string hint = {});
  static Value none();
  static Value boolean(bool b);
  static Value integer(int64_t i);
  static Value number(double d);
  static Value string(Text t);
  static Value string(std::string s, bool from_input = false);
  static Value list(std::vector<Value> items, bool tuple = false);
  static Value dict(std::shared_ptr<Object> o);
  static Value name_space(std::shared_ptr<Object> o);
  static Value function(std::shared_ptr<const Function> f);
  static Value loop(std::shared_ptr<LoopState> l);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::Undefined; }
  bool is_none() const { return kind_ == Kind::None; }
  bool is_bool() const { return kind_ == Kind::Bool; }
  bool is_int() const { return kind_ == Kind::Int; }
  bool is_float() const { return kind_ == Kind::Float; }
  bool is_number() const { return kind_ == Kind::Int || kind_ == Kind::Float || kind_ == Kind::Bool; }
  bool is_string() const { return kind_ == Kind::String; }
  bool is_list() const { return kind_ == Kind::List; }
  bool is_dict() const { return kind_ == Kind::Dict; }

  bool as_bool() const { return b_; }
  int64_t as_int() const { return kind_ == Kind::Bool ? (b_ ? 1 : 0) : i_; }  // Int or Bool
  double as_double() const { return kind_ == Kind::Float ? d_ : static_cast<double>(as_int()); }
  const Text& text() const { return *str_; }
  const std::string& str() const { return str_->s; }
  const Array& array() const { return *list_; }
  const Object& object() const { return *obj_; }
  Object& mutable_object() const { return *obj_; }  // namespaces only
  const std::shared_ptr<Object>& object_ptr() const { return obj_; }
  const Function& fn() const { return *fn_; }
  const std::shared_ptr<const Function>& fn_ptr() const { return fn_; }
  LoopState& loop_state() const { return *loop_; }
  const std::string& undefined_hint() const { return hint_ ? *hint_ : empty_; }

  // Python's truth value (an undefined is false).
  bool truthy() const;
  // Python's type name, for error messages ("str", "int", "dict", ...).
  std::string type_name() const;

 private:
  Kind kind_ = Kind::Undefined;
  bool b_ = false;
  int64_t i_ = 0;
  double d_ = 0;
  std::shared_ptr<const Text> str_;
  std::shared_ptr<const Array> list_;
  std::shared_ptr<Object> obj_;
  std::shared_ptr<const Function> fn_;
  std::shared_ptr<LoopState> loop_;
  std::shared_ptr<const std::string> hint_;  // an undefined's error message
  static const std::string empty_;
};

struct Array {
  std::vector<Value> items;
  bool tuple = false;  // prints as (a, b) and never equals a list
};

// A dict in insertion order (Python 3.7+). Keys are strings, numbers, bools or
// none; numbers that compare equal (1, 1.0, True) are one key, as in Python.
struct Object {
  std::vector<std::pair<Value, Value>> entries;

  const Value* find(const Value& key) const;
  const Value* find(std::string_view key) const;
  void set(const Value& key, Value v);  // replaces in place or appends
  void clear() {
    entries.clear();
    string_index_.clear();
  }

 private:
  std::unordered_map<std::string, size_t> string_index_;
  size_t find_index(const Value& key) const;
};

// A callable: a built-in function, a bound method, a macro or `caller`.
struct Function {
  std::string name;
  std::function<Value(Interpreter&, CallArgs&)> call;
};

// The `loop` variable of a for loop.
struct LoopState {
  int64_t index0 = 0;
  int64_t length = 0;
  int64_t depth0 = 0;
  Value previtem, nextitem;  // undefined at the ends
  std::vector<Value> changed_last;
  bool changed_seen = false;
};

// Thrown for anything jinja2 would raise while rendering; the interpreter
// adds the template position.
struct ValueError {
  std::string message;
};
[[noreturn]] void raise(std::string message);

// Limits on what one value may cost, so hostile input fails instead of
// exhausting memory or the stack.
inline constexpr int kMaxDepth = 128;  // nesting of lists/dicts printed, compared or serialized

// From JSON: objects keep their key order; every string is marked as input
// when `from_input`. Integers beyond int64 become floats.
Value from_json(const nlohmann::ordered_json& j, bool from_input);

// Python's str() and repr(), appended to `out` with each byte's provenance.
void append_str(Text& out, const Value& v, size_t max_bytes);
void append_repr(Text& out, const Value& v, size_t max_bytes, int depth = 0);
Text to_str(const Value& v, size_t max_bytes);
// repr() of a float as Python writes it (shortest round-trip digits).
std::string float_repr(double d);

// json.dumps(v, ensure_ascii, indent, separators, sort_keys) as HF's tojson
// filter calls it. indent: nullptr for none. Raises for values JSON cannot hold.
struct JsonOptions {
  bool ensure_ascii = false;
  std::optional<std::string> indent;  // the indent unit; nullopt: one line
  std::string item_sep = ", ";
  std::string key_sep = ": ";
  bool sort_keys = false;
};
void append_json(Text& out, const Value& v, const JsonOptions& o, size_t max_bytes, int depth = 0);

// Python's ==, and <.
bool equals(const Value& a, const Value& b, int depth = 0);
bool less(const Value& a, const Value& b, int depth = 0);  // raises when the types do not order

// Code points of a string (Python's len); an ill-formed byte counts as one.
size_t char_count(std::string_view s);
// Byte offsets of each code point's start, plus s.size() at the end.
std::vector<size_t> char_offsets(std::string_view s);

}  // namespace tally::jinja
