#pragma once
// Builds the syntax tree from tokens with jinja2's grammar and precedence
// (parser.py): statements if/elif/else, for (with else, a filter condition,
// break/continue), set (plain, tuple, namespace attribute, block), macro,
// call, filter, with, generation; expressions with conditional expressions,
// or/and/not, chained comparisons, in / not in, + - ~ * / // % **, unary
// signs, filters, tests, attribute and item access, slices and calls.
// Unknown filters and tests are errors here, as at jinja2's compile time.
// Nesting is bounded (kMaxNesting) so hostile input cannot exhaust the stack.
#include <vector>

#include "jinja/ast.h"
#include "jinja/lexer.h"

namespace tally::jinja {

inline constexpr int kMaxNesting = 100;

// Throws SyntaxError.
Body parse(const std::vector<Token>& tokens);

}  // namespace tally::jinja
