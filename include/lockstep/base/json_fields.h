// Internal (not a stable API): strict JSON field access for lockstep's JSON
// file formats (the step profile, the planner's network files), so a wrong or
// missing field is an InvalidArgument naming the file and the field instead
// of nlohmann's generic type_error. Needs nlohmann_json, which lockstep's
// package does not export: include it only from lockstep's own sources.
#pragma once

#include <fstream>
#include <sstream>
#include <string>
#include <string_view>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "lockstep/base/error.h"

namespace lockstep::detail {

class Fields {
 public:
  Fields(const nlohmann::json& j, std::string where) : j_(j), where_(std::move(where)) {
    if (!j_.is_object()) throw InvalidArgument(fmt::format("{}: expected a JSON object", where_));
  }

  double number(std::string_view key) const {
    const auto& v = at(key);
    if (!v.is_number()) fail(key, "a number");
    return v.get<double>();
  }
  double number_or(std::string_view key, double fallback) const {
    return has(key) ? number(key) : fallback;
  }
  double non_negative(std::string_view key) const {
    double v = number(key);
    if (!(v >= 0)) fail(key, "a number >= 0");
    return v;
  }
  int64_t integer(std::string_view key) const {
    const auto& v = at(key);
    if (!v.is_number_integer()) fail(key, "an integer");
    return v.get<int64_t>();
  }
  int64_t integer_or(std::string_view key, int64_t fallback) const {
    return has(key) ? integer(key) : fallback;
  }
  std::string text(std::string_view key) const {
    const auto& v = at(key);
    if (!v.is_string()) fail(key, "a string");
    return v.get<std::string>();
  }
  std::string text_or(std::string_view key, std::string fallback) const {
    return has(key) ? text(key) : fallback;
  }
  bool flag_or(std::string_view key, bool fallback) const {
    if (!has(key)) return fallback;
    const auto& v = at(key);
    if (!v.is_boolean()) fail(key, "true or false");
    return v.get<bool>();
  }
  const nlohmann::json& array(std::string_view key) const {
    const auto& v = at(key);
    if (!v.is_array()) fail(key, "an array");
    return v;
  }
  const nlohmann::json& object(std::string_view key) const {
    const auto& v = at(key);
    if (!v.is_object()) fail(key, "an object");
    return v;
  }
  bool has(std::string_view key) const { return j_.contains(std::string(key)); }
  std::string where(std::string_view key) const { return fmt::format("{}.{}", where_, key); }
  [[noreturn]] void fail(std::string_view key, std::string_view want) const {
    throw InvalidArgument(fmt::format("{}: must be {}", where(key), want));
  }

 private:
  const nlohmann::json& at(std::string_view key) const {
    auto it = j_.find(std::string(key));
    if (it == j_.end()) throw InvalidArgument(fmt::format("{}: missing", where(key)));
    return *it;
  }
  const nlohmann::json& j_;
  std::string where_;
};

inline nlohmann::json parse_text(std::string_view text, std::string_view source) {
  auto j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded()) throw InvalidArgument(fmt::format("{}: not valid JSON", source));
  return j;
}

inline std::string read_file(const std::string& path, std::string_view what) {
  std::ifstream in(path);
  if (!in) throw InvalidArgument(fmt::format("cannot read {} '{}'", what, path));
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

inline void write_file(const std::string& path, const std::string& text) {
  // Whole file or nothing: a reader never sees a half-written file.
  std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << text;
    if (!out.flush()) throw Error(fmt::format("cannot write '{}'", tmp));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    throw Error(fmt::format("cannot rename '{}' to '{}'", tmp, path));
}

}  // namespace lockstep::detail
