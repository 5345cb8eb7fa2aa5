#pragma once
// The syntax tree of a parsed template: expressions and statements as jinja2's
// parser builds them. Immutable once parsed; every node knows its position.
#include <memory>
#include <string>
#include <vector>

#include "jinja/value.h"

namespace tally::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    Literal,    // value
    Name,       // name
    List,       // kids
    Tuple,      // kids
    Dict,       // kids: key, value, key, value, ...
    GetAttr,    // kids[0] . name
    GetItem,    // kids[0] [ kids[1] ]
    Slice,      // kids[0] [ kids[1] : kids[2] : kids[3] ] (null kids for omitted parts)
    Call,       // kids[0] ( kids[1..] ), kw_names per argument ("" positional)
    Filter,     // kids[0] | name ( kids[1..] ), kw_names; kids[0] null in a filter block
    Test,       // kids[0] is name ( kids[1..] ), kw_names
    Not,        // kids[0]
    Neg,        // kids[0]
    Pos,        // kids[0]
    Binary,     // kids[0] op kids[1]: + - * / // % ** ~ and or
    Compare,    // kids[0] (ops[i] kids[i+1])*: == != < <= > >= in notin
    CondExpr,   // kids[0] if kids[1] else kids[2] (null: undefined)
  };
  Kind kind;
  int line = 0, col = 0;
  Value literal;
  std::string name;  // Name, GetAttr, Filter, Test; Binary: the operator
  std::vector<ExprPtr> kids;
  std::vector<std::string> kw_names;  // Call, Filter, Test: per argument in kids[1..]
  std::vector<std::string> ops;       // Compare
};

struct Stmt;
using Body = std::vector<std::unique_ptr<Stmt>>;

struct MacroParam {
  std::string name;
  ExprPtr default_value;  // null: none
};

struct Stmt {
  enum class Kind {
    Data,      // text
    Output,    // exprs[0]
    If,        // exprs: conditions; bodies: one per condition, plus else body last when has_else
    For,       // targets in exprs[0] (filter exprs[1] or null); bodies[0] body, bodies[1] else
    Set,       // targets = exprs[0]
    SetBlock,  // targets { bodies[0] } with filters in exprs (each a Filter with null operand)
    Macro,     // name(params) { bodies[0] }
    CallBlock, // call exprs[0] with caller(params) { bodies[0] }
    FilterBlock,  // exprs: filters { bodies[0] }
    With,      // targets[i] = exprs[i] { bodies[0] }
    Break,
    Continue,
  };
  Kind kind;
  int line = 0, col = 0;
  std::string text;                   // Data
  std::vector<ExprPtr> exprs;
  std::vector<Body> bodies;
  bool has_else = false;
  // Set / For / With: assignment targets. A target is a name, "ns.attr" for a
  // namespace attribute (Set only), and For unpacks into several names.
  std::vector<std::string> targets;
  std::string ns_attr;                // Set: the attribute when the target is ns.attr
  bool unpack = false;                // For/Set: targets form a tuple
  // Macro / CallBlock
  std::string name;
  std::vector<MacroParam> params;
  bool uses_caller = false, uses_varargs = false, uses_kwargs = false;
};

}  // namespace tally::jinja
