// Variables of a template: one scope per template render, per loop iteration, per macro call
// and per `with` block, each falling back to the scope it sits in (jinja2's frames).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "chat/value.h"

namespace hydragen::chat {

struct Scope {
  explicit Scope(std::shared_ptr<Scope> parent_scope = nullptr) : parent(std::move(parent_scope)) {}

  // The variable here or in an enclosing scope; null when there is none.
  const Value* find(std::string_view name) const {
    for (const Scope* s = this; s != nullptr; s = s->parent.get()) {
      for (const auto& [n, v] : s->vars) {
        if (n == name) return &v;
      }
    }
    return nullptr;
  }

  void set(std::string_view name, Value value) {
    for (auto& [n, v] : vars) {
      if (n == name) {
        v = std::move(value);
        return;
      }
    }
    vars.emplace_back(std::string(name), std::move(value));
  }

  std::shared_ptr<Scope> parent;
  std::vector<std::pair<std::string, Value>> vars;
};

}  // namespace hydragen::chat
