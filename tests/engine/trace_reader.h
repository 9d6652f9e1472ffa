// Test helper: reads a timeline file (Chrome trace JSON) written by the
// engine, also one cut short by a killed process.
#pragma once

#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

namespace lockstep::testing {

inline nlohmann::json parse_trace(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string text = ss.str();
  // A trace cut short ends in ",\n" with no closing bracket; Chrome accepts
  // that, strict JSON needs it closed.
  auto last = text.find_last_not_of(" \n");
  if (last != std::string::npos && text[last] == ',') text = text.substr(0, last) + "]";
  return nlohmann::json::parse(text);
}

}  // namespace lockstep::testing
