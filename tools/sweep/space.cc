#include "tools/sweep/space.h"

#include <cmath>
#include <fstream>
#include <set>
#include <sstream>

#include <fmt/format.h>

#include "lockstep/base/error.h"

namespace lockstep::sweep {
namespace {

// Names the sweep substitutes itself; a parameter may not shadow them.
const std::set<std::string> kReserved = {"metrics", "trial", "dir", "epochs"};

[[noreturn]] void fail(const std::string& source, const std::string& what) {
  throw InvalidArgument(fmt::format("search space {}: {} (schema: docs/sweep.md)", source, what));
}

bool valid_name(const std::string& name) {
  if (name.empty() || !(std::isalpha(static_cast<unsigned char>(name[0])) || name[0] == '_'))
    return false;
  for (char c : name)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) return false;
  return true;
}

ParamType parse_type(const std::string& source, const std::string& name, const std::string& type) {
  if (type == "choice") return ParamType::kChoice;
  if (type == "uniform") return ParamType::kUniform;
  if (type == "loguniform") return ParamType::kLogUniform;
  if (type == "int") return ParamType::kInt;
  fail(source, fmt::format("'{}': unknown type '{}'; use one of choice, uniform, loguniform, int",
                           name, type));
}

void check_keys(const std::string& source, const std::string& name, const nlohmann::json& spec,
                const std::set<std::string>& allowed) {
  for (auto it = spec.begin(); it != spec.end(); ++it)
    if (!allowed.count(it.key())) {
      std::string list;
      for (const auto& k : allowed) list += (list.empty() ? "" : ", ") + k;
      fail(source, fmt::format("'{}': unknown key '{}' for type '{}'; allowed: {}", name, it.key(),
                               spec.value("type", ""), list));
    }
}

double number(const std::string& source, const std::string& name, const nlohmann::json& spec,
              const char* key) {
  if (!spec.contains(key)) fail(source, fmt::format("'{}': missing \"{}\"", name, key));
  const auto& v = spec[key];
  if (!v.is_number() || !std::isfinite(v.get<double>()))
    fail(source, fmt::format("'{}': \"{}\" must be a finite number, not {}", name, key, v.dump()));
  return v.get<double>();
}

void parse_range(const std::string& source, Param& p, const nlohmann::json& spec) {
  p.low = number(source, p.name, spec, "low");
  p.high = number(source, p.name, spec, "high");
  if (!(p.low < p.high))
    fail(source, fmt::format("'{}': low ({}) must be below high ({})", p.name, p.low, p.high));
  if (p.type == ParamType::kLogUniform && p.low <= 0)
    fail(source, fmt::format("'{}': loguniform needs low > 0, not {}", p.name, p.low));
  if (p.type != ParamType::kInt) return;
  for (const char* key : {"low", "high"})
    if (!spec[key].is_number_integer())
      fail(source, fmt::format("'{}': int \"{}\" must be an integer, not {}", p.name, key,
                               spec[key].dump()));
  if (spec.contains("log")) {
    if (!spec["log"].is_boolean())
      fail(source, fmt::format("'{}': \"log\" must be true or false", p.name));
    p.log = spec["log"].get<bool>();
    if (p.log && p.low <= 0)
      fail(source, fmt::format("'{}': int with \"log\": true needs low > 0", p.name));
  }
}

void parse_choice(const std::string& source, Param& p, const nlohmann::json& spec) {
  if (!spec.contains("values")) fail(source, fmt::format("'{}': choice needs \"values\"", p.name));
  const auto& values = spec["values"];
  if (!values.is_array() || values.empty())
    fail(source, fmt::format("'{}': \"values\" must be a non-empty array", p.name));
  std::set<std::string> seen;
  for (const auto& v : values) {
    if (!(v.is_number() || v.is_string() || v.is_boolean()))
      fail(source, fmt::format("'{}': choice values must be numbers, strings or booleans, not {}",
                               p.name, v.dump()));
    if (!seen.insert(v.dump()).second)
      fail(source, fmt::format("'{}': value {} is listed twice", p.name, v.dump()));
  }
  p.values = values;
}

Param parse_param(const std::string& source, const std::string& name, const nlohmann::json& spec) {
  if (!valid_name(name))
    fail(source, fmt::format("parameter name '{}' must be letters, digits and _ (it is used as "
                             "{{{}}} in the command)",
                             name, name));
  if (kReserved.count(name))
    fail(source, fmt::format("'{}' is reserved: the sweep substitutes {{{}}} itself", name, name));
  if (!spec.is_object())
    fail(source, fmt::format("'{}': expected an object like {{\"type\": \"uniform\", \"low\": 0, "
                             "\"high\": 1}}, not {}",
                             name, spec.dump()));
  if (!spec.contains("type") || !spec["type"].is_string())
    fail(source, fmt::format("'{}': missing \"type\" (choice, uniform, loguniform or int)", name));
  Param p;
  p.name = name;
  p.type = parse_type(source, name, spec["type"].get<std::string>());
  if (p.type == ParamType::kChoice) {
    check_keys(source, name, spec, {"type", "values"});
    parse_choice(source, p, spec);
  } else {
    check_keys(source, name, spec,
               p.type == ParamType::kInt ? std::set<std::string>{"type", "low", "high", "log"}
                                         : std::set<std::string>{"type", "low", "high"});
    parse_range(source, p, spec);
  }
  return p;
}

std::vector<nlohmann::json> grid_values(const Param& p, int points) {
  std::vector<nlohmann::json> out;
  if (p.type == ParamType::kChoice) return {p.values.begin(), p.values.end()};
  if (p.type == ParamType::kInt && p.high - p.low + 1 <= points) {
    for (auto v = static_cast<int64_t>(p.low); v <= static_cast<int64_t>(p.high); ++v)
      out.emplace_back(v);
    return out;
  }
  const bool log = p.type == ParamType::kLogUniform || p.log;
  for (int i = 0; i < points; ++i) {
    const double t = points == 1 ? 0.5 : static_cast<double>(i) / (points - 1);
    const double v = log ? std::exp(std::log(p.low) + t * (std::log(p.high) - std::log(p.low)))
                         : p.low + t * (p.high - p.low);
    if (p.type == ParamType::kInt) {
      nlohmann::json iv = static_cast<int64_t>(std::llround(v));
      if (out.empty() || out.back() != iv) out.push_back(iv);
    } else {
      out.emplace_back(v);
    }
  }
  return out;
}

}  // namespace

Space Space::parse(const nlohmann::json& doc, const std::string& source) {
  if (!doc.is_object())
    fail(source, "expected a JSON object mapping each parameter name to its spec");
  if (doc.empty()) fail(source, "no parameters");
  Space space;
  space.doc_ = doc;
  for (auto it = doc.begin(); it != doc.end(); ++it)
    space.params_.push_back(parse_param(source, it.key(), it.value()));
  return space;
}

Space Space::parse_text(const std::string& text, const std::string& source) {
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    // e.byte is 1-based; report line:column, which editors show.
    size_t line = 1, col = 1;
    for (size_t i = 0; i + 1 < e.byte && i < text.size(); ++i, ++col)
      if (text[i] == '\n') line++, col = 0;
    fail(source, fmt::format("not valid JSON at line {} column {}: {}", line, col, e.what()));
  }
  return parse(doc, source);
}

Space Space::load(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw InvalidArgument(fmt::format("--space {}: cannot open the file", path));
  std::stringstream text;
  text << in.rdbuf();
  return parse_text(text.str(), path);
}

Config Space::sample(std::mt19937_64& rng) const {
  Config config = nlohmann::json::object();
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  for (const auto& p : params_) {
    const double u = unit(rng);
    switch (p.type) {
      case ParamType::kChoice:
        config[p.name] = p.values[std::min(
            p.values.size() - 1, static_cast<size_t>(u * static_cast<double>(p.values.size())))];
        break;
      case ParamType::kUniform: config[p.name] = p.low + u * (p.high - p.low); break;
      case ParamType::kLogUniform:
        config[p.name] = std::exp(std::log(p.low) + u * (std::log(p.high) - std::log(p.low)));
        break;
      case ParamType::kInt: {
        // Each integer gets an equal share of [low - 0.5, high + 0.5) (or of
        // its log), so the end points are as likely as the rest.
        const double lo = p.low - 0.5, hi = p.high + 0.5;
        const double v = p.log ? std::exp(std::log(std::max(lo, 0.5)) +
                                          u * (std::log(hi) - std::log(std::max(lo, 0.5))))
                               : lo + u * (hi - lo);
        config[p.name] = std::clamp<int64_t>(std::llround(v), static_cast<int64_t>(p.low),
                                             static_cast<int64_t>(p.high));
        break;
      }
    }
  }
  return config;
}

std::vector<Config> Space::grid(int points) const {
  if (points < 1)
    throw InvalidArgument(fmt::format("--grid-points {}: must be at least 1", points));
  std::vector<Config> out{nlohmann::json::object()};
  for (const auto& p : params_) {
    std::vector<Config> next;
    for (const auto& partial : out)
      for (const auto& v : grid_values(p, points)) {
        Config c = partial;
        c[p.name] = v;
        next.push_back(std::move(c));
      }
    out = std::move(next);
  }
  return out;
}

std::string format_value(const nlohmann::json& value) {
  if (value.is_string()) return value.get<std::string>();
  if (value.is_number_integer()) return value.dump();
  if (value.is_number()) return fmt::format("{:.6g}", value.get<double>());
  return value.dump();
}

}  // namespace lockstep::sweep
