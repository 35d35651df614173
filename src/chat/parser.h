// Tokens -> Program, with jinja2's grammar and precedence. Everything the interpreter cannot
// run (unknown filters and tests, template inheritance, call blocks, recursive loops, ...) is
// a TemplateError here, naming the construct and its line:column.
#pragma once

#include <memory>
#include <string>

#include "chat/ast.h"

namespace hydragen::chat {

inline constexpr int kMaxParseNesting = 100;  // nested blocks and expressions

std::unique_ptr<Program> parse_program(const std::string& source);

}  // namespace hydragen::chat
