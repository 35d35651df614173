// A request the server refuses: the HTTP status and OpenAI's error object
// {"error": {"message", "type", "param", "code"}} naming the field at fault.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "hydragen/error.h"

namespace hydragen::server {

class ApiError : public Error {
 public:
  ApiError(int status, std::string message, std::string param = {}, std::string type = "invalid_request_error",
           std::string code = {})
      : Error(message), status_(status), message_(std::move(message)), param_(std::move(param)),
        type_(std::move(type)), code_(std::move(code)) {}
  int status() const { return status_; }
  const std::string& param() const { return param_; }
  // {"error": {...}}; param and code are null when empty.
  nlohmann::json body() const {
    nlohmann::json e = {{"message", message_}, {"type", type_}, {"param", nullptr}, {"code", nullptr}};
    if (!param_.empty()) e["param"] = param_;
    if (!code_.empty()) e["code"] = code_;
    return {{"error", e}};
  }

 private:
  int status_;
  std::string message_, param_, type_, code_;
};

// A 400 naming `param`.
template <class... Parts>
[[noreturn]] void bad_request(const std::string& param, const Parts&... parts) {
  throw ApiError(400, concat(parts...), param);
}

}  // namespace hydragen::server
