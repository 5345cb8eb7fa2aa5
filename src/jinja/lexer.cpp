#include "jinja/lexer.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>

#include "core/utf8.h"
#include "jinja/pystr.h"

namespace tally::jinja {

std::string describe(const Token& t) {
  switch (t.type) {
    case Token::Type::Data: return "template data";
    case Token::Type::BlockBegin: return "begin of statement block";
    case Token::Type::BlockEnd: return "end of statement block";
    case Token::Type::VarBegin: return "begin of print statement";
    case Token::Type::VarEnd: return "end of print statement";
    case Token::Type::Name: return "'" + t.text + "'";
    case Token::Type::String: return "string";
    case Token::Type::Int: return "integer";
    case Token::Type::Float: return "float";
    case Token::Type::Op: return "'" + t.text + "'";
    case Token::Type::Eof: return "end of template";
  }
  return "token";
}

namespace {

class Lexer {
 public:
  explicit Lexer(std::string_view raw) {
    // Newlines normalized to \n; one trailing newline dropped (keep_trailing_newline=False).
    src_.reserve(raw.size());
    for (size_t i = 0; i < raw.size(); ++i) {
      if (raw[i] == '\r') {
        src_.push_back('\n');
        if (i + 1 < raw.size() && raw[i + 1] == '\n') ++i;
      } else {
        src_.push_back(raw[i]);
      }
    }
    if (!src_.empty() && src_.back() == '\n') src_.pop_back();
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i)
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
  }

  std::vector<Token> run() {
    size_t pos = 0;
    bool line_starting = true;
    while (pos < src_.size()) {
      // The next tag opener: {% {{ {#.
      size_t i = pos;
      while (true) {
        i = src_.find('{', i);
        if (i == std::string::npos || i + 1 >= src_.size()) {
          i = std::string::npos;
          break;
        }
        const char c = src_[i + 1];
        if (c == '%' || c == '{' || c == '#') break;
        ++i;
      }
      if (i == std::string::npos) {
        emit_data(pos, src_.size(), src_.substr(pos));
        break;
      }
      const char kind = src_[i + 1];
      size_t after = i + 2;
      char sign = 0;
      if (after < src_.size() && (src_[after] == '-' || src_[after] == '+')) sign = src_[after++];
      size_t raw_end = 0;
      const bool raw = kind == '%' && match_raw_begin(i, &raw_end, &sign);
      std::string text = src_.substr(pos, i - pos);
      strip_before_tag(text, sign, kind == '{', line_starting);
      emit_data(pos, i, std::move(text));
      if (raw) {
        line_starting = src_[raw_end - 1] == '\n';
        pos = lex_raw(raw_end, line_starting, &line_starting);
        continue;
      }
      line_starting = false;  // the match ends with the opener, never a newline
      if (kind == '#') {
        pos = skip_comment(i, after, &line_starting);
      } else {
        push(kind == '%' ? Token::Type::BlockBegin : Token::Type::VarBegin, i, std::string(src_, i, after - i));
        pos = lex_tag(after, kind == '%', &line_starting);
      }
    }
    push(Token::Type::Eof, src_.size(), "");
    return std::move(out_);
  }

 private:
  std::string src_;
  std::vector<size_t> line_starts_;
  std::vector<Token> out_;

  [[noreturn]] void fail_at(size_t pos, std::string msg) const {
    const auto [line, col] = position(pos);
    throw SyntaxError{std::move(msg), line, col};
  }

  std::pair<int, int> position(size_t pos) const {
    const auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), pos);
    const size_t line = static_cast<size_t>(it - line_starts_.begin());
    const size_t start = line_starts_[line - 1];
    const size_t col = char_count_between(start, std::min(pos, src_.size()));
    return {static_cast<int>(line), static_cast<int>(col + 1)};
  }

  size_t char_count_between(size_t b, size_t e) const {
    size_t n = 0;
    for (size_t i = b; i < e; ++n) {
      size_t len = 0;
      pystr::code_point_at(src_, i, &len);
      i += len;
    }
    return n;
  }

  void push(Token::Type type, size_t pos, std::string text) {
    Token t;
    t.type = type;
    t.text = std::move(text);
    std::tie(t.line, t.col) = position(pos);
    out_.push_back(std::move(t));
  }

  void emit_data(size_t pos, size_t, std::string text) {
    if (!text.empty()) push(Token::Type::Data, pos, std::move(text));
  }

  // Bytes of Python whitespace at s[i] (0 if none).
  static size_t space_at(std::string_view s, size_t i) {
    if (i >= s.size()) return 0;
    size_t n = 0;
    return pystr::is_space(pystr::code_point_at(s, i, &n)) ? n : 0;
  }
  size_t skip_space(size_t i) const {
    while (size_t n = space_at(src_, i)) i += n;
    return i;
  }

  // `{%-` strips all whitespace before the tag; otherwise, for a block or
  // comment tag, lstrip_blocks removes the indentation of its line (the
  // text between the last newline and the tag, if all whitespace).
  static void strip_before_tag(std::string& text, char sign, bool variable, bool line_starting) {
    if (sign == '-') {
      text.resize(pystr::rstrip_pos(text, nullptr));
      return;
    }
    if (sign == '+' || variable) return;
    const size_t nl = text.rfind('\n');
    const size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
    if (l_pos == 0 && !line_starting) return;
    if (l_pos < text.size() && pystr::lstrip_pos(std::string_view(text).substr(l_pos), nullptr) == text.size() - l_pos)
      text.resize(l_pos);
  }

  // {%[-+]?\s*raw\s*(-%}\s*|%}) at i.
  bool match_raw_begin(size_t i, size_t* end, char* sign) const {
    size_t p = i + 2;
    char s = 0;
    if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) s = src_[p++];
    p = skip_space(p);
    if (src_.compare(p, 3, "raw") != 0) return false;
    p = skip_space(p + 3);
    if (src_.compare(p, 3, "-%}") == 0) {
      *end = skip_space(p + 3);
    } else if (src_.compare(p, 2, "%}") == 0) {
      *end = p + 2;
    } else {
      return false;
    }
    *sign = s;
    return true;
  }

  // The body of a raw block up to {% endraw %}; returns the position after it.
  size_t lex_raw(size_t pos, bool line_starting, bool* line_starting_out) {
    for (size_t i = src_.find("{%", pos); i != std::string::npos; i = src_.find("{%", i + 1)) {
      size_t p = i + 2;
      char sign = 0;
      if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) sign = src_[p++];
      p = skip_space(p);
      if (src_.compare(p, 6, "endraw") != 0) continue;
      p = skip_space(p + 6);
      size_t end = 0;
      if (!match_block_end(p, &end)) continue;
      std::string text = src_.substr(pos, i - pos);
      strip_before_tag(text, sign, false, line_starting);
      emit_data(pos, i, std::move(text));
      *line_starting_out = src_[end - 1] == '\n';
      return end;
    }
    fail_at(pos, "missing end of raw block ({% endraw %})");
  }

  // +%} | -%}\s* | %}\n? at p (trim_blocks removes one newline).
  bool match_block_end(size_t p, size_t* end) const {
    if (src_.compare(p, 3, "+%}") == 0) {
      *end = p + 3;
    } else if (src_.compare(p, 3, "-%}") == 0) {
      *end = skip_space(p + 3);
    } else if (src_.compare(p, 2, "%}") == 0) {
      *end = p + 2;
      if (*end < src_.size() && src_[*end] == '\n') ++*end;
    } else {
      return false;
    }
    return true;
  }

  size_t skip_comment(size_t open, size_t pos, bool* line_starting) {
    for (size_t i = src_.find("#}", pos); i != std::string::npos; i = src_.find("#}", i + 1)) {
      // The earliest of +#}, -#}, #} (a sign just before counts with it).
      size_t end = 0;
      if (i > pos && src_[i - 1] == '-') {
        end = skip_space(i + 2);
      } else {
        end = i + 2;
        const bool plus = i > pos && src_[i - 1] == '+';
        if (!plus && end < src_.size() && src_[end] == '\n') ++end;
      }
      *line_starting = src_[end - 1] == '\n';
      return end;
    }
    fail_at(open, "missing end of comment tag (#})");
  }

  // Tokens of a {% %} or {{ }} tag from `pos`; returns the position after it.
  size_t lex_tag(size_t pos, bool block, bool* line_starting) {
    std::vector<char> balance;
    const size_t open = pos;
    while (true) {
      if (pos >= src_.size()) fail_at(open, block ? "unexpected end of template: a '{%' tag is not closed with '%}'"
                                                  : "unexpected end of template: a '{{' tag is not closed with '}}'");
      if (balance.empty()) {
        size_t end = 0;
        if (block && match_block_end(pos, &end)) {
          push(Token::Type::BlockEnd, pos, "%}");
          *line_starting = src_[end - 1] == '\n';
          return end;
        }
        if (!block && (src_.compare(pos, 3, "-}}") == 0 || src_.compare(pos, 2, "}}") == 0)) {
          push(Token::Type::VarEnd, pos, "}}");
          end = src_[pos] == '-' ? skip_space(pos + 3) : pos + 2;
          *line_starting = src_[end - 1] == '\n';
          return end;
        }
      }
      if (size_t n = space_at(src_, pos)) {
        size_t e = pos + n;
        while (size_t m = space_at(src_, e)) e += m;
        *line_starting = src_[e - 1] == '\n';
        pos = e;
        continue;
      }
      *line_starting = false;
      const char c = src_[pos];
      if (c >= '0' && c <= '9') {
        pos = lex_number(pos);
      } else if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_') {
        size_t e = pos;
        while (e < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[e])) || src_[e] == '_')) ++e;
        push(Token::Type::Name, pos, src_.substr(pos, e - pos));
        pos = e;
      } else if (c == '\'' || c == '"') {
        pos = lex_string(pos);
      } else {
        pos = lex_operator(pos, balance);
      }
    }
  }

  size_t lex_operator(size_t pos, std::vector<char>& balance) {
    static const char* const kTwo[] = {"//", "**", "==", "!=", ">=", "<="};
    for (const char* op : kTwo) {
      if (src_.compare(pos, 2, op) == 0) {
        push(Token::Type::Op, pos, op);
        return pos + 2;
      }
    }
    const char c = src_[pos];
    if (std::string_view("+-/*%~[](){}><=.:|,;").find(c) == std::string_view::npos) {
      size_t n = 0;
      const uint32_t cp = pystr::code_point_at(src_, pos, &n);
      fail_at(pos, cp >= 0x20 && cp < 0x7F ? fmt::format("unexpected character '{}'", c)
                                           : fmt::format("unexpected character U+{:04X}", cp));
    }
    if (c == '(' || c == '[' || c == '{') {
      balance.push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
    } else if (c == ')' || c == ']' || c == '}') {
      if (balance.empty()) fail_at(pos, fmt::format("unexpected '{}'", c));
      if (balance.back() != c) fail_at(pos, fmt::format("unexpected '{}', expected '{}'", c, balance.back()));
      balance.pop_back();
    }
    push(Token::Type::Op, pos, std::string(1, c));
    return pos + 1;
  }

  // Python's integer and float literals as jinja2 reads them (underscores
  // between digits, 0b/0o/0x prefixes, exponents).
  size_t lex_number(size_t pos) {
    auto digits = [&](size_t p, auto is_digit) {
      // (_?d)* after a first digit; returns the end.
      while (p < src_.size()) {
        if (is_digit(src_[p])) {
          ++p;
        } else if (src_[p] == '_' && p + 1 < src_.size() && is_digit(src_[p + 1])) {
          p += 2;
        } else {
          break;
        }
      }
      return p;
    };
    auto dec = [](char c) { return c >= '0' && c <= '9'; };
    const bool after_dot = pos > 0 && src_[pos - 1] == '.';
    // Float: digits (. digits)? e[+-]digits | digits . digits
    if (!after_dot) {
      size_t p = digits(pos, dec);
      size_t q = p;
      bool frac = false, exp = false;
      if (q + 1 < src_.size() && src_[q] == '.' && dec(src_[q + 1])) {
        q = digits(q + 1, dec);
        frac = true;
      }
      if (q < src_.size() && (src_[q] == 'e' || src_[q] == 'E')) {
        size_t r = q + 1;
        if (r < src_.size() && (src_[r] == '+' || src_[r] == '-')) ++r;
        if (r < src_.size() && dec(src_[r])) {
          q = digits(r, dec);
          exp = true;
        }
      }
      if (frac || exp) {
        std::string s;
        for (size_t i = pos; i < q; ++i)
          if (src_[i] != '_') s.push_back(src_[i]);
        Token t;
        t.type = Token::Type::Float;
        t.text = s;
        t.float_value = std::strtod(s.c_str(), nullptr);
        std::tie(t.line, t.col) = position(pos);
        out_.push_back(std::move(t));
        return q;
      }
    }
    int base = 10;
    size_t start = pos, end = 0;
    const char p1 = pos + 1 < src_.size() ? static_cast<char>(std::tolower(static_cast<unsigned char>(src_[pos + 1]))) : 0;
    auto in_base = [&](char c) {
      c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      if (base == 2) return c == '0' || c == '1';
      if (base == 8) return c >= '0' && c <= '7';
      return dec(c) || (c >= 'a' && c <= 'f');
    };
    if (src_[pos] == '0' && (p1 == 'b' || p1 == 'o' || p1 == 'x')) {
      base = p1 == 'b' ? 2 : p1 == 'o' ? 8 : 16;
      size_t p = pos + 2;
      if (p < src_.size() && src_[p] == '_') ++p;
      if (p >= src_.size() || !in_base(src_[p])) {
        base = 10;  // just "0", then a name
        end = pos + 1;
      } else {
        start = pos + 2;
        end = digits(p, in_base);
      }
    } else if (src_[pos] == '0') {
      end = digits(pos, [](char c) { return c == '0'; });
    } else {
      end = digits(pos, dec);
    }
    std::string s;
    for (size_t i = start; i < end; ++i)
      if (src_[i] != '_') s.push_back(src_[i]);
    if (s.empty()) s.assign(1, '0');
    int64_t v = 0;
    const auto r = std::from_chars(s.data(), s.data() + s.size(), v, base);
    if (r.ec != std::errc()) fail_at(pos, "integer literal too large");
    Token t;
    t.type = Token::Type::Int;
    t.text = src_.substr(pos, end - pos);
    t.int_value = v;
    std::tie(t.line, t.col) = position(pos);
    out_.push_back(std::move(t));
    return end;
  }

  // A quoted string with Python's escapes (as jinja2 decodes them:
  // backslash escapes of "unicode-escape"; an unknown escape stays as is).
  size_t lex_string(size_t pos) {
    const char q = src_[pos];
    std::string out;
    size_t i = pos + 1;
    auto hex = [&](size_t at, int n) -> uint32_t {
      uint32_t v = 0;
      for (int k = 0; k < n; ++k) {
        const size_t p = at + static_cast<size_t>(k);
        if (p >= src_.size() || !std::isxdigit(static_cast<unsigned char>(src_[p])))
          fail_at(at - 2, fmt::format("truncated \\{}{} escape in a string", src_[at - 1], std::string(static_cast<size_t>(n), 'X')));
        const char c = src_[p];
        v = v * 16 + static_cast<uint32_t>(c <= '9' ? c - '0' : (std::tolower(c) - 'a' + 10));
      }
      return v;
    };
    auto put = [&](uint32_t cp, size_t at) {
      if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
        fail_at(at, fmt::format("string escape names U+{:04X}, which is not a character", cp));
      utf8::append(out, cp);
    };
    while (true) {
      if (i >= src_.size()) fail_at(pos, "unterminated string");
      const char c = src_[i];
      if (c == q) break;
      if (c != '\\') {
        out.push_back(c);
        ++i;
        continue;
      }
      if (i + 1 >= src_.size()) fail_at(pos, "unterminated string");
      const char e = src_[i + 1];
      const size_t at = i;
      i += 2;
      switch (e) {
        case '\n': break;  // line continuation
        case '\\': out.push_back('\\'); break;
        case '\'': out.push_back('\''); break;
        case '"': out.push_back('"'); break;
        case 'a': out.push_back('\a'); break;
        case 'b': out.push_back('\b'); break;
        case 'f': out.push_back('\f'); break;
        case 'n': out.push_back('\n'); break;
        case 'r': out.push_back('\r'); break;
        case 't': out.push_back('\t'); break;
        case 'v': out.push_back('\v'); break;
        case 'x': put(hex(i, 2), at), i += 2; break;
        case 'u': put(hex(i, 4), at), i += 4; break;
        case 'U': put(hex(i, 8), at), i += 8; break;
        case 'N': fail_at(at, "\\N{...} escapes are not supported in strings");
        default:
          if (e >= '0' && e <= '7') {
            uint32_t v = static_cast<uint32_t>(e - '0');
            for (int k = 0; k < 2 && i < src_.size() && src_[i] >= '0' && src_[i] <= '7'; ++k, ++i)
              v = v * 8 + static_cast<uint32_t>(src_[i] - '0');
            put(v, at);
          } else if (static_cast<unsigned char>(e) >= 0x80) {
            // Python sees "\" then the character's backslashreplace escape, read as text.
            size_t n = 0;
            const uint32_t cp = pystr::code_point_at(src_, i - 1, &n);
            out.push_back('\\');
            out += cp <= 0xFF ? fmt::format("x{:02x}", cp) : cp <= 0xFFFF ? fmt::format("u{:04x}", cp)
                                                                         : fmt::format("U{:08x}", cp);
            i = i - 1 + n;
          } else {
            out.push_back('\\');
            out.push_back(e);
          }
      }
    }
    Token t;
    t.type = Token::Type::String;
    t.text = std::move(out);
    std::tie(t.line, t.col) = position(pos);
    out_.push_back(std::move(t));
    return i + 1;
  }
};

}  // namespace

std::vector<Token> tokenize(std::string_view source) { return Lexer(source).run(); }

}  // namespace tally::jinja
