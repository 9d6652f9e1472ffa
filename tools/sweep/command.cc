#include "tools/sweep/command.h"

#include <algorithm>

#include <fmt/format.h>

#include "lockstep/base/error.h"

namespace lockstep::sweep {
namespace {

// Calls on_name(name) for every `{name}` and on_text(text) for the rest.
template <typename OnText, typename OnName>
void scan(const std::string& arg, OnText on_text, OnName on_name) {
  for (size_t i = 0; i < arg.size(); ++i) {
    const char c = arg[i];
    if ((c == '{' || c == '}') && i + 1 < arg.size() && arg[i + 1] == c) {
      on_text(std::string(1, c));
      ++i;
    } else if (c == '{') {
      const size_t close = arg.find('}', i);
      if (close == std::string::npos)
        throw InvalidArgument(
            fmt::format("command argument '{}': '{{' without '}}' (write {{{{ "
                        "for a literal brace)",
                        arg));
      on_name(arg.substr(i + 1, close - i - 1));
      i = close;
    } else {
      on_text(std::string(1, c));
    }
  }
}

}  // namespace

std::string substitute(const std::string& arg, const Substitutions& values) {
  std::string out;
  scan(
      arg, [&](const std::string& t) { out += t; },
      [&](const std::string& name) {
        auto it = values.find(name);
        if (it == values.end())
          throw InvalidArgument(
              fmt::format("command argument '{}': no value for {{{}}}", arg, name));
        out += it->second;
      });
  return out;
}

std::vector<std::string> substitute(const std::vector<std::string>& args,
                                    const Substitutions& values) {
  std::vector<std::string> out;
  for (const auto& a : args) out.push_back(substitute(a, values));
  return out;
}

void check_template(const std::vector<std::string>& args, const std::vector<std::string>& known) {
  for (const auto& arg : args)
    scan(
        arg, [](const std::string&) {},
        [&](const std::string& name) {
          if (std::find(known.begin(), known.end(), name) != known.end()) return;
          std::string list;
          for (const auto& k : known) list += (list.empty() ? "{" : ", {") + k + "}";
          throw InvalidArgument(fmt::format(
              "command argument '{}': {{{}}} is neither a parameter of the search space nor one "
              "the sweep fills in; known: {}",
              arg, name, list));
        });
}

}  // namespace lockstep::sweep
