#include "chat/python_text.h"

#include <charconv>
#include <cmath>
#include <cstdio>

#include "chat/callable.h"
#include "chat/unicode.h"
#include "tokenizer/utf8.h"

namespace hydragen::chat {

namespace {

void append_repr(std::string& out, const Value& v);

void append_items(std::string& out, const std::vector<Value>& items) {
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += ", ";
    append_repr(out, items[i]);
  }
}

void append_dict(std::string& out, const Dict& d) {
  out += '{';
  bool first = true;
  for (const auto& [k, v] : d.entries()) {
    if (!first) out += ", ";
    first = false;
    append_repr(out, k);
    out += ": ";
    append_repr(out, v);
  }
  out += '}';
}

void append_list(std::string& out, const ListData& l) {
  switch (l.kind) {
    case ListKind::List:
      out += '[';
      append_items(out, l.items);
      out += ']';
      return;
    case ListKind::Tuple:
      out += '(';
      append_items(out, l.items);
      if (l.items.size() == 1) out += ',';
      out += ')';
      return;
    case ListKind::Range:
      out += "range(" + std::to_string(l.start) + ", " + std::to_string(l.stop);
      if (l.step != 1) out += ", " + std::to_string(l.step);
      out += ')';
      return;
    case ListKind::DictKeys: out += "dict_keys(["; break;
    case ListKind::DictValues: out += "dict_values(["; break;
    case ListKind::DictItems: out += "dict_items(["; break;
  }
  append_items(out, l.items);
  out += "])";
}

// The text every kind but str shares between str() and repr().
void append_common(std::string& out, const Value& v) {
  switch (v.kind()) {
    case ValueKind::Undefined: return;
    case ValueKind::None: out += "None"; return;
    case ValueKind::Bool: out += v.as_bool() ? "True" : "False"; return;
    case ValueKind::Int: out += std::to_string(v.as_int()); return;
    case ValueKind::Float: out += float_repr(v.as_double()); return;
    case ValueKind::List: append_list(out, v.list()); return;
    case ValueKind::Dict: append_dict(out, v.dict()); return;
    case ValueKind::Namespace:
      out += "<Namespace ";
      append_dict(out, v.ns().attrs);
      out += '>';
      return;
    case ValueKind::Loop: {
      const LoopData& l = v.loop();
      out += "<LoopContext " + std::to_string(l.index0 + 1) + "/" + std::to_string(l.items.size()) + ">";
      return;
    }
    case ValueKind::Callable:
      if (v.callable().kind == Callable::Kind::Macro) {
        out += "<Macro " + string_repr(v.callable().name) + ">";
        return;
      }
      throw EvalError("cannot print the function '" + v.callable().name + "' (Python prints its memory address)");
    case ValueKind::Iterator:
      throw EvalError("cannot print a " + v.iterator().type_name +
                      " (Python prints its memory address); apply |list first");
    case ValueKind::String: break;
  }
}

void append_repr(std::string& out, const Value& v) {
  if (v.is_string()) {
    if (v.is_markup()) out += "Markup(";
    out += string_repr(v.str());
    if (v.is_markup()) out += ')';
  } else if (v.is_undefined()) {
    out += "Undefined";
  } else {
    append_common(out, v);
  }
}

void append_hex_escape(std::string& out, char kind, unsigned width, char32_t cp) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "\\%c%0*x", kind, static_cast<int>(width), static_cast<unsigned>(cp));
  out += buf;
}

}  // namespace

std::string py_str(const Value& v) {
  if (v.is_string()) return v.str();
  std::string out;
  append_common(out, v);
  return out;
}

std::string py_repr(const Value& v) {
  std::string out;
  append_repr(out, v);
  return out;
}

// Python's repr: the shortest digits that read back the same double, in fixed notation when
// the exponent is in [-4, 16), else in scientific notation with a two-digit exponent at least.
std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string s(buf, res.ptr);
  const bool negative = s[0] == '-';
  if (negative) s.erase(0, 1);
  const std::size_t e_pos = s.find('e');
  const int exponent = std::stoi(s.substr(e_pos + 1));
  std::string digits = s.substr(0, e_pos);
  if (digits.size() > 1) digits.erase(1, 1);  // the '.'
  std::string out = negative ? "-" : "";
  if (exponent >= -4 && exponent < 16) {
    const int point = exponent + 1;  // digits before the decimal point
    if (point <= 0) {
      out += "0." + std::string(static_cast<std::size_t>(-point), '0') + digits;
    } else if (static_cast<std::size_t>(point) >= digits.size()) {
      out += digits + std::string(static_cast<std::size_t>(point) - digits.size(), '0') + ".0";
    } else {
      out += digits.substr(0, static_cast<std::size_t>(point)) + "." + digits.substr(static_cast<std::size_t>(point));
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) out += "." + digits.substr(1);
  char exp_buf[16];
  std::snprintf(exp_buf, sizeof exp_buf, "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
  return out + exp_buf;
}

std::string string_repr(std::string_view s) {
  const bool has_single = s.find('\'') != std::string_view::npos;
  const bool has_double = s.find('"') != std::string_view::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (std::size_t i = 0; i < s.size();) {
    const char32_t c = tok::utf8_next(s, i);
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c < 0x20 || c == 0x7F) {
      append_hex_escape(out, 'x', 2, c);
    } else if (c < 0x7F) {
      out += static_cast<char>(c);
    } else if (py_isprintable(c)) {
      append_utf8(out, c);
    } else if (c <= 0xFF) {
      append_hex_escape(out, 'x', 2, c);
    } else if (c <= 0xFFFF) {
      append_hex_escape(out, 'u', 4, c);
    } else {
      append_hex_escape(out, 'U', 8, c);
    }
  }
  out += quote;
  return out;
}

std::string html_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '\'': out += "&#39;"; break;
      case '"': out += "&#34;"; break;
      default: out += c;
    }
  }
  return out;
}

}  // namespace hydragen::chat
