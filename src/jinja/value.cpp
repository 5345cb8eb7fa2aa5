#include "jinja/value.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <cstring>

#include "core/utf8.h"
#include "jinja/pystr.h"

namespace tally::jinja {

const std::string Value::empty_;

void raise(std::string message) { throw ValueError{std::move(message)}; }

// ---- Text -------------------------------------------------------------------

Text::Text(std::string str, bool from_input) : s(std::move(str)) {
  if (from_input && !s.empty()) input.assign(s.size(), 1);
}

bool Text::any_input() const {
  for (uint8_t b : input)
    if (b) return true;
  return false;
}

void Text::append(const Text& t) { append(t, 0, t.s.size()); }

void Text::append(const Text& t, size_t pos, size_t n) {
  n = std::min(n, t.s.size() - pos);
  if (n == 0) return;
  s.append(t.s, pos, n);
  if (!t.input.empty()) {
    if (input.empty()) input.assign(s.size() - n, 0);
    input.insert(input.end(), t.input.begin() + static_cast<std::ptrdiff_t>(pos),
                 t.input.begin() + static_cast<std::ptrdiff_t>(pos + n));
  } else if (!input.empty()) {
    input.resize(s.size(), 0);
  }
}

void Text::append(std::string_view str, bool from_input) {
  if (str.empty()) return;
  const size_t old = s.size();
  s.append(str);
  if (from_input) {
    input.resize(old, 0);
    input.resize(s.size(), 1);
  } else if (!input.empty()) {
    input.resize(s.size(), 0);
  }
}

Text Text::substr(size_t pos, size_t n) const {
  Text t;
  pos = std::min(pos, s.size());
  t.append(*this, pos, n);
  return t;
}

// ---- Value ------------------------------------------------------------------

Value Value::undefined(std::string hint) {
  Value v;
  if (!hint.empty()) v.hint_ = std::make_shared<const std::string>(std::move(hint));
  return v;
}
Value Value::none() {
  Value v;
  v.kind_ = Kind::None;
  return v;
}
Value Value::boolean(bool b) {
  Value v;
  v.kind_ = Kind::Bool;
  v.b_ = b;
  return v;
}
Value Value::integer(int64_t i) {
  Value v;
  v.kind_ = Kind::Int;
  v.i_ = i;
  return v;
}
Value Value::number(double d) {
  Value v;
  v.kind_ = Kind::Float;
  v.d_ = d;
  return v;
}
Value Value::string(Text t) {
  Value v;
  v.kind_ = Kind::String;
  v.str_ = std::make_shared<const Text>(std::move(t));
  return v;
}
Value Value::string(std::string s, bool from_input) { return string(Text(std::move(s), from_input)); }
Value Value::list(std::vector<Value> items, bool tuple) {
  Value v;
  v.kind_ = Kind::List;
  v.list_ = std::make_shared<const Array>(Array{std::move(items), tuple});
  return v;
}
Value Value::dict(std::shared_ptr<Object> o) {
  Value v;
  v.kind_ = Kind::Dict;
  v.obj_ = std::move(o);
  return v;
}
Value Value::name_space(std::shared_ptr<Object> o) {
  Value v;
  v.kind_ = Kind::Namespace;
  v.obj_ = std::move(o);
  return v;
}
Value Value::function(std::shared_ptr<const Function> f) {
  Value v;
  v.kind_ = Kind::Function;
  v.fn_ = std::move(f);
  return v;
}
Value Value::loop(std::shared_ptr<LoopState> l) {
  Value v;
  v.kind_ = Kind::Loop;
  v.loop_ = std::move(l);
  return v;
}

bool Value::truthy() const {
  switch (kind_) {
    case Kind::Undefined:
    case Kind::None: return false;
    case Kind::Bool: return b_;
    case Kind::Int: return i_ != 0;
    case Kind::Float: return d_ != 0;
    case Kind::String: return !str_->s.empty();
    case Kind::List: return !list_->items.empty();
    case Kind::Dict: return !obj_->entries.empty();
    default: return true;
  }
}

std::string Value::type_name() const {
  switch (kind_) {
    case Kind::Undefined: return "Undefined";
    case Kind::None: return "NoneType";
    case Kind::Bool: return "bool";
    case Kind::Int: return "int";
    case Kind::Float: return "float";
    case Kind::String: return "str";
    case Kind::List: return list_->tuple ? "tuple" : "list";
    case Kind::Dict: return "dict";
    case Kind::Namespace: return "Namespace";
    case Kind::Function: return "function";
    case Kind::Loop: return "LoopContext";
  }
  return "object";
}

// ---- Object -----------------------------------------------------------------

namespace {

// The hash key of a dict key: values Python treats as the same key map to
// the same string (1, 1.0 and True are one key).
std::string key_of(const Value& k) {
  switch (k.kind()) {
    case Value::Kind::String: return "s" + k.str();
    case Value::Kind::None: return "none";
    case Value::Kind::Bool:
    case Value::Kind::Int: return "n" + std::to_string(k.as_int());
    case Value::Kind::Float: {
      const double d = k.as_double();
      if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.2e18)
        return "n" + std::to_string(static_cast<int64_t>(d));
      return "f" + float_repr(d);
    }
    default: raise(fmt::format("unhashable type: '{}'", k.type_name()));
  }
}

}  // namespace

size_t Object::find_index(const Value& key) const {
  const auto it = string_index_.find(key_of(key));
  return it == string_index_.end() ? SIZE_MAX : it->second;
}

const Value* Object::find(const Value& key) const {
  const size_t i = find_index(key);
  return i == SIZE_MAX ? nullptr : &entries[i].second;
}

const Value* Object::find(std::string_view key) const {
  std::string k = "s";
  k.append(key);
  const auto it = string_index_.find(k);
  return it == string_index_.end() ? nullptr : &entries[it->second].second;
}

void Object::set(const Value& key, Value v) {
  std::string k = key_of(key);
  const auto it = string_index_.find(k);
  if (it != string_index_.end()) {
    entries[it->second].second = std::move(v);
    return;
  }
  string_index_.emplace(std::move(k), entries.size());
  entries.emplace_back(key, std::move(v));
}

// ---- JSON input -------------------------------------------------------------

Value from_json(const nlohmann::ordered_json& j, bool from_input) {
  using T = nlohmann::ordered_json::value_t;
  switch (j.type()) {
    case T::null: return Value::none();
    case T::boolean: return Value::boolean(j.get<bool>());
    case T::number_integer: return Value::integer(j.get<int64_t>());
    case T::number_unsigned: {
      const uint64_t u = j.get<uint64_t>();
      if (u <= static_cast<uint64_t>(INT64_MAX)) return Value::integer(static_cast<int64_t>(u));
      return Value::number(static_cast<double>(u));
    }
    case T::number_float: return Value::number(j.get<double>());
    case T::string: return Value::string(j.get<std::string>(), from_input);
    case T::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(from_json(e, from_input));
      return Value::list(std::move(items));
    }
    case T::object: {
      auto o = std::make_shared<Object>();
      for (const auto& [k, v] : j.items()) o->set(Value::string(k, from_input), from_json(v, from_input));
      return Value::dict(std::move(o));
    }
    default: return Value::none();
  }
}

// ---- str / repr -------------------------------------------------------------

size_t char_count(std::string_view s) {
  size_t n = 0;
  for (size_t i = 0; i < s.size(); ++n) {
    size_t len = 0;
    pystr::code_point_at(s, i, &len);
    i += len;
  }
  return n;
}

std::vector<size_t> char_offsets(std::string_view s) {
  std::vector<size_t> out;
  out.reserve(s.size() + 1);
  for (size_t i = 0; i < s.size();) {
    out.push_back(i);
    size_t len = 0;
    pystr::code_point_at(s, i, &len);
    i += len;
  }
  out.push_back(s.size());
  return out;
}

std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  if (d == 0) return std::signbit(d) ? "-0.0" : "0.0";
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  const std::string sci(buf, r.ptr);  // [-]d[.ddd]e[+-]XX
  std::string sign, digits;
  size_t i = 0;
  if (sci[0] == '-') {
    sign = "-";
    i = 1;
  }
  const size_t e = sci.find('e');
  for (; i < e; ++i)
    if (sci[i] != '.') digits.push_back(sci[i]);
  const int exp = std::stoi(sci.substr(e + 1));
  const int decpt = exp + 1;  // value = 0.DIGITS * 10^decpt
  std::string out = sign;
  if (decpt > -4 && decpt <= 16) {
    if (decpt <= 0) {
      out += "0.";
      out.append(static_cast<size_t>(-decpt), '0');
      out += digits;
    } else if (static_cast<size_t>(decpt) >= digits.size()) {
      out += digits;
      out.append(static_cast<size_t>(decpt) - digits.size(), '0');
      out += ".0";
    } else {
      out += digits.substr(0, static_cast<size_t>(decpt));
      out += ".";
      out += digits.substr(static_cast<size_t>(decpt));
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) out += "." + digits.substr(1);
  out += fmt::format("e{}{:02d}", exp < 0 ? '-' : '+', std::abs(exp));
  return out;
}

namespace {

void check_size(const Text& out, size_t max_bytes) {
  if (out.s.size() > max_bytes) raise(fmt::format("a string would exceed {} bytes", max_bytes));
}

void append_string_repr(Text& out, const Text& t) {
  const std::string& s = t.s;
  const bool has_single = s.find('\'') != std::string::npos, has_double = s.find('"') != std::string::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  out.append(std::string_view(&quote, 1));
  for (size_t i = 0; i < s.size();) {
    size_t n = 0;
    const utf8::Decoded d = utf8::decode(std::string_view(s).substr(i));
    const bool ok = d.status == utf8::Status::Ok;
    const uint32_t cp = ok ? d.cp : static_cast<uint8_t>(s[i]);
    n = ok ? d.len : 1;
    const bool in = t.from_input(i);
    std::string piece;
    if (cp == static_cast<uint32_t>(quote) || cp == '\\') {
      piece = {'\\', static_cast<char>(cp)};
    } else if (cp == '\t') {
      piece = "\\t";
    } else if (cp == '\n') {
      piece = "\\n";
    } else if (cp == '\r') {
      piece = "\\r";
    } else if (!ok) {
      piece = fmt::format("\\x{:02x}", cp);  // Python would hold a surrogate escape here
    } else if (cp < 0x7F ? cp < 0x20 : !pystr::is_printable(cp)) {
      piece = cp <= 0xFF ? fmt::format("\\x{:02x}", cp) : cp <= 0xFFFF ? fmt::format("\\u{:04x}", cp)
                                                                          : fmt::format("\\U{:08x}", cp);
    } else {
      piece.assign(s, i, n);
    }
    out.append(piece, in);
    i += n;
  }
  out.append(std::string_view(&quote, 1));
}

}  // namespace

void append_repr(Text& out, const Value& v, size_t max_bytes, int depth) {
  if (depth > kMaxDepth) raise(fmt::format("a value nests deeper than {} levels", kMaxDepth));
  switch (v.kind()) {
    case Value::Kind::Undefined: out.append("Undefined"); break;
    case Value::Kind::None: out.append("None"); break;
    case Value::Kind::Bool: out.append(v.as_bool() ? "True" : "False"); break;
    case Value::Kind::Int: out.append(std::to_string(v.as_int())); break;
    case Value::Kind::Float: out.append(float_repr(v.as_double())); break;
    case Value::Kind::String: append_string_repr(out, v.text()); break;
    case Value::Kind::List: {
      const Array& a = v.array();
      out.append(a.tuple ? "(" : "[");
      for (size_t i = 0; i < a.items.size(); ++i) {
        if (i) out.append(", ");
        append_repr(out, a.items[i], max_bytes, depth + 1);
        check_size(out, max_bytes);
      }
      if (a.tuple && a.items.size() == 1) out.append(",");
      out.append(a.tuple ? ")" : "]");
      break;
    }
    case Value::Kind::Namespace:
    case Value::Kind::Dict: {
      if (v.kind() == Value::Kind::Namespace) out.append("<Namespace ");
      out.append("{");
      bool first = true;
      for (const auto& [k, e] : v.object().entries) {
        if (!first) out.append(", ");
        first = false;
        append_repr(out, k, max_bytes, depth + 1);
        out.append(": ");
        append_repr(out, e, max_bytes, depth + 1);
        check_size(out, max_bytes);
      }
      out.append("}");
      if (v.kind() == Value::Kind::Namespace) out.append(">");
      break;
    }
    case Value::Kind::Function: out.append(fmt::format("<function {}>", v.fn().name)); break;
    case Value::Kind::Loop:
      out.append(fmt::format("<LoopContext {}/{}>", v.loop_state().index0 + 1, v.loop_state().length));
      break;
  }
  check_size(out, max_bytes);
}

void append_str(Text& out, const Value& v, size_t max_bytes) {
  switch (v.kind()) {
    case Value::Kind::Undefined: break;
    case Value::Kind::String: out.append(v.text()); break;
    default: append_repr(out, v, max_bytes); break;
  }
  check_size(out, max_bytes);
}

Text to_str(const Value& v, size_t max_bytes) {
  if (v.is_string()) return v.text();
  Text t;
  append_str(t, v, max_bytes);
  return t;
}

// ---- JSON output --------------------------------------------------------------

namespace {

void append_json_string(Text& out, const Text& t, bool ensure_ascii) {
  out.append("\"");
  const std::string& s = t.s;
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<uint8_t>(s[i]);
    const bool in = t.from_input(i);
    if (c < 0x80) {
      std::string piece;
      switch (c) {
        case '"': piece = "\\\""; break;
        case '\\': piece = "\\\\"; break;
        case '\n': piece = "\\n"; break;
        case '\r': piece = "\\r"; break;
        case '\t': piece = "\\t"; break;
        case '\b': piece = "\\b"; break;
        case '\f': piece = "\\f"; break;
        default:
          if (c < 0x20)
            piece = fmt::format("\\u{:04x}", c);
          else
            piece.assign(1, static_cast<char>(c));
      }
      out.append(piece, in);
      ++i;
      continue;
    }
    const utf8::Decoded d = utf8::decode(std::string_view(s).substr(i));
    const size_t n = d.status == utf8::Status::Ok ? d.len : 1;
    if (!ensure_ascii) {
      out.append(std::string_view(s).substr(i, n), in);
    } else {
      const uint32_t cp = d.status == utf8::Status::Ok ? d.cp : c;
      if (cp >= 0x10000) {
        const uint32_t v = cp - 0x10000;
        out.append(fmt::format("\\u{:04x}\\u{:04x}", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF)), in);
      } else {
        out.append(fmt::format("\\u{:04x}", cp), in);
      }
    }
    i += n;
  }
  out.append("\"");
}

std::string json_float(double d) {
  if (std::isnan(d)) return "NaN";
  if (std::isinf(d)) return d > 0 ? "Infinity" : "-Infinity";
  return float_repr(d);
}

// A dict key as json.dumps writes it (keys must be scalars).
Text json_key(const Value& k) {
  switch (k.kind()) {
    case Value::Kind::String: return k.text();
    case Value::Kind::Bool: return Text(k.as_bool() ? "true" : "false");
    case Value::Kind::None: return Text("null");
    case Value::Kind::Int: return Text(std::to_string(k.as_int()));
    case Value::Kind::Float: return Text(json_float(k.as_double()));
    default: raise(fmt::format("keys must be str, int, float, bool or None, not {}", k.type_name()));
  }
}

void newline_indent(Text& out, const JsonOptions& o, int level) {
  out.append("\n");
  for (int i = 0; i < level; ++i) out.append(*o.indent);
}

}  // namespace

void append_json(Text& out, const Value& v, const JsonOptions& o, size_t max_bytes, int depth) {
  if (depth > kMaxDepth) raise(fmt::format("a value nests deeper than {} levels", kMaxDepth));
  switch (v.kind()) {
    case Value::Kind::None: out.append("null"); break;
    case Value::Kind::Bool: out.append(v.as_bool() ? "true" : "false"); break;
    case Value::Kind::Int: out.append(std::to_string(v.as_int())); break;
    case Value::Kind::Float: out.append(json_float(v.as_double())); break;
    case Value::Kind::String: append_json_string(out, v.text(), o.ensure_ascii); break;
    case Value::Kind::List: {
      const auto& items = v.array().items;
      if (items.empty()) {
        out.append("[]");
        break;
      }
      out.append("[");
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out.append(o.item_sep);
        if (o.indent) newline_indent(out, o, depth + 1);
        append_json(out, items[i], o, max_bytes, depth + 1);
        check_size(out, max_bytes);
      }
      if (o.indent) newline_indent(out, o, depth);
      out.append("]");
      break;
    }
    case Value::Kind::Dict: {
      const auto& entries = v.object().entries;
      if (entries.empty()) {
        out.append("{}");
        break;
      }
      std::vector<std::pair<Text, const Value*>> items;
      items.reserve(entries.size());
      for (const auto& [k, e] : entries) items.emplace_back(json_key(k), &e);
      if (o.sort_keys) {
        for (const auto& [k, e] : entries)
          if (!k.is_string()) raise("sort_keys needs every key to be a string");
        std::stable_sort(items.begin(), items.end(), [](const auto& a, const auto& b) { return a.first.s < b.first.s; });
      }
      out.append("{");
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out.append(o.item_sep);
        if (o.indent) newline_indent(out, o, depth + 1);
        append_json_string(out, items[i].first, o.ensure_ascii);
        out.append(o.key_sep);
        append_json(out, *items[i].second, o, max_bytes, depth + 1);
        check_size(out, max_bytes);
      }
      if (o.indent) newline_indent(out, o, depth);
      out.append("}");
      break;
    }
    default: raise(fmt::format("Object of type {} is not JSON serializable", v.type_name()));
  }
  check_size(out, max_bytes);
}

// ---- comparison ---------------------------------------------------------------

bool equals(const Value& a, const Value& b, int depth) {
  if (depth > kMaxDepth) raise(fmt::format("a value nests deeper than {} levels", kMaxDepth));
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() == b.as_double();
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::Undefined:
    case Value::Kind::None: return true;
    case Value::Kind::String: return a.str() == b.str();
    case Value::Kind::List: {
      const Array &x = a.array(), &y = b.array();
      if (x.tuple != y.tuple || x.items.size() != y.items.size()) return false;
      for (size_t i = 0; i < x.items.size(); ++i)
        if (!equals(x.items[i], y.items[i], depth + 1)) return false;
      return true;
    }
    case Value::Kind::Dict: {
      const Object &x = a.object(), &y = b.object();
      if (x.entries.size() != y.entries.size()) return false;
      for (const auto& [k, v] : x.entries) {
        const Value* w = y.find(k);
        if (w == nullptr || !equals(v, *w, depth + 1)) return false;
      }
      return true;
    }
    case Value::Kind::Namespace: return a.object_ptr() == b.object_ptr();
    case Value::Kind::Function: return a.fn_ptr() == b.fn_ptr();
    case Value::Kind::Loop: return &a.loop_state() == &b.loop_state();
    default: return false;
  }
}

bool less(const Value& a, const Value& b, int depth) {
  if (depth > kMaxDepth) raise(fmt::format("a value nests deeper than {} levels", kMaxDepth));
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() < b.as_double();
    return a.as_int() < b.as_int();
  }
  if (a.is_string() && b.is_string()) return a.str() < b.str();
  if (a.is_list() && b.is_list() && a.array().tuple == b.array().tuple) {
    const auto &x = a.array().items, &y = b.array().items;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i)
      if (!equals(x[i], y[i], depth + 1)) return less(x[i], y[i], depth + 1);
    return x.size() < y.size();
  }
  raise(fmt::format("'<' not supported between instances of '{}' and '{}'", a.type_name(), b.type_name()));
}

}  // namespace tally::jinja
