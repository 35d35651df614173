// The global functions a template can call: range, dict, namespace, and transformers'
// raise_exception and strftime_now.
#include <cstdio>
#include <ctime>
#include <string_view>

#include "chat/builtins.h"
#include "chat/operators.h"
#include "chat/python_text.h"
#include "chat/renderer.h"

namespace hydragen::chat {

namespace {

constexpr std::int64_t kMaxRange = 100000;  // jinja2's sandbox refuses larger ranges

std::int64_t int_arg(const Value& v) {
  if (!v.is_integer()) throw EvalError("'" + v.type_name() + "' object cannot be interpreted as an integer");
  return v.as_int();
}

Value global_range(Renderer&, const Args& args) {
  if (!args.keyword.empty()) throw EvalError("range() takes no keyword arguments");
  const auto& p = args.positional;
  if (p.empty() || p.size() > 3) throw EvalError("range expected 1 to 3 arguments, got " + std::to_string(p.size()));
  const std::int64_t start = p.size() == 1 ? 0 : int_arg(p[0]);
  const std::int64_t stop = int_arg(p.size() == 1 ? p[0] : p[1]);
  const std::int64_t step = p.size() == 3 ? int_arg(p[2]) : 1;
  if (step == 0) throw EvalError("range() arg 3 must not be zero");
  const __int128 span = static_cast<__int128>(stop) - start;
  const __int128 length = step > 0 ? (span > 0 ? (span + step - 1) / step : 0) : (span < 0 ? (span + step + 1) / step : 0);
  if (length > kMaxRange) {
    throw EvalError("Range too big. The sandbox blocks ranges larger than MAX_RANGE (" + std::to_string(kMaxRange) + ").");
  }
  return Value::range(start, stop, step);
}

// dict(mapping-or-pairs, **kwargs), as Python's dict() builds it.
Dict build_dict(const std::string& fn, const Args& args) {
  if (args.positional.size() > 1) throw EvalError(fn + " expected at most 1 argument, got " + std::to_string(args.positional.size()));
  Dict d;
  if (!args.positional.empty()) {
    const Value& source = args.positional[0];
    if (source.is_dict()) {
      d = source.dict();
    } else {
      std::size_t i = 0;
      for (const Value& pair : iterate(source)) {
        const std::vector<Value> kv = iterate(pair);
        if (kv.size() != 2) {
          throw EvalError(fn + ": sequence element #" + std::to_string(i) + " has length " + std::to_string(kv.size()) + "; 2 is required");
        }
        d.set(kv[0], kv[1]);
        ++i;
      }
    }
  }
  for (const auto& [k, v] : args.keyword) d.set(k, v);
  return d;
}

Value global_dict(Renderer&, const Args& args) { return Value::dict(build_dict("dict", args)); }
Value global_namespace(Renderer&, const Args& args) { return Value::ns(build_dict("namespace", args)); }

Value global_raise_exception(Renderer&, const Args& args) {
  const auto a = bind_args("raise_exception", args, {"message"});
  throw RaisedError(a[0] ? py_str(*a[0]) : "");
}

// Python's strftime in the C locale, for the directives chat templates use.
std::string format_time(const std::string& format, const std::tm& tm) {
  static const char* kDays[] = {"Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"};
  static const char* kMonths[] = {"January", "February", "March", "April", "May", "June",
                                  "July", "August", "September", "October", "November", "December"};
  std::string out;
  for (std::size_t i = 0; i < format.size(); ++i) {
    if (format[i] != '%' || i + 1 == format.size()) {
      out += format[i];
      continue;
    }
    char c = format[++i];
    bool pad = true;
    if (c == '-' && i + 1 < format.size()) {  // glibc: %-d prints no padding
      pad = false;
      c = format[++i];
    }
    auto number = [&](int v, int width) {
      char buf[16];
      if (pad) {
        std::snprintf(buf, sizeof buf, "%0*d", width, v);
      } else {
        std::snprintf(buf, sizeof buf, "%d", v);
      }
      out += buf;
    };
    const int wday = ((tm.tm_wday % 7) + 7) % 7, mon = ((tm.tm_mon % 12) + 12) % 12;
    switch (c) {
      case 'a': out += std::string(kDays[wday]).substr(0, 3); break;
      case 'A': out += kDays[wday]; break;
      case 'b': out += std::string(kMonths[mon]).substr(0, 3); break;
      case 'B': out += kMonths[mon]; break;
      case 'd': number(tm.tm_mday, 2); break;
      case 'e': {
        char buf[16];
        std::snprintf(buf, sizeof buf, "%*d", pad ? 2 : 1, tm.tm_mday);
        out += buf;
        break;
      }
      case 'H': number(tm.tm_hour, 2); break;
      case 'I': number(tm.tm_hour % 12 == 0 ? 12 : tm.tm_hour % 12, 2); break;
      case 'j': number(tm.tm_yday + 1, 3); break;
      case 'm': number(tm.tm_mon + 1, 2); break;
      case 'M': number(tm.tm_min, 2); break;
      case 'p': out += tm.tm_hour < 12 ? "AM" : "PM"; break;
      case 'S': number(tm.tm_sec, 2); break;
      case 'w': number(wday, 1); break;
      case 'y': number((tm.tm_year + 1900) % 100, 2); break;
      case 'Y': number(tm.tm_year + 1900, 1); break;
      case 'F': out += format_time("%Y-%m-%d", tm); break;
      case 'T': out += format_time("%H:%M:%S", tm); break;
      case 'z':
      case 'Z': break;  // datetime.now() is naive: no zone
      case '%': out += '%'; break;
      default: throw EvalError(std::string("strftime_now: the directive %") + c + " is not supported");
    }
  }
  return out;
}

Value global_strftime_now(Renderer& r, const Args& args) {
  const auto a = bind_args("strftime_now", args, {"format"});
  if (!a[0] || !a[0]->is_string()) throw EvalError("strftime_now() needs a format string");
  return r.text(format_time(a[0]->str(), r.now()));
}

constexpr Named<BuiltinFn> kGlobals[] = {
    {"range", global_range},
    {"dict", global_dict},
    {"namespace", global_namespace},
    {"raise_exception", global_raise_exception},
    {"strftime_now", global_strftime_now},
};

}  // namespace

BuiltinFn find_global(std::string_view name) {
  return find_named(kGlobals, name);
}

}  // namespace hydragen::chat
