#pragma once
// Splits template source into tokens as jinja2's lexer does with HF's
// settings (trim_blocks, lstrip_blocks, keep_trailing_newline off): newlines
// normalized to \n and one trailing newline dropped; `{%-`/`-%}` strip
// whitespace; a block tag's line indentation and the newline after it are
// removed; comments dropped; raw blocks passed through as text. Positions are
// 1-based line and column (in characters) of the normalized source.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tally::jinja {

struct Token {
  enum class Type { Data, BlockBegin, BlockEnd, VarBegin, VarEnd, Name, String, Int, Float, Op, Eof };
  Type type;
  std::string text;  // Data: the text; Name; String: decoded; Op: the operator
  int64_t int_value = 0;
  double float_value = 0;
  int line = 1, col = 1;
};

// Throws SyntaxError.
std::vector<Token> tokenize(std::string_view source);

struct SyntaxError {
  std::string message;
  int line, col;
};

std::string describe(const Token& t);  // for messages: "'endfor'", "end of template", ...

}  // namespace tally::jinja
