// The search space of `lockstep sweep`: named hyper-parameters, each a
// choice, a uniform or log-uniform real range, or an integer range, read
// from a JSON object (schema in docs/sweep.md). Parsing validates the whole
// document and throws lockstep::InvalidArgument naming the parameter, the
// key and what is allowed, before any trial starts.
//
// A Space is an immutable value; sampling takes the caller's generator, so
// it is thread-compatible (const methods only).
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace lockstep::sweep {

enum class ParamType { kChoice, kUniform, kLogUniform, kInt };

struct Param {
  std::string name;
  ParamType type = ParamType::kChoice;
  double low = 0, high = 0;  // ranges: inclusive bounds
  bool log = false;          // int only: sample log-uniformly
  nlohmann::json values;     // choice only: the non-empty array of values
};

// One point of the space: parameter name -> value (number, string or bool).
using Config = nlohmann::json;

class Space {
 public:
  // `source` names the document in errors (a file name).
  static Space parse(const nlohmann::json& doc, const std::string& source);
  static Space parse_text(const std::string& text, const std::string& source);
  static Space load(const std::string& path);

  const std::vector<Param>& params() const { return params_; }
  nlohmann::json to_json() const { return doc_; }

  Config sample(std::mt19937_64& rng) const;
  // Every combination: choices and ints with at most `points` values take
  // all of them, other ranges `points` evenly spaced values (log-spaced for
  // log-uniform). First parameter varies slowest.
  std::vector<Config> grid(int points) const;

 private:
  std::vector<Param> params_;
  nlohmann::json doc_;
};

// The text a value takes in a command line: integers without a decimal
// point, reals with up to 6 significant digits, strings as they are.
std::string format_value(const nlohmann::json& value);

}  // namespace lockstep::sweep
