// str % args: Python's printf-style formatting (the `%` operator and the `format` filter).
#include <cmath>
#include <cstdio>

#include "chat/operators.h"
#include "chat/python_text.h"
#include "chat/unicode.h"

namespace hydragen::chat {

namespace {

std::string pad(std::string s, int width, bool left) {
  const auto n = static_cast<int>(code_point_count(s));
  if (width <= n) return s;
  const std::string fill(static_cast<std::size_t>(width - n), ' ');
  return left ? s + fill : fill + s;
}

std::string c_format(const std::string& spec, double d) {
  char buf[512];
  const int n = std::snprintf(buf, sizeof buf, spec.c_str(), d);
  if (n < 0 || n >= static_cast<int>(sizeof buf)) throw EvalError("a formatted number is too long");
  return buf;
}

std::string c_format(const std::string& spec, long long i) {
  char buf[512];
  const int n = std::snprintf(buf, sizeof buf, spec.c_str(), i);
  if (n < 0 || n >= static_cast<int>(sizeof buf)) throw EvalError("a formatted number is too long");
  return buf;
}

}  // namespace

std::string percent_format(const std::string& format, const Value& args) {
  std::vector<Value> positional;
  const bool tuple = args.is_list() && args.list().kind == ListKind::Tuple;
  if (tuple) {
    positional = args.items();
  } else {
    positional.push_back(args);
  }
  const Dict* mapping = args.is_dict() ? &args.dict() : nullptr;
  std::size_t next_arg = 0;
  bool used_mapping = false;
  auto take = [&]() -> Value {
    if (next_arg >= positional.size()) throw EvalError("not enough arguments for format string");
    return positional[next_arg++];
  };
  auto take_int = [&]() -> int {
    const Value v = take();
    if (!v.is_integer()) throw EvalError("* wants int");
    return static_cast<int>(std::max<std::int64_t>(-100000, std::min<std::int64_t>(100000, v.as_int())));
  };

  std::string out;
  for (std::size_t i = 0; i < format.size(); ++i) {
    if (format[i] != '%') {
      out += format[i];
      continue;
    }
    if (++i >= format.size()) throw EvalError("incomplete format");
    Value arg;
    bool have_arg = false;
    if (format[i] == '(') {
      const std::size_t close = format.find(')', i);
      if (close == std::string::npos) throw EvalError("incomplete format key");
      if (mapping == nullptr) throw EvalError("format requires a mapping");
      const Value* v = mapping->find(std::string_view(format).substr(i + 1, close - i - 1));
      if (v == nullptr) throw EvalError("KeyError: '" + format.substr(i + 1, close - i - 1) + "'");
      arg = *v;
      have_arg = used_mapping = true;
      i = close + 1;
    }
    std::string flags;
    while (i < format.size() && std::string_view("#0- +").find(format[i]) != std::string_view::npos) flags += format[i++];
    int width = -1, precision = -1;
    if (i < format.size() && format[i] == '*') {
      width = take_int();
      ++i;
    } else {
      for (width = 0; i < format.size() && format[i] >= '0' && format[i] <= '9'; ++i) width = std::min(width * 10 + (format[i] - '0'), 100000);
    }
    if (i < format.size() && format[i] == '.') {
      ++i;
      if (i < format.size() && format[i] == '*') {
        precision = take_int();
        ++i;
      } else {
        for (precision = 0; i < format.size() && format[i] >= '0' && format[i] <= '9'; ++i) {
          precision = std::min(precision * 10 + (format[i] - '0'), 1000);
        }
      }
    }
    while (i < format.size() && (format[i] == 'h' || format[i] == 'l' || format[i] == 'L')) ++i;
    if (i >= format.size()) throw EvalError("incomplete format");
    const char type = format[i];
    if (type == '%') {
      out += '%';
      continue;
    }
    if (!have_arg) arg = take();
    if (width < 0) {
      flags += '-';
      width = -width;
    }
    const bool left = flags.find('-') != std::string::npos;
    std::string spec = "%";
    spec += flags;
    if (width > 0) spec += std::to_string(width);
    if (precision >= 0) {
      spec += '.';
      spec += std::to_string(precision);
    }
    switch (type) {
      case 's':
      case 'r': {
        std::string s = type == 's' ? py_str(arg) : py_repr(arg);
        if (precision >= 0) {
          const std::vector<char32_t> cps = code_points(s);
          if (static_cast<std::size_t>(precision) < cps.size()) {
            s = to_utf8(std::vector<char32_t>(cps.begin(), cps.begin() + precision));
          }
        }
        out += pad(std::move(s), width, left);
        break;
      }
      case 'd':
      case 'i':
      case 'u': {
        if (!arg.is_number()) throw EvalError("%d format: a real number is required, not " + arg.type_name());
        double d = arg.as_double();
        if (arg.is_float() && (!std::isfinite(d) || std::fabs(d) >= 9.2e18)) throw EvalError("%d format: the number does not fit 64 bits");
        const long long v = arg.is_float() ? static_cast<long long>(std::trunc(d)) : arg.as_int();
        out += c_format(spec + "lld", v);
        break;
      }
      case 'x':
      case 'X':
      case 'o': {
        if (!arg.is_integer()) throw EvalError(std::string("%") + type + " format: an integer is required, not " + arg.type_name());
        const long long v = arg.as_int();
        const unsigned long long magnitude = v < 0 ? 0ULL - static_cast<unsigned long long>(v) : static_cast<unsigned long long>(v);
        char buf[32];
        std::snprintf(buf, sizeof buf, type == 'o' ? "%llo" : type == 'x' ? "%llx" : "%llX", magnitude);
        std::string digits = buf;
        if (precision > static_cast<int>(digits.size())) digits.insert(0, static_cast<std::size_t>(precision) - digits.size(), '0');
        const bool alt = flags.find('#') != std::string::npos;
        const std::string prefix = !alt ? "" : type == 'o' ? "0o" : type == 'x' ? "0x" : "0X";
        const std::string sign = v < 0 ? "-" : flags.find('+') != std::string::npos ? "+" : flags.find(' ') != std::string::npos ? " " : "";
        std::string s = sign + prefix + digits;
        if (flags.find('0') != std::string::npos && !left && static_cast<int>(s.size()) < width) {
          s = sign + prefix + std::string(static_cast<std::size_t>(width) - s.size(), '0') + digits;
        }
        out += pad(std::move(s), width, left);
        break;
      }
      case 'e':
      case 'E':
      case 'f':
      case 'F':
      case 'g':
      case 'G': {
        if (!arg.is_number()) throw EvalError(std::string("%") + type + " format: a real number is required, not " + arg.type_name());
        out += c_format(spec + type, arg.as_double());
        break;
      }
      case 'c': {
        std::string c;
        if (arg.is_integer() && arg.as_int() >= 0 && arg.as_int() <= 0x10FFFF) {
          append_utf8(c, static_cast<char32_t>(arg.as_int()));
        } else if (arg.is_string() && code_point_count(arg.str()) == 1) {
          c = arg.str();
        } else {
          throw EvalError("%c requires an int or a single character");
        }
        out += pad(std::move(c), width, left);
        break;
      }
      default: throw EvalError(std::string("unsupported format character '") + type + "'");
    }
  }
  if (!used_mapping && mapping == nullptr && next_arg < positional.size()) {
    throw EvalError("not all arguments converted during string formatting");
  }
  return out;
}

}  // namespace hydragen::chat
