#include "launcher/command_line.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>

#include <fmt/format.h>

#include "lockstep/base/error.h"

namespace lockstep::launcher {
namespace {

// CLI11 short options are one character, so the conventional -np is renamed.
std::string normalise(const std::string& arg) {
  if (arg == "-np") return "--num-proc";
  if (arg.starts_with("-np=")) return "--num-proc=" + arg.substr(4);
  return arg;
}

bool is_flag(const std::string& arg) { return arg.size() > 1 && arg[0] == '-'; }

// "--name=value" and "-xVALUE" carry their value; "-np" and "--name" may not.
bool value_attached(const std::string& arg) {
  if (arg.starts_with("--")) return arg.find('=') != std::string::npos;
  return arg.size() > 2 && arg != "-np";
}

}  // namespace

CommandLine split_command_line(const std::vector<std::string>& args,
                               const std::function<bool(std::string_view)>& takes_value) {
  CommandLine out;
  size_t i = 0;
  while (i < args.size()) {
    const std::string& arg = args[i];
    if (arg == "--") {
      out.has_separator = true;
      ++i;
      break;
    }
    if (!is_flag(arg)) break;
    std::string flag = normalise(arg);
    out.flags.push_back(flag);
    ++i;
    if (!value_attached(arg) && takes_value(flag) && i < args.size())
      out.flags.push_back(args[i++]);
  }
  out.program.assign(args.begin() + static_cast<std::ptrdiff_t>(i), args.end());
  return out;
}

int parse_int_flag(std::string_view flag, std::string_view text, int min, int max) {
  std::string s(text);
  char* end = nullptr;
  errno = 0;
  long long value = std::strtoll(s.c_str(), &end, 10);
  bool whole = !s.empty() && end == s.c_str() + s.size() && errno == 0;
  if (!whole || value < min || value > max) {
    std::string range = max == std::numeric_limits<int>::max()
                            ? fmt::format("of at least {}", min)
                            : fmt::format("from {} to {}", min, max);
    throw InvalidArgument(fmt::format("{} '{}': expected a whole number {}", flag, text, range));
  }
  return static_cast<int>(value);
}

double parse_seconds_flag(std::string_view flag, std::string_view text, double max) {
  std::string s(text);
  char* end = nullptr;
  double value = std::strtod(s.c_str(), &end);
  bool number = !s.empty() && end == s.c_str() + s.size() && std::isfinite(value);
  if (!number || value <= 0 || value > max)
    throw InvalidArgument(fmt::format(
        "{} '{}': expected a number of seconds greater than 0 and at most {:g}", flag, text, max));
  return value;
}

}  // namespace lockstep::launcher
