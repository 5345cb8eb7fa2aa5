#include "jinja/builtins.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <climits>
#include <cmath>
#include <cstring>
#include <ctime>
#include <functional>
#include <optional>
#include <unordered_map>

#include "jinja/pystr.h"

namespace tally::jinja {
namespace {

// ---- helpers -------------------------------------------------------------------

// Binds a call's arguments to named parameters, as Python does.
std::vector<std::optional<Value>> bind(std::string_view fn, CallArgs& a, std::initializer_list<const char*> names) {
  std::vector<std::optional<Value>> out(names.size());
  const std::vector<const char*> n(names);
  if (a.positional.size() > n.size())
    raise(fmt::format("{}() takes at most {} argument(s) ({} given)", fn, n.size(), a.positional.size()));
  for (size_t i = 0; i < a.positional.size(); ++i) out[i] = a.positional[i];
  for (auto& [k, v] : a.keyword) {
    size_t j = 0;
    while (j < n.size() && k != n[j]) ++j;
    if (j == n.size()) raise(fmt::format("{}() got an unexpected keyword argument '{}'", fn, k));
    if (out[j]) raise(fmt::format("{}() got multiple values for argument '{}'", fn, k));
    out[j] = v;
  }
  return out;
}

const Value& arg_or(const std::optional<Value>& a, const Value& def) { return a ? *a : def; }

int64_t to_index(const Value& v, std::string_view what) {
  if (v.kind() == Value::Kind::Int || v.kind() == Value::Kind::Bool) return v.as_int();
  if (v.is_undefined()) fail_undefined(v);
  raise(fmt::format("{} must be an integer, not {}", what, v.type_name()));
}

const Text& need_string(const Value& v, std::string_view what) {
  if (!v.is_string()) {
    if (v.is_undefined()) fail_undefined(v);
    raise(fmt::format("{} must be a string, not {}", what, v.type_name()));
  }
  return v.text();
}

Value make_fn(std::string name, std::function<Value(Interpreter&, CallArgs&)> f) {
  auto fn = std::make_shared<Function>();
  fn->name = std::move(name);
  fn->call = std::move(f);
  return Value::function(std::move(fn));
}

Value unsafe(const std::string& attr, const Value& obj) {
  return Value::undefined(fmt::format("access to attribute '{}' of '{}' object is unsafe", attr, obj.type_name()));
}

Value no_attribute(const Value& obj, const std::string& name) {
  if (obj.is_none()) return Value::undefined(fmt::format("'None' has no attribute '{}'", name));
  return Value::undefined(fmt::format("'{} object' has no attribute '{}'", obj.type_name(), name));
}

// Python's str.upper/lower and friends, character by character (each output
// character keeps the provenance of the one it came from).
enum class Case { Upper, Lower, Keep };

template <typename F>
Text map_case(const Text& t, F choose) {
  Text out;
  bool prev_cased = false;
  for (size_t i = 0; i < t.s.size();) {
    size_t n = 0;
    const uint32_t cp = pystr::code_point_at(t.s, i, &n);
    const bool cased = pystr::is_lower_cp(cp) || pystr::is_upper_cp(cp);
    const Case c = choose(i, cp, prev_cased);
    if (c == Case::Keep || (n == 1 && cp >= 0x80)) {  // an ill-formed byte stays as it is
      out.append(t, i, n);
    } else {
      std::string piece;
      if (c == Case::Upper) {
        pystr::append_upper(piece, cp);
      } else {
        pystr::append_lower(piece, cp);
      }
      out.append(piece, t.from_input(i));
    }
    prev_cased = cased;
    i += n;
  }
  return out;
}

Text upper(const Text& t) {
  return map_case(t, [](size_t, uint32_t, bool) { return Case::Upper; });
}
Text lower(const Text& t) {
  return map_case(t, [](size_t, uint32_t, bool) { return Case::Lower; });
}
Text capitalize(const Text& t) {
  return map_case(t, [](size_t i, uint32_t, bool) { return i == 0 ? Case::Upper : Case::Lower; });
}
// Python's str.title(): a letter after a cased letter is lowered, others raised.
Text py_title(const Text& t) {
  return map_case(t, [](size_t, uint32_t, bool prev_cased) { return prev_cased ? Case::Lower : Case::Upper; });
}

// jinja2's title filter: each piece after [-\s({[<]+ starts upper, then lower.
Text jinja_title(const Text& t) {
  bool at_start = true;
  return map_case(t, [&at_start](size_t, uint32_t cp, bool) {
    if (cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<' || pystr::is_space(cp)) {
      at_start = true;
      return Case::Keep;
    }
    const Case c = at_start ? Case::Upper : Case::Lower;
    at_start = false;
    return c;
  });
}

bool py_islower(const std::string& s) {
  bool cased = false;
  for (size_t i = 0; i < s.size();) {
    size_t n = 0;
    const uint32_t cp = pystr::code_point_at(s, i, &n);
    if (pystr::is_upper_cp(cp)) return false;
    if (pystr::is_lower_cp(cp)) cased = true;
    i += n;
  }
  return cased;
}
bool py_isupper(const std::string& s) {
  bool cased = false;
  for (size_t i = 0; i < s.size();) {
    size_t n = 0;
    const uint32_t cp = pystr::code_point_at(s, i, &n);
    if (pystr::is_lower_cp(cp)) return false;
    if (pystr::is_upper_cp(cp)) cased = true;
    i += n;
  }
  return cased;
}

Text replace(Interpreter& in, const Text& s, const Text& old, const Text& repl, int64_t count) {
  Text out;
  if (old.s.empty()) {  // Python inserts the replacement around every character
    const std::vector<size_t> offs = char_offsets(s.s);
    int64_t done = 0;
    for (size_t i = 0; i + 1 < offs.size(); ++i) {
      if (count < 0 || done < count) {
        out.append(repl);
        ++done;
      }
      out.append(s, offs[i], offs[i + 1] - offs[i]);
      in.check_size(out.s.size());
    }
    if (count < 0 || done < count) out.append(repl);
    return out;
  }
  size_t pos = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    const size_t p = s.s.find(old.s, pos);
    if (p == std::string::npos) break;
    out.append(s, pos, p - pos);
    out.append(repl);
    in.check_size(out.s.size());
    pos = p + old.s.size();
    ++done;
  }
  out.append(s, pos, std::string::npos);
  return out;
}

// Python's int(str, base) for base 10 (whitespace, sign, underscores).
std::optional<int64_t> parse_int(std::string_view s, int base) {
  const size_t b = pystr::lstrip_pos(s, nullptr);
  s = s.substr(b, pystr::rstrip_pos(s, nullptr) - b);
  bool neg = false;
  if (!s.empty() && (s[0] == '+' || s[0] == '-')) {
    neg = s[0] == '-';
    s.remove_prefix(1);
  }
  if (base == 16 && s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) s.remove_prefix(2);
  if (s.empty() || s.front() == '_' || s.back() == '_') return std::nullopt;
  std::string digits;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '_') {
      if (s[i + 1] == '_') return std::nullopt;
      continue;
    }
    digits.push_back(s[i]);
  }
  int64_t v = 0;
  const auto r = std::from_chars(digits.data(), digits.data() + digits.size(), v, base);
  if (r.ec != std::errc() || r.ptr != digits.data() + digits.size()) return std::nullopt;
  return neg ? -v : v;
}

std::optional<double> parse_float(std::string_view s) {
  const size_t b = pystr::lstrip_pos(s, nullptr);
  s = s.substr(b, pystr::rstrip_pos(s, nullptr) - b);
  std::string t;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '_') {
      const bool ok = i > 0 && i + 1 < s.size() && std::isdigit(static_cast<unsigned char>(s[i - 1])) &&
                      std::isdigit(static_cast<unsigned char>(s[i + 1]));
      if (!ok) return std::nullopt;
      continue;
    }
    t.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(s[i]))));
  }
  std::string_view u = t;
  const bool neg = !u.empty() && u[0] == '-';
  if (!u.empty() && (u[0] == '-' || u[0] == '+')) u.remove_prefix(1);
  if (u == "inf" || u == "infinity") return neg ? -HUGE_VAL : HUGE_VAL;
  if (u == "nan") return std::nan("");
  if (u.empty() || u.find_first_not_of("0123456789.e+-") != std::string_view::npos) return std::nullopt;
  double d = 0;
  const auto r = std::from_chars(t.data(), t.data() + t.size(), d);
  if (r.ec == std::errc::result_out_of_range) return neg ? -HUGE_VAL : HUGE_VAL;
  if (r.ec != std::errc() || r.ptr != t.data() + t.size()) return std::nullopt;
  return d;
}

[[noreturn]] void overflow() { raise("integer overflow (the result does not fit in 64 bits)"); }
int64_t add_i(int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) overflow();
  return r;
}
int64_t sub_i(int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_sub_overflow(a, b, &r)) overflow();
  return r;
}
int64_t mul_i(int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) overflow();
  return r;
}

Value py_mod(const Value& a, const Value& b) {
  if (a.is_float() || b.is_float()) {
    const double x = a.as_double(), y = b.as_double();
    if (y == 0) raise("float modulo by zero");
    double m = std::fmod(x, y);
    if (m != 0 && ((m < 0) != (y < 0))) m += y;
    if (m == 0) m = std::copysign(0.0, y);
    return Value::number(m);
  }
  const int64_t x = a.as_int(), y = b.as_int();
  if (y == 0) raise("integer modulo by zero");
  if (y == -1) return Value::integer(0);
  int64_t m = x % y;
  if (m != 0 && ((m < 0) != (y < 0))) m += y;
  return Value::integer(m);
}

Value py_floordiv(const Value& a, const Value& b) {
  if (a.is_float() || b.is_float()) {
    const double y = b.as_double();
    if (y == 0) raise("float floor division by zero");
    return Value::number(std::floor(a.as_double() / y));
  }
  const int64_t x = a.as_int(), y = b.as_int();
  if (y == 0) raise("integer division or modulo by zero");
  if (x == INT64_MIN && y == -1) raise("integer overflow (the result does not fit in 64 bits)");
  int64_t q = x / y;
  if ((x % y != 0) && ((x < 0) != (y < 0))) --q;
  return Value::integer(q);
}

Value py_pow(const Value& a, const Value& b) {
  if (!a.is_float() && !b.is_float() && b.as_int() >= 0) {
    int64_t base = a.as_int(), e = b.as_int(), r = 1;
    while (e > 0) {
      if (e & 1) r = mul_i(r, base);
      e >>= 1;
      if (e > 0) base = mul_i(base, base);
    }
    return Value::integer(r);
  }
  const double x = a.as_double(), y = b.as_double();
  if (x == 0 && y < 0) raise("0.0 cannot be raised to a negative power");
  return Value::number(std::pow(x, y));
}

// printf-style formatting: str % args (jinja2's format filter too).
Text percent_format(Interpreter& in, const Text& f, const Value& args) {
  std::vector<Value> list;
  const Object* mapping = nullptr;
  if (args.is_list() && args.array().tuple) {
    list = args.array().items;
  } else if (args.is_dict()) {
    mapping = &args.object();
  } else {
    list.push_back(args);
  }
  size_t next = 0;
  Text out;
  const std::string& s = f.s;
  size_t i = 0;
  while (i < s.size()) {
    const size_t p = s.find('%', i);
    if (p == std::string::npos) {
      out.append(f, i, std::string::npos);
      break;
    }
    out.append(f, i, p - i);
    size_t j = p + 1;
    if (j >= s.size()) raise("incomplete format");
    const Value* arg = nullptr;
    if (s[j] == '(') {
      const size_t close = s.find(')', j);
      if (close == std::string::npos || mapping == nullptr) raise("format requires a mapping");
      arg = mapping->find(std::string_view(s).substr(j + 1, close - j - 1));
      if (arg == nullptr) raise(fmt::format("format key '{}' is missing", s.substr(j + 1, close - j - 1)));
      j = close + 1;
    }
    std::string spec = "{:";
    while (j < s.size() && std::strchr("-+ 0#", s[j])) {
      spec.push_back(s[j] == '-' ? '<' : s[j]);
      ++j;
    }
    while (j < s.size() && std::isdigit(static_cast<unsigned char>(s[j]))) spec.push_back(s[j++]);
    if (j < s.size() && s[j] == '.') {
      spec.push_back(s[j++]);
      while (j < s.size() && std::isdigit(static_cast<unsigned char>(s[j]))) spec.push_back(s[j++]);
    }
    if (j >= s.size()) raise("incomplete format");
    const char conv = s[j++];
    if (conv == '%') {
      out.append("%");
      i = j;
      continue;
    }
    if (arg == nullptr) {
      if (next >= list.size()) raise("not enough arguments for format string");
      arg = &list[next++];
    }
    try {
      switch (conv) {
        case 's':
        case 'r': {
          Text t;
          if (conv == 's') {
            append_str(t, *arg, in.max_bytes());
          } else {
            append_repr(t, *arg, in.max_bytes());
          }
          if (spec == "{:") {
            out.append(t);
          } else {
            out.append(fmt::format(fmt::runtime(spec + "}"), t.s), t.any_input());
          }
          break;
        }
        case 'd':
        case 'i': {
          if (!arg->is_number()) raise(fmt::format("%{} format: a real number is required, not {}", conv, arg->type_name()));
          const int64_t v = arg->is_float() ? static_cast<int64_t>(arg->as_double()) : arg->as_int();
          out.append(fmt::format(fmt::runtime(spec + "d}"), v));
          break;
        }
        case 'f':
        case 'F':
        case 'e':
        case 'E':
        case 'g':
        case 'G': {
          if (!arg->is_number()) raise(fmt::format("must be real number, not {}", arg->type_name()));
          if (spec.find('.') == std::string::npos && conv != 'g' && conv != 'G') spec += ".6";
          out.append(fmt::format(fmt::runtime(spec + conv + "}"), arg->as_double()));
          break;
        }
        case 'x':
        case 'X':
        case 'o': {
          if (!arg->is_int() && !arg->is_bool()) raise(fmt::format("%{} format: an integer is required", conv));
          out.append(fmt::format(fmt::runtime(spec + conv + "}"), arg->as_int()));
          break;
        }
        default: raise(fmt::format("unsupported format character '{}'", conv));
      }
    } catch (const fmt::format_error& e) {
      raise(fmt::format("bad format: {}", e.what()));
    }
    in.check_size(out.s.size());
    i = j;
  }
  if (mapping == nullptr && next < list.size()) raise("not all arguments converted during string formatting");
  return out;
}

// str.format with {} / {0} / {name} fields and !r / !s conversions.
Text brace_format(Interpreter& in, const Text& f, CallArgs& a) {
  Text out;
  const std::string& s = f.s;
  size_t auto_index = 0;
  for (size_t i = 0; i < s.size();) {
    const char c = s[i];
    if (c == '{' && i + 1 < s.size() && s[i + 1] == '{') {
      out.append(f, i, 1);
      i += 2;
      continue;
    }
    if (c == '}' && i + 1 < s.size() && s[i + 1] == '}') {
      out.append(f, i, 1);
      i += 2;
      continue;
    }
    if (c == '}') raise("single '}' encountered in format string");
    if (c != '{') {
      out.append(f, i, 1);
      ++i;
      continue;
    }
    const size_t close = s.find('}', i);
    if (close == std::string::npos) raise("single '{' encountered in format string");
    std::string field = s.substr(i + 1, close - i - 1);
    char conv = 0;
    if (const size_t colon = field.find(':'); colon != std::string::npos) {
      if (colon + 1 < field.size()) raise("format specifications in str.format are not supported");
      field.resize(colon);
    }
    if (const size_t bang = field.find('!'); bang != std::string::npos) {
      if (bang + 2 != field.size() || (field[bang + 1] != 'r' && field[bang + 1] != 's'))
        raise("unknown conversion in format string");
      conv = field[bang + 1];
      field.resize(bang);
    }
    const Value* v = nullptr;
    if (field.empty()) {
      if (auto_index >= a.positional.size()) raise(fmt::format("Replacement index {} out of range", auto_index));
      v = &a.positional[auto_index++];
    } else if (std::all_of(field.begin(), field.end(), [](char ch) { return std::isdigit(static_cast<unsigned char>(ch)); })) {
      const size_t k = std::stoul(field);
      if (k >= a.positional.size()) raise(fmt::format("Replacement index {} out of range", k));
      v = &a.positional[k];
    } else {
      for (auto& [k, val] : a.keyword)
        if (k == field) v = &val;
      if (v == nullptr) raise(fmt::format("KeyError: '{}'", field));
    }
    if (conv == 'r') {
      append_repr(out, *v, in.max_bytes());
    } else {
      append_str(out, *v, in.max_bytes());
    }
    in.check_size(out.s.size());
    i = close + 1;
  }
  return out;
}

// Attribute paths of map/selectattr/sort/...: "a.b.0" through getitem.
Value get_path(Interpreter& in, const Value& v, const std::string& path) {
  Value cur = v;
  size_t start = 0;
  while (true) {
    const size_t dot = path.find('.', start);
    const std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    const bool digits = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
    if (cur.is_undefined()) return cur;
    cur = get_item(in, cur, digits ? Value::integer(std::stoll(part)) : Value::string(part));
    if (dot == std::string::npos) return cur;
    start = dot + 1;
  }
}

Value lower_if_string(const Value& v, bool case_sensitive) {
  if (case_sensitive || !v.is_string()) return v;
  return Value::string(lower(v.text()));
}

// ---- methods -------------------------------------------------------------------------

Value string_method(Interpreter& in, const Value& self, const std::string& name) {
  const std::string fn_name = "str." + name;
  auto method = [&](std::function<Value(Interpreter&, const Text&, CallArgs&)> f) {
    return make_fn(fn_name, [self, f](Interpreter& i, CallArgs& a) { return f(i, self.text(), a); });
  };
  (void)in;
  if (name == "upper" || name == "lower" || name == "title" || name == "capitalize" || name == "strip" ||
      name == "lstrip" || name == "rstrip") {
    return method([name, fn_name](Interpreter&, const Text& t, CallArgs& a) {
      if (name == "upper" || name == "lower" || name == "title" || name == "capitalize") {
        bind(fn_name, a, {});
        if (name == "upper") return Value::string(upper(t));
        if (name == "lower") return Value::string(lower(t));
        if (name == "title") return Value::string(py_title(t));
        return Value::string(capitalize(t));
      }
      const auto p = bind(fn_name, a, {"chars"});
      std::string chars_storage;
      const std::string_view* chars = nullptr;
      std::string_view cv;
      if (p[0] && !p[0]->is_none()) {
        cv = need_string(*p[0], "chars").s;
        chars = &cv;
      }
      const size_t b = name == "rstrip" ? 0 : pystr::lstrip_pos(t.s, chars);
      size_t e = name == "lstrip" ? t.s.size() : pystr::rstrip_pos(t.s, chars);
      if (e < b) e = b;
      return Value::string(t.substr(b, e - b));
    });
  }
  if (name == "startswith" || name == "endswith") {
    return method([name, fn_name](Interpreter&, const Text& t, CallArgs& a) {
      const auto p = bind(fn_name, a, {"prefix", "start", "end"});
      if (!p[0]) raise(fmt::format("{}() takes at least 1 argument (0 given)", fn_name));
      if (p[1] || p[2]) raise(fmt::format("{}() with start or end is not supported", fn_name));
      std::vector<Value> options;
      if (p[0]->is_list() && p[0]->array().tuple) {
        options = p[0]->array().items;
      } else if (p[0]->is_string()) {
        options.push_back(*p[0]);
      } else {
        raise(fmt::format("{} first arg must be str or a tuple of str, not {}", fn_name, p[0]->type_name()));
      }
      for (const Value& o : options) {
        const std::string& x = need_string(o, "prefix").s;
        const bool hit = name == "startswith" ? t.s.compare(0, x.size(), x) == 0
                                              : t.s.size() >= x.size() && t.s.compare(t.s.size() - x.size(), x.size(), x) == 0;
        if (hit) return Value::boolean(true);
      }
      return Value::boolean(false);
    });
  }
  if (name == "split" || name == "rsplit") {
    return method([name, fn_name](Interpreter&, const Text& t, CallArgs& a) {
      const auto p = bind(fn_name, a, {"sep", "maxsplit"});
      const int64_t maxsplit = p[1] ? to_index(*p[1], "maxsplit") : -1;
      std::string_view sv;
      const std::string_view* sep = nullptr;
      if (p[0] && !p[0]->is_none()) {
        sv = need_string(*p[0], "sep").s;
        if (sv.empty()) raise("empty separator");
        sep = &sv;
      }
      const auto ranges = name == "split" ? pystr::split(t.s, sep, maxsplit) : pystr::rsplit(t.s, sep, maxsplit);
      std::vector<Value> items;
      for (const auto& [b, e] : ranges) items.push_back(Value::string(t.substr(b, e - b)));
      return Value::list(std::move(items));
    });
  }
  if (name == "splitlines") {
    return method([fn_name](Interpreter&, const Text& t, CallArgs& a) {
      bind(fn_name, a, {});
      std::vector<Value> items;
      for (const auto& [b, e] : pystr::splitlines(t.s)) items.push_back(Value::string(t.substr(b, e - b)));
      return Value::list(std::move(items));
    });
  }
  if (name == "replace") {
    return method([fn_name](Interpreter& i, const Text& t, CallArgs& a) {
      const auto p = bind(fn_name, a, {"old", "new", "count"});
      if (!p[0] || !p[1]) raise("replace() takes at least 2 arguments");
      const int64_t count = p[2] ? to_index(*p[2], "count") : -1;
      return Value::string(replace(i, t, need_string(*p[0], "old"), need_string(*p[1], "new"), count));
    });
  }
  if (name == "find" || name == "rfind" || name == "count" || name == "index" || name == "rindex") {
    return method([name, fn_name](Interpreter&, const Text& t, CallArgs& a) {
      const auto p = bind(fn_name, a, {"sub"});
      if (!p[0]) raise(fmt::format("{}() takes exactly one argument", fn_name));
      const std::string& sub = need_string(*p[0], "sub").s;
      if (name == "count") {
        if (sub.empty()) return Value::integer(static_cast<int64_t>(char_count(t.s) + 1));
        int64_t n = 0;
        for (size_t pos = t.s.find(sub); pos != std::string::npos; pos = t.s.find(sub, pos + sub.size())) ++n;
        return Value::integer(n);
      }
      const size_t pos = name == "find" || name == "index" ? t.s.find(sub) : t.s.rfind(sub);
      if (pos == std::string::npos) {
        if (name == "index" || name == "rindex") raise("substring not found");
        return Value::integer(-1);
      }
      return Value::integer(static_cast<int64_t>(char_count(std::string_view(t.s).substr(0, pos))));
    });
  }
  if (name == "join") {
    return method([fn_name](Interpreter& i, const Text& t, CallArgs& a) {
      const auto p = bind(fn_name, a, {"iterable"});
      if (!p[0]) raise("join() takes exactly one argument");
      Text out;
      bool first = true;
      for (const Value& v : iterate(*p[0])) {
        if (!first) out.append(t);
        first = false;
        out.append(need_string(v, "sequence item"));
        i.check_size(out.s.size());
      }
      return Value::string(std::move(out));
    });
  }
  if (name == "format") {
    return method([](Interpreter& i, const Text& t, CallArgs& a) { return Value::string(brace_format(i, t, a)); });
  }
  if (name == "isdigit" || name == "isalpha" || name == "isalnum" || name == "isspace" || name == "islower" ||
      name == "isupper") {
    return method([name, fn_name](Interpreter&, const Text& t, CallArgs& a) {
      bind(fn_name, a, {});
      const std::string& s = t.s;
      if (name == "islower") return Value::boolean(py_islower(s));
      if (name == "isupper") return Value::boolean(py_isupper(s));
      if (s.empty()) return Value::boolean(false);
      for (size_t i = 0; i < s.size();) {
        size_t n = 0;
        const uint32_t cp = pystr::code_point_at(s, i, &n);
        bool ok = false;
        if (name == "isspace") ok = pystr::is_space(cp);
        else if (cp >= 0x80) ok = name != "isdigit";  // letters beyond ASCII count as alphabetic
        else if (name == "isdigit") ok = std::isdigit(static_cast<int>(cp)) != 0;
        else if (name == "isalpha") ok = std::isalpha(static_cast<int>(cp)) != 0;
        else ok = std::isalnum(static_cast<int>(cp)) != 0;
        if (!ok) return Value::boolean(false);
        i += n;
      }
      return Value::boolean(true);
    });
  }
  return no_attribute(self, name);
}

Value dict_method(const Value& self, const std::string& name) {
  if (name == "get") {
    return make_fn("dict.get", [self](Interpreter&, CallArgs& a) {
      const auto p = bind("get", a, {"key", "default"});
      if (!p[0]) raise("get expected at least 1 argument, got 0");
      const Value* v = nullptr;
      try {
        v = self.object().find(*p[0]);
      } catch (const ValueError&) {
        raise(fmt::format("unhashable type: '{}'", p[0]->type_name()));
      }
      return v ? *v : arg_or(p[1], Value::none());
    });
  }
  if (name == "items" || name == "keys" || name == "values") {
    return make_fn("dict." + name, [self, name](Interpreter&, CallArgs& a) {
      bind(name, a, {});
      std::vector<Value> out;
      for (const auto& [k, v] : self.object().entries) {
        if (name == "items") out.push_back(Value::list({k, v}, true));
        else out.push_back(name == "keys" ? k : v);
      }
      return Value::list(std::move(out));
    });
  }
  if (name == "copy") {
    return make_fn("dict.copy", [self](Interpreter&, CallArgs& a) {
      bind("copy", a, {});
      return Value::dict(std::make_shared<Object>(self.object()));
    });
  }
  if (name == "pop" || name == "popitem" || name == "update" || name == "clear" || name == "setdefault")
    return unsafe(name, self);
  return Value();
}

Value list_method(const Value& self, const std::string& name) {
  if (name == "index" || name == "count") {
    return make_fn("list." + name, [self, name](Interpreter&, CallArgs& a) {
      const auto p = bind(name, a, {"value"});
      if (!p[0]) raise(fmt::format("{}() takes exactly one argument", name));
      int64_t n = 0;
      const auto& items = self.array().items;
      for (size_t i = 0; i < items.size(); ++i) {
        if (!equals(items[i], *p[0])) continue;
        if (name == "index") return Value::integer(static_cast<int64_t>(i));
        ++n;
      }
      if (name == "index") raise("value is not in list");
      return Value::integer(n);
    });
  }
  if (name == "append" || name == "extend" || name == "insert" || name == "pop" || name == "remove" ||
      name == "reverse" || name == "sort" || name == "clear")
    return unsafe(name, self);
  return Value();
}

Value loop_attr(const Value& self, const std::string& name) {
  const LoopState& l = self.loop_state();
  if (name == "index") return Value::integer(l.index0 + 1);
  if (name == "index0") return Value::integer(l.index0);
  if (name == "revindex") return Value::integer(l.length - l.index0);
  if (name == "revindex0") return Value::integer(l.length - l.index0 - 1);
  if (name == "first") return Value::boolean(l.index0 == 0);
  if (name == "last") return Value::boolean(l.index0 + 1 == l.length);
  if (name == "length") return Value::integer(l.length);
  if (name == "depth") return Value::integer(l.depth0 + 1);
  if (name == "depth0") return Value::integer(l.depth0);
  if (name == "previtem") return l.previtem;
  if (name == "nextitem") return l.nextitem;
  if (name == "cycle") {
    return make_fn("loop.cycle", [self](Interpreter&, CallArgs& a) {
      if (a.positional.empty()) raise("no items for cycling given");
      const auto n = static_cast<int64_t>(a.positional.size());
      return a.positional[static_cast<size_t>(self.loop_state().index0 % n)];
    });
  }
  if (name == "changed") {
    return make_fn("loop.changed", [self](Interpreter&, CallArgs& a) {
      LoopState& st = self.loop_state();
      bool same = st.changed_seen && st.changed_last.size() == a.positional.size();
      for (size_t i = 0; same && i < a.positional.size(); ++i) same = equals(st.changed_last[i], a.positional[i]);
      st.changed_seen = true;
      st.changed_last = a.positional;
      return Value::boolean(!same);
    });
  }
  return Value::undefined(fmt::format("'LoopContext object' has no attribute '{}'", name));
}

// ---- filters ---------------------------------------------------------------------------

using FilterFn = Value (*)(Interpreter&, const Value&, CallArgs&);

Value f_tojson(Interpreter& in, const Value& v, CallArgs& a) {
  const auto p = bind("tojson", a, {"ensure_ascii", "indent", "separators", "sort_keys"});
  JsonOptions o;
  o.ensure_ascii = p[0] && p[0]->truthy();
  if (p[1] && !p[1]->is_none()) {
    if (p[1]->is_string()) {
      o.indent = p[1]->str();
    } else {
      const int64_t n = to_index(*p[1], "indent");
      o.indent = std::string(static_cast<size_t>(std::clamp<int64_t>(n, 0, 1024)), ' ');
    }
    o.item_sep.assign(1, ',');
  }
  if (p[2] && !p[2]->is_none()) {
    if (!p[2]->is_list() || p[2]->array().items.size() != 2) raise("separators must be a pair of strings");
    o.item_sep = need_string(p[2]->array().items[0], "separator").s;
    o.key_sep = need_string(p[2]->array().items[1], "separator").s;
  }
  o.sort_keys = p[3] && p[3]->truthy();
  Text out;
  append_json(out, v, o, in.max_bytes());
  return Value::string(std::move(out));
}

Value f_trim(Interpreter& in, const Value& v, CallArgs& a) {
  const auto p = bind("trim", a, {"chars"});
  const Text t = to_str(v, in.max_bytes());
  std::string_view cv;
  const std::string_view* chars = nullptr;
  if (p[0] && !p[0]->is_none()) {
    cv = need_string(*p[0], "chars").s;
    chars = &cv;
  }
  const size_t b = pystr::lstrip_pos(t.s, chars);
  const size_t e = std::max(b, pystr::rstrip_pos(t.s, chars));
  return Value::string(t.substr(b, e - b));
}

int64_t length_of(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined: return 0;
    case Value::Kind::String: return static_cast<int64_t>(char_count(v.str()));
    case Value::Kind::List: return static_cast<int64_t>(v.array().items.size());
    case Value::Kind::Dict: return static_cast<int64_t>(v.object().entries.size());
    case Value::Kind::Loop: return v.loop_state().length;
    default: raise(fmt::format("object of type '{}' has no len()", v.type_name()));
  }
}

Value f_length(Interpreter&, const Value& v, CallArgs& a) {
  bind("length", a, {});
  return Value::integer(length_of(v));
}

Value f_upper(Interpreter& in, const Value& v, CallArgs& a) {
  bind("upper", a, {});
  return Value::string(upper(to_str(v, in.max_bytes())));
}
Value f_lower(Interpreter& in, const Value& v, CallArgs& a) {
  bind("lower", a, {});
  return Value::string(lower(to_str(v, in.max_bytes())));
}
Value f_title(Interpreter& in, const Value& v, CallArgs& a) {
  bind("title", a, {});
  return Value::string(jinja_title(to_str(v, in.max_bytes())));
}
Value f_capitalize(Interpreter& in, const Value& v, CallArgs& a) {
  bind("capitalize", a, {});
  return Value::string(capitalize(to_str(v, in.max_bytes())));
}

Value f_default(Interpreter&, const Value& v, CallArgs& a) {
  const auto p = bind("default", a, {"default_value", "boolean"});
  const bool boolean = p[1] && p[1]->truthy();
  if (v.is_undefined() || (boolean && !v.truthy())) return arg_or(p[0], Value::string(""));
  return v;
}

Value f_join(Interpreter& in, const Value& v, CallArgs& a) {
  const auto p = bind("join", a, {"d", "attribute"});
  const Text sep = p[0] ? to_str(*p[0], in.max_bytes()) : Text();
  Text out;
  bool first = true;
  for (const Value& item : iterate(v)) {
    if (!first) out.append(sep);
    first = false;
    append_str(out, p[1] && !p[1]->is_none() ? get_path(in, item, to_str(*p[1], in.max_bytes()).s) : item,
               in.max_bytes());
    in.check_size(out.s.size());
  }
  return Value::string(std::move(out));
}

Value f_items(Interpreter&, const Value& v, CallArgs& a) {
  bind("items", a, {});
  if (v.is_undefined()) return Value::list({});
  if (!v.is_dict()) raise("can only get item pairs from a mapping");
  std::vector<Value> out;
  for (const auto& [k, e] : v.object().entries) out.push_back(Value::list({k, e}, true));
  return Value::list(std::move(out));
}

Value f_list(Interpreter&, const Value& v, CallArgs& a) {
  bind("list", a, {});
  return Value::list(iterate(v));
}

Value f_first(Interpreter&, const Value& v, CallArgs& a) {
  bind("first", a, {});
  if (v.is_list()) {
    const auto& items = v.array().items;
    return items.empty() ? Value::undefined("no first item, the sequence is empty") : items.front();
  }
  std::vector<Value> items = iterate(v);
  return items.empty() ? Value::undefined("no first item, the sequence is empty") : items.front();
}

Value f_last(Interpreter&, const Value& v, CallArgs& a) {
  bind("last", a, {});
  if (v.is_list()) {
    const auto& items = v.array().items;
    return items.empty() ? Value::undefined("no last item, the sequence is empty") : items.back();
  }
  std::vector<Value> items = iterate(v);
  return items.empty() ? Value::undefined("no last item, the sequence is empty") : items.back();
}

Value f_replace(Interpreter& in, const Value& v, CallArgs& a) {
  const auto p = bind("replace", a, {"old", "new", "count"});
  if (!p[0] || !p[1]) raise("replace() needs 'old' and 'new'");
  const int64_t count = p[2] && !p[2]->is_none() ? to_index(*p[2], "count") : -1;
  return Value::string(replace(in, to_str(v, in.max_bytes()), to_str(*p[0], in.max_bytes()),
                               to_str(*p[1], in.max_bytes()), count));
}

Value f_string(Interpreter& in, const Value& v, CallArgs& a) {
  bind("string", a, {});
  return Value::string(to_str(v, in.max_bytes()));
}

Value f_safe(Interpreter&, const Value& v, CallArgs& a) {
  bind("safe", a, {});
  return v;
}

Value f_escape(Interpreter& in, const Value& v, CallArgs& a) {
  bind("escape", a, {});
  const Text t = to_str(v, in.max_bytes());
  Text out;
  for (size_t i = 0; i < t.s.size(); ++i) {
    const char c = t.s[i];
    const char* rep = c == '&' ? "&amp;" : c == '<' ? "&lt;" : c == '>' ? "&gt;" : c == '"' ? "&#34;" : c == '\'' ? "&#39;" : nullptr;
    if (rep) {
      out.append(rep, t.from_input(i));
    } else {
      out.append(t, i, 1);
    }
  }
  return Value::string(std::move(out));
}

Value to_int(const Value& v, const Value& def, int base) {
  if (v.is_int() || v.is_bool()) return Value::integer(v.as_int());
  if (v.is_float()) {
    const double d = v.as_double();
    if (!std::isfinite(d) || std::fabs(d) >= 9.2e18) return def;
    return Value::integer(static_cast<int64_t>(d));
  }
  if (v.is_string()) {
    if (auto i = parse_int(v.str(), base)) return Value::integer(*i);
    if (auto d = parse_float(v.str())) return to_int(Value::number(*d), def, base);
  }
  return def;
}

Value f_int(Interpreter&, const Value& v, CallArgs& a) {
  const auto p = bind("int", a, {"default", "base"});
  const int64_t base = p[1] ? to_index(*p[1], "base") : 10;
  if (base != 2 && base != 8 && base != 10 && base != 16) raise("int(): base must be 2, 8, 10 or 16");
  return to_int(v, arg_or(p[0], Value::integer(0)), static_cast<int>(base));
}

Value f_float(Interpreter&, const Value& v, CallArgs& a) {
  const auto p = bind("float", a, {"default"});
  const Value def = arg_or(p[0], Value::number(0.0));
  if (v.is_number()) return Value::number(v.as_double());
  if (v.is_string())
    if (auto d = parse_float(v.str())) return Value::number(*d);
  return def;
}

Value f_abs(Interpreter&, const Value& v, CallArgs& a) {
  bind("abs", a, {});
  if (v.is_float()) return Value::number(std::fabs(v.as_double()));
  if (v.is_int() || v.is_bool()) {
    if (v.as_int() == INT64_MIN) raise("integer overflow (the result does not fit in 64 bits)");
    return Value::integer(std::abs(v.as_int()));
  }
  raise(fmt::format("bad operand type for abs(): '{}'", v.type_name()));
}

Value f_round(Interpreter&, const Value& v, CallArgs& a) {
  const auto p = bind("round", a, {"precision", "method"});
  const int64_t prec = p[0] ? to_index(*p[0], "precision") : 0;
  const std::string method = p[1] ? need_string(*p[1], "method").s : "common";
  if (!v.is_number()) raise(fmt::format("type {} doesn't define __round__ method", v.type_name()));
  if (method != "common" && method != "ceil" && method != "floor") raise("method must be 'common', 'ceil' or 'floor'");
  if (v.is_int() || v.is_bool()) {
    if (method == "common") return Value::integer(v.as_int());
  }
  const double scale = std::pow(10.0, static_cast<double>(std::clamp<int64_t>(prec, -300, 300)));
  const double x = v.as_double() * scale;
  const double r = method == "ceil" ? std::ceil(x) : method == "floor" ? std::floor(x) : std::nearbyint(x);
  return Value::number(r / scale);
}

Value f_reverse(Interpreter&, const Value& v, CallArgs& a) {
  bind("reverse", a, {});
  if (v.is_string()) {
    const Text& t = v.text();
    const std::vector<size_t> offs = char_offsets(t.s);
    Text out;
    for (size_t i = offs.size() - 1; i > 0; --i) out.append(t, offs[i - 1], offs[i] - offs[i - 1]);
    return Value::string(std::move(out));
  }
  std::vector<Value> items = iterate(v);
  std::reverse(items.begin(), items.end());
  return Value::list(std::move(items));
}

Value f_unique(Interpreter& in, const Value& v, CallArgs& a) {
  const auto p = bind("unique", a, {"case_sensitive", "attribute"});
  const bool cs = p[0] && p[0]->truthy();
  std::vector<Value> out, keys;
  for (const Value& item : iterate(v)) {
    const Value key = lower_if_string(p[1] && !p[1]->is_none() ? get_path(in, item, to_str(*p[1], in.max_bytes()).s) : item, cs);
    bool seen = false;
    for (const Value& k : keys) seen = seen || equals(k, key);
    if (seen) continue;
    keys.push_back(key);
    out.push_back(item);
    in.count_iterations();
  }
  return Value::list(std::move(out));
}

Value f_sort(Interpreter& in, const Value& v, CallArgs& a) {
  const auto p = bind("sort", a, {"reverse", "case_sensitive", "attribute"});
  const bool rev = p[0] && p[0]->truthy(), cs = p[1] && p[1]->truthy();
  std::vector<Value> items = iterate(v);
  std::vector<std::pair<Value, size_t>> keyed;
  for (size_t i = 0; i < items.size(); ++i) {
    const Value k = p[2] && !p[2]->is_none() ? get_path(in, items[i], to_str(*p[2], in.max_bytes()).s) : items[i];
    keyed.emplace_back(lower_if_string(k, cs), i);
  }
  in.count_iterations(static_cast<int64_t>(items.size()));
  std::stable_sort(keyed.begin(), keyed.end(), [rev](const auto& x, const auto& y) {
    return rev ? less(y.first, x.first) : less(x.first, y.first);
  });
  std::vector<Value> out;
  for (const auto& [k, i] : keyed) out.push_back(items[i]);
  return Value::list(std::move(out));
}

Value min_max(Interpreter& in, const Value& v, CallArgs& a, bool want_max) {
  const auto p = bind(want_max ? "max" : "min", a, {"case_sensitive", "attribute"});
  const bool cs = p[0] && p[0]->truthy();
  const std::vector<Value> items = iterate(v);
  if (items.empty()) return Value::undefined(fmt::format("no aggregated item, the sequence is empty"));
  size_t best = 0;
  Value best_key;
  for (size_t i = 0; i < items.size(); ++i) {
    const Value k = lower_if_string(p[1] && !p[1]->is_none() ? get_path(in, items[i], to_str(*p[1], in.max_bytes()).s) : items[i], cs);
    if (i == 0 || (want_max ? less(best_key, k) : less(k, best_key))) {
      best = i;
      best_key = k;
    }
  }
  return items[best];
}
Value f_min(Interpreter& in, const Value& v, CallArgs& a) { return min_max(in, v, a, false); }
Value f_max(Interpreter& in, const Value& v, CallArgs& a) { return min_max(in, v, a, true); }

Value f_sum(Interpreter& in, const Value& v, CallArgs& a) {
  const auto p = bind("sum", a, {"attribute", "start"});
  Value total = arg_or(p[1], Value::integer(0));
  for (const Value& item : iterate(v))
    total = binary_op(in, "+", total, p[0] && !p[0]->is_none() ? get_path(in, item, to_str(*p[0], in.max_bytes()).s) : item);
  return total;
}

Value f_format(Interpreter& in, const Value& v, CallArgs& a) {
  if (!a.positional.empty() && !a.keyword.empty()) raise("can't handle positional and keyword arguments at the same time");
  Value args;
  if (!a.keyword.empty()) {
    auto o = std::make_shared<Object>();
    for (auto& [k, e] : a.keyword) o->set(Value::string(k), e);
    args = Value::dict(std::move(o));
  } else {
    args = Value::list(a.positional, true);
  }
  return Value::string(percent_format(in, to_str(v, in.max_bytes()), args));
}

Value f_indent(Interpreter& in, const Value& v, CallArgs& a) {
  const auto p = bind("indent", a, {"width", "first", "blank"});
  Text ind;
  if (p[0] && p[0]->is_string()) {
    ind = p[0]->text();
  } else {
    ind = Text(std::string(static_cast<size_t>(std::clamp<int64_t>(p[0] ? to_index(*p[0], "width") : 4, 0, 1024)), ' '));
  }
  const bool first = p[1] && p[1]->truthy(), blank = p[2] && p[2]->truthy();
  Text s = to_str(v, in.max_bytes());
  s.append("\n");
  const auto lines = pystr::splitlines(s.s);
  Text out;
  for (size_t i = 0; i < lines.size(); ++i) {
    const auto [b, e] = lines[i];
    if (i > 0) {
      out.append("\n");
      if (blank || e > b) out.append(ind);
    }
    out.append(s, b, e - b);
    in.check_size(out.s.size());
  }
  if (first) {
    Text r = ind;
    r.append(out);
    return Value::string(std::move(r));
  }
  return Value::string(std::move(out));
}

Value f_attr(Interpreter& in, const Value& v, CallArgs& a) {
  const auto p = bind("attr", a, {"name"});
  if (!p[0]) raise("attr() needs a name");
  // Python's getattr only: a dict's keys are not attributes.
  const std::string& name = need_string(*p[0], "name").s;
  if (v.is_dict()) {
    Value m = dict_method(v, name);
    return m.is_undefined() && m.undefined_hint().empty() ? no_attribute(v, name) : m;
  }
  return get_attr(in, v, name);
}

Value f_wordcount(Interpreter& in, const Value& v, CallArgs& a) {
  bind("wordcount", a, {});
  const Text t = to_str(v, in.max_bytes());
  int64_t n = 0;
  bool in_word = false;
  for (char c : t.s) {
    const bool w = std::isalnum(static_cast<unsigned char>(c)) || c == '_' || static_cast<unsigned char>(c) >= 0x80;
    if (w && !in_word) ++n;
    in_word = w;
  }
  return Value::integer(n);
}

// select / reject / selectattr / rejectattr: keep the items whose test (or truth) holds.
Value select_items(Interpreter& in, const Value& v, CallArgs& a, bool by_attr, bool keep_if) {
  std::vector<Value> args = a.positional;
  std::string attr;
  if (by_attr) {
    if (args.empty()) raise("selectattr/rejectattr need an attribute");
    attr = need_string(args[0], "attribute").s;
    args.erase(args.begin());
  }
  std::string test;
  if (!args.empty()) {
    test = need_string(args[0], "test name").s;
    args.erase(args.begin());
    if (!has_test(test)) raise(fmt::format("no test named '{}'", test));
  }
  std::vector<Value> out;
  for (const Value& item : iterate(v)) {
    in.count_iterations();
    const Value x = by_attr ? get_path(in, item, attr) : item;
    bool ok = false;
    if (test.empty()) {
      ok = x.truthy();
    } else {
      CallArgs ta;
      ta.positional = args;
      ta.keyword = a.keyword;
      ok = apply_test(in, test, x, ta);
    }
    if (ok == keep_if) out.push_back(item);
  }
  return Value::list(std::move(out));
}
Value f_select(Interpreter& in, const Value& v, CallArgs& a) { return select_items(in, v, a, false, true); }
Value f_reject(Interpreter& in, const Value& v, CallArgs& a) { return select_items(in, v, a, false, false); }
Value f_selectattr(Interpreter& in, const Value& v, CallArgs& a) { return select_items(in, v, a, true, true); }
Value f_rejectattr(Interpreter& in, const Value& v, CallArgs& a) { return select_items(in, v, a, true, false); }

Value f_map(Interpreter& in, const Value& v, CallArgs& a) {
  std::vector<Value> out;
  const Value* attribute = nullptr;
  const Value* def = nullptr;
  for (auto& [k, e] : a.keyword) {
    if (k == "attribute") attribute = &e;
    else if (k == "default") def = &e;
  }
  if (attribute != nullptr && a.positional.empty()) {
    const std::string path = to_str(*attribute, in.max_bytes()).s;
    for (const Value& item : iterate(v)) {
      in.count_iterations();
      Value x = get_path(in, item, path);
      if (x.is_undefined() && def != nullptr) x = *def;
      out.push_back(std::move(x));
    }
    return Value::list(std::move(out));
  }
  if (a.positional.empty()) raise("map() needs a filter name or attribute=");
  const std::string filter = need_string(a.positional[0], "filter name").s;
  if (!has_filter(filter)) raise(fmt::format("no filter named '{}'", filter));
  for (const Value& item : iterate(v)) {
    in.count_iterations();
    CallArgs fa;
    fa.positional.assign(a.positional.begin() + 1, a.positional.end());
    fa.keyword = a.keyword;
    out.push_back(apply_filter(in, filter, item, fa));
  }
  return Value::list(std::move(out));
}

const std::unordered_map<std::string_view, FilterFn>& filters() {
  static const std::unordered_map<std::string_view, FilterFn> m = {
      {"abs", f_abs},         {"attr", f_attr},         {"capitalize", f_capitalize}, {"count", f_length},
      {"d", f_default},       {"default", f_default},   {"e", f_escape},              {"escape", f_escape},
      {"first", f_first},     {"float", f_float},       {"format", f_format},         {"indent", f_indent},
      {"int", f_int},         {"items", f_items},       {"join", f_join},             {"last", f_last},
      {"length", f_length},   {"list", f_list},         {"lower", f_lower},           {"map", f_map},
      {"max", f_max},         {"min", f_min},           {"reject", f_reject},         {"rejectattr", f_rejectattr},
      {"replace", f_replace}, {"reverse", f_reverse},   {"round", f_round},           {"safe", f_safe},
      {"select", f_select},   {"selectattr", f_selectattr}, {"sort", f_sort},         {"string", f_string},
      {"sum", f_sum},         {"title", f_title},       {"tojson", f_tojson},         {"trim", f_trim},
      {"unique", f_unique},   {"upper", f_upper},       {"wordcount", f_wordcount},
  };
  return m;
}

// ---- tests ------------------------------------------------------------------------------

bool is_iterable(const Value& v) {
  return v.is_undefined() || v.is_string() || v.is_list() || v.is_dict() || v.kind() == Value::Kind::Loop;
}

bool run_test(Interpreter& in, const std::string& name, const Value& v, CallArgs& a) {
  auto one = [&](const char* what) -> const Value& {
    if (a.positional.size() + a.keyword.size() != 1) raise(fmt::format("test '{}' takes one argument", name));
    (void)what;
    return a.positional.empty() ? a.keyword[0].second : a.positional[0];
  };
  auto none = [&] {
    if (!a.positional.empty() || !a.keyword.empty()) raise(fmt::format("test '{}' takes no arguments", name));
  };
  if (name == "defined") return none(), !v.is_undefined();
  if (name == "undefined") return none(), v.is_undefined();
  if (name == "none") return none(), v.is_none();
  if (name == "boolean") return none(), v.is_bool();
  if (name == "true") return none(), v.is_bool() && v.as_bool();
  if (name == "false") return none(), v.is_bool() && !v.as_bool();
  if (name == "integer") return none(), v.is_int();
  if (name == "float") return none(), v.is_float();
  if (name == "number") return none(), v.is_number();
  if (name == "string") return none(), v.is_string();
  if (name == "mapping") return none(), v.is_dict();
  if (name == "iterable") return none(), is_iterable(v);
  if (name == "sequence") return none(), v.is_undefined() || v.is_string() || v.is_list() || v.is_dict();
  if (name == "callable") return none(), v.kind() == Value::Kind::Function || v.is_undefined();
  if (name == "escaped") return none(), false;
  if (name == "lower") return none(), py_islower(to_str(v, in.max_bytes()).s);
  if (name == "upper") return none(), py_isupper(to_str(v, in.max_bytes()).s);
  if (name == "odd" || name == "even") {
    none();
    const Value m = py_mod(v.is_number() ? v : (fail_undefined(v), v), Value::integer(2));
    return (m.as_double() == 1) == (name == "odd");
  }
  if (name == "divisibleby") {
    const Value& n = one("num");
    if (!v.is_number() || !n.is_number()) raise("divisibleby needs numbers");
    return py_mod(v, n).as_double() == 0;
  }
  if (name == "sameas") {
    const Value& o = one("other");
    if (v.kind() != o.kind()) return false;
    if (v.is_none() || v.is_undefined()) return true;
    if (v.is_bool()) return v.as_bool() == o.as_bool();
    if (v.is_int() || v.is_float() || v.is_string()) return equals(v, o);
    if (v.is_list()) return &v.array() == &o.array();
    return equals(v, o);
  }
  if (name == "in") return compare("in", v, one("seq"));
  if (name == "eq" || name == "equalto" || name == "==") return compare("==", v, one("other"));
  if (name == "ne" || name == "!=") return compare("!=", v, one("other"));
  if (name == "lt" || name == "lessthan" || name == "<") return compare("<", v, one("other"));
  if (name == "le" || name == "<=") return compare("<=", v, one("other"));
  if (name == "gt" || name == "greaterthan" || name == ">") return compare(">", v, one("other"));
  if (name == "ge" || name == ">=") return compare(">=", v, one("other"));
  if (name == "filter") return none(), v.is_string() && has_filter(v.str());
  if (name == "test") return none(), v.is_string() && has_test(v.str());
  raise(fmt::format("no test named '{}'", name));
}

const char* const kTests[] = {"defined", "undefined", "none", "boolean", "true", "false", "integer", "float",
                              "number", "string", "mapping", "iterable", "sequence", "callable", "escaped",
                              "lower", "upper", "odd", "even", "divisibleby", "sameas", "in", "eq", "equalto",
                              "==", "ne", "!=", "lt", "lessthan", "<", "le", "<=", "gt", "greaterthan", ">",
                              "ge", ">=", "filter", "test"};

std::string format_time(std::time_t now, const std::string& f) {
  std::tm tm{};
  localtime_r(&now, &tm);
  if (f.empty()) return "";
  std::string buf(f.size() * 4 + 64, '\0');
  for (int tries = 0; tries < 6; ++tries) {
    const size_t n = std::strftime(buf.data(), buf.size(), f.c_str(), &tm);
    if (n > 0) return buf.substr(0, n);
    buf.resize(buf.size() * 4);
  }
  return "";
}

}  // namespace

[[noreturn]] void fail_undefined(const Value& v) {
  raise(v.undefined_hint().empty() ? "an undefined value was used" : v.undefined_hint());
}

bool has_filter(std::string_view name) { return filters().count(name) > 0; }

bool has_test(std::string_view name) {
  for (const char* t : kTests)
    if (name == t) return true;
  return false;
}

Value apply_filter(Interpreter& in, const std::string& name, const Value& v, CallArgs& args) {
  const auto it = filters().find(name);
  if (it == filters().end()) raise(fmt::format("no filter named '{}'", name));
  return it->second(in, v, args);
}

bool apply_test(Interpreter& in, const std::string& name, const Value& v, CallArgs& args) {
  return run_test(in, name, v, args);
}

std::vector<Value> iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined: return {};
    case Value::Kind::List: return v.array().items;
    case Value::Kind::Dict: {
      std::vector<Value> keys;
      keys.reserve(v.object().entries.size());
      for (const auto& [k, e] : v.object().entries) keys.push_back(k);
      return keys;
    }
    case Value::Kind::String: {
      const Text& t = v.text();
      const std::vector<size_t> offs = char_offsets(t.s);
      std::vector<Value> out;
      out.reserve(offs.size());
      for (size_t i = 0; i + 1 < offs.size(); ++i) out.push_back(Value::string(t.substr(offs[i], offs[i + 1] - offs[i])));
      return out;
    }
    default: raise(fmt::format("'{}' object is not iterable", v.type_name()));
  }
}

Value get_attr(Interpreter& in, const Value& obj, const std::string& name) {
  switch (obj.kind()) {
    case Value::Kind::Undefined: fail_undefined(obj);
    case Value::Kind::Dict: {
      Value m = dict_method(obj, name);
      if (m.kind() != Value::Kind::Undefined || !m.undefined_hint().empty()) return m;
      if (const Value* v = obj.object().find(std::string_view(name))) return *v;
      return no_attribute(obj, name);
    }
    case Value::Kind::Namespace: {
      if (const Value* v = obj.object().find(std::string_view(name))) return *v;
      return Value::undefined(fmt::format("'Namespace object' has no attribute '{}'", name));
    }
    case Value::Kind::String: return string_method(in, obj, name);
    case Value::Kind::List: {
      Value m = list_method(obj, name);
      if (m.kind() != Value::Kind::Undefined || !m.undefined_hint().empty()) return m;
      return no_attribute(obj, name);
    }
    case Value::Kind::Loop: return loop_attr(obj, name);
    default: return no_attribute(obj, name);
  }
}

Value get_item(Interpreter& in, const Value& obj, const Value& key) {
  switch (obj.kind()) {
    case Value::Kind::Undefined: fail_undefined(obj);
    case Value::Kind::Dict: {
      const Value* v = nullptr;
      try {
        v = obj.object().find(key);
      } catch (const ValueError&) {
        return Value::undefined(fmt::format("'dict object' has no element of type {}", key.type_name()));
      }
      if (v) return *v;
      if (key.is_string()) {
        Value m = dict_method(obj, key.str());
        if (m.kind() != Value::Kind::Undefined || !m.undefined_hint().empty()) return m;
        return no_attribute(obj, key.str());
      }
      Text t;
      append_repr(t, key, in.max_bytes());
      return Value::undefined(fmt::format("'dict object' has no element {}", t.s));
    }
    case Value::Kind::List:
    case Value::Kind::String: {
      if (key.is_int() || key.is_bool()) {
        int64_t i = key.as_int();
        if (obj.is_list()) {
          const auto n = static_cast<int64_t>(obj.array().items.size());
          if (i < 0) i += n;
          if (i < 0 || i >= n) return Value::undefined(fmt::format("'{} object' has no element {}", obj.type_name(), key.as_int()));
          return obj.array().items[static_cast<size_t>(i)];
        }
        const std::vector<size_t> offs = char_offsets(obj.str());
        const auto n = static_cast<int64_t>(offs.size()) - 1;
        if (i < 0) i += n;
        if (i < 0 || i >= n) return Value::undefined(fmt::format("'str object' has no element {}", key.as_int()));
        const auto k = static_cast<size_t>(i);
        return Value::string(obj.text().substr(offs[k], offs[k + 1] - offs[k]));
      }
      if (key.is_string()) return get_attr(in, obj, key.str());
      return Value::undefined(fmt::format("'{} object' has no element of type {}", obj.type_name(), key.type_name()));
    }
    case Value::Kind::Namespace:
    case Value::Kind::Loop:
      if (key.is_string()) return get_attr(in, obj, key.str());
      return Value::undefined(fmt::format("'{}' object is not subscriptable", obj.type_name()));
    default: return Value::undefined(fmt::format("'{}' object is not subscriptable", obj.type_name()));
  }
}

Value get_slice(Interpreter& in, const Value& obj, const Value& start, const Value& stop, const Value& step) {
  (void)in;
  if (obj.is_undefined()) fail_undefined(obj);
  if (!obj.is_list() && !obj.is_string()) raise(fmt::format("'{}' object is not subscriptable", obj.type_name()));
  const int64_t st = step.is_none() ? 1 : to_index(step, "slice step");
  if (st == 0) raise("slice step cannot be zero");
  std::vector<size_t> offs;
  int64_t n = 0;
  if (obj.is_list()) {
    n = static_cast<int64_t>(obj.array().items.size());
  } else {
    offs = char_offsets(obj.str());
    n = static_cast<int64_t>(offs.size()) - 1;
  }
  // Python's slice.indices().
  auto clamp = [&](const Value& v, int64_t def_pos, int64_t def_neg) {
    if (v.is_none()) return st > 0 ? def_pos : def_neg;
    int64_t i = to_index(v, "slice index");
    if (i < 0) {
      i = i < -n ? (st > 0 ? 0 : -1) : i + n;
    } else if (i >= n) {
      i = st > 0 ? n : n - 1;
    }
    return i;
  };
  const int64_t b = clamp(start, 0, n - 1), e = clamp(stop, n, -1);
  std::vector<int64_t> idx;
  if (st > 0) {
    for (int64_t i = b; i < e; i += st) idx.push_back(i);
  } else {
    for (int64_t i = b; i > e; i += st) idx.push_back(i);
  }
  if (obj.is_list()) {
    std::vector<Value> out;
    out.reserve(idx.size());
    for (int64_t i : idx) out.push_back(obj.array().items[static_cast<size_t>(i)]);
    return Value::list(std::move(out), obj.array().tuple);
  }
  Text out;
  const Text& t = obj.text();
  if (st == 1 && b < e) return Value::string(t.substr(offs[static_cast<size_t>(b)], offs[static_cast<size_t>(e)] - offs[static_cast<size_t>(b)]));
  for (int64_t i : idx) {
    const auto k = static_cast<size_t>(i);
    out.append(t, offs[k], offs[k + 1] - offs[k]);
  }
  return Value::string(std::move(out));
}

Value negate(const Value& v, bool minus) {
  if (v.is_undefined()) fail_undefined(v);
  if (!v.is_number()) raise(fmt::format("bad operand type for unary {}: '{}'", minus ? '-' : '+', v.type_name()));
  if (v.is_float()) return Value::number(minus ? -v.as_double() : v.as_double());
  if (!minus) return Value::integer(v.as_int());
  if (v.as_int() == INT64_MIN) raise("integer overflow (the result does not fit in 64 bits)");
  return Value::integer(-v.as_int());
}

Value binary_op(Interpreter& in, const std::string& op, const Value& a, const Value& b) {
  if (op == "~") {
    Text t = to_str(a, in.max_bytes());
    append_str(t, b, in.max_bytes());
    in.check_size(t.s.size());
    return Value::string(std::move(t));
  }
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  const bool nums = a.is_number() && b.is_number();
  const bool floats = nums && (a.is_float() || b.is_float());
  auto unsupported = [&]() {
    raise(fmt::format("unsupported operand type(s) for {}: '{}' and '{}'", op, a.type_name(), b.type_name()));
  };
  if (op == "+") {
    if (nums) {
      if (floats) return Value::number(a.as_double() + b.as_double());
      return Value::integer(add_i(a.as_int(), b.as_int()));
    }
    if (a.is_string() && b.is_string()) {
      in.check_size(a.str().size() + b.str().size());
      Text t = a.text();
      t.append(b.text());
      return Value::string(std::move(t));
    }
    if (a.is_list() && b.is_list() && a.array().tuple == b.array().tuple) {
      in.check_size((a.array().items.size() + b.array().items.size()) * sizeof(Value));
      std::vector<Value> items = a.array().items;
      items.insert(items.end(), b.array().items.begin(), b.array().items.end());
      return Value::list(std::move(items), a.array().tuple);
    }
    if (a.is_string() || a.is_list())
      raise(fmt::format("can only concatenate {} (not \"{}\") to {}", a.type_name(), b.type_name(), a.type_name()));
    unsupported();
  }
  if (op == "-") {
    if (!nums) unsupported();
    if (floats) return Value::number(a.as_double() - b.as_double());
    return Value::integer(sub_i(a.as_int(), b.as_int()));
  }
  if (op == "*") {
    if (nums) {
      if (floats) return Value::number(a.as_double() * b.as_double());
      return Value::integer(mul_i(a.as_int(), b.as_int()));
    }
    const Value& seq = a.is_number() ? b : a;
    const Value& count = a.is_number() ? a : b;
    if ((seq.is_string() || seq.is_list()) && (count.is_int() || count.is_bool())) {
      const int64_t n = std::max<int64_t>(0, count.as_int());
      if (seq.is_string()) {
        const size_t len = seq.str().size();
        if (len > 0 && static_cast<uint64_t>(n) > in.max_bytes() / len) in.check_size(in.max_bytes() + 1);
        Text t;
        for (int64_t i = 0; i < n; ++i) t.append(seq.text());
        return Value::string(std::move(t));
      }
      const size_t len = seq.array().items.size();
      if (len > 0 && static_cast<uint64_t>(n) > in.max_bytes() / (len * sizeof(Value))) in.check_size(in.max_bytes() + 1);
      std::vector<Value> items;
      for (int64_t i = 0; i < n; ++i) items.insert(items.end(), seq.array().items.begin(), seq.array().items.end());
      return Value::list(std::move(items), seq.array().tuple);
    }
    unsupported();
  }
  if (op == "/") {
    if (!nums) unsupported();
    if (b.as_double() == 0) raise("division by zero");
    return Value::number(a.as_double() / b.as_double());
  }
  if (op == "//") {
    if (!nums) unsupported();
    return py_floordiv(a, b);
  }
  if (op == "%") {
    if (a.is_string()) return Value::string(percent_format(in, a.text(), b));
    if (!nums) unsupported();
    return py_mod(a, b);
  }
  if (op == "**") {
    if (!nums) unsupported();
    return py_pow(a, b);
  }
  raise(fmt::format("unknown operator '{}'", op));
}

bool compare(const std::string& op, const Value& a, const Value& b) {
  if (op == "==") return equals(a, b);
  if (op == "!=") return !equals(a, b);
  if (op == "in" || op == "notin") {
    bool found = false;
    switch (b.kind()) {
      case Value::Kind::Undefined: found = false; break;
      case Value::Kind::String:
        if (!a.is_string()) raise(fmt::format("'in <string>' requires string as left operand, not {}", a.type_name()));
        found = b.str().find(a.str()) != std::string::npos;
        break;
      case Value::Kind::List:
        for (const Value& x : b.array().items)
          if (equals(x, a)) {
            found = true;
            break;
          }
        break;
      case Value::Kind::Dict: found = b.object().find(a) != nullptr; break;
      default: raise(fmt::format("argument of type '{}' is not iterable", b.type_name()));
    }
    return op == "in" ? found : !found;
  }
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  if (op == "<") return less(a, b);
  if (op == ">") return less(b, a);
  if (op == "<=") return less(a, b) || equals(a, b);
  if (op == ">=") return less(b, a) || equals(a, b);
  raise(fmt::format("unknown comparison '{}'", op));
}

void add_globals(Scope& scope) {
  scope.vars["range"] = make_fn("range", [](Interpreter& in, CallArgs& a) {
    if (!a.keyword.empty()) raise("range() takes no keyword arguments");
    if (a.positional.empty() || a.positional.size() > 3)
      raise(fmt::format("range expected 1 to 3 arguments, got {}", a.positional.size()));
    int64_t start = 0, stop = 0, step = 1;
    if (a.positional.size() == 1) {
      stop = to_index(a.positional[0], "range() argument");
    } else {
      start = to_index(a.positional[0], "range() argument");
      stop = to_index(a.positional[1], "range() argument");
      if (a.positional.size() == 3) step = to_index(a.positional[2], "range() argument");
    }
    if (step == 0) raise("range() arg 3 must not be zero");
    std::vector<Value> out;
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
      if (out.size() >= 100000) raise("range too big: the sandbox allows at most 100000 items");
      out.push_back(Value::integer(i));
      if ((step > 0 && i > INT64_MAX - step) || (step < 0 && i < INT64_MIN - step)) break;
    }
    in.count_iterations(static_cast<int64_t>(out.size()) / 16);
    return Value::list(std::move(out));
  });
  auto dict_from = [](const char* fn, CallArgs& a) {
    auto o = std::make_shared<Object>();
    if (a.positional.size() > 1) raise(fmt::format("{} expected at most 1 argument, got {}", fn, a.positional.size()));
    if (!a.positional.empty()) {
      const Value& src = a.positional[0];
      if (src.is_dict() || src.kind() == Value::Kind::Namespace) {
        for (const auto& [k, v] : src.object().entries) o->set(k, v);
      } else {
        for (const Value& pair : iterate(src)) {
          if (!pair.is_list() || pair.array().items.size() != 2)
            raise(fmt::format("{}: each element must be a pair", fn));
          o->set(pair.array().items[0], pair.array().items[1]);
        }
      }
    }
    for (auto& [k, v] : a.keyword) o->set(Value::string(k), v);
    return o;
  };
  scope.vars["dict"] = make_fn("dict", [dict_from](Interpreter&, CallArgs& a) { return Value::dict(dict_from("dict", a)); });
  scope.vars["namespace"] = make_fn("namespace", [dict_from](Interpreter& in, CallArgs& a) {
    auto o = dict_from("namespace", a);
    for (const auto& [k, v] : o->entries)
      if (k.is_string() && !k.str().empty() && k.str()[0] == '_')
        raise(fmt::format("namespace attributes cannot start with '_' ('{}')", k.str()));
    in.track_namespace(o);
    return Value::name_space(std::move(o));
  });
  scope.vars["raise_exception"] = make_fn("raise_exception", [](Interpreter& in, CallArgs& a) -> Value {
    const auto p = bind("raise_exception", a, {"message"});
    throw TemplateRaised{p[0] ? to_str(*p[0], in.max_bytes()).s : std::string()};
  });
  scope.vars["strftime_now"] = make_fn("strftime_now", [](Interpreter& in, CallArgs& a) {
    const auto p = bind("strftime_now", a, {"format"});
    if (!p[0]) raise("strftime_now() needs a format");
    return Value::string(format_time(in.now(), need_string(*p[0], "format").s));
  });
}

}  // namespace tally::jinja
