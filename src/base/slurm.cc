#include "lockstep/base/slurm.h"

#include <cstdlib>

#include <fmt/format.h>

#include "lockstep/base/error.h"

namespace lockstep::slurm {
namespace {

[[noreturn]] void malformed(std::string_view what, std::string_view text, std::string_view why) {
  throw InvalidArgument(fmt::format("{} '{}' is malformed: {}", what, text, why));
}

// Splits at commas outside brackets.
std::vector<std::string_view> top_level_items(std::string_view text) {
  std::vector<std::string_view> items;
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i <= text.size(); ++i) {
    if (i == text.size() || (text[i] == ',' && depth == 0)) {
      items.push_back(text.substr(start, i - start));
      start = i + 1;
    } else if (text[i] == '[') {
      ++depth;
    } else if (text[i] == ']') {
      --depth;
    }
  }
  return items;
}

int parse_number(std::string_view digits, std::string_view text) {
  if (digits.empty() || digits.size() > 9 ||
      digits.find_first_not_of("0123456789") != std::string_view::npos)
    malformed("Slurm host list", text, fmt::format("'{}' is not a number", digits));
  return std::stoi(std::string(digits));
}

// "01-03,07" -> 01 02 03 07, keeping the width of the first bound.
std::vector<std::string> expand_ranges(std::string_view ranges, std::string_view text) {
  std::vector<std::string> out;
  for (std::string_view part : top_level_items(ranges)) {
    const size_t dash = part.find('-');
    std::string_view lo = part.substr(0, dash);
    std::string_view hi = dash == std::string_view::npos ? lo : part.substr(dash + 1);
    const int a = parse_number(lo, text), b = parse_number(hi, text);
    if (b < a || b - a > 100000)
      malformed("Slurm host list", text, fmt::format("range '{}'", part));
    for (int n = a; n <= b; ++n) out.push_back(fmt::format("{:0{}}", n, lo.size()));
  }
  return out;
}

void expand_item(std::string_view item, std::string prefix, std::vector<std::string>& out,
                 std::string_view text) {
  const size_t open = item.find('[');
  if (open == std::string_view::npos) {
    if (item.find(']') != std::string_view::npos) malformed("Slurm host list", text, "stray ']'");
    out.push_back(prefix + std::string(item));
    return;
  }
  const size_t close = item.find(']', open);
  if (close == std::string_view::npos) malformed("Slurm host list", text, "'[' without ']'");
  prefix += item.substr(0, open);
  for (const std::string& n : expand_ranges(item.substr(open + 1, close - open - 1), text))
    expand_item(item.substr(close + 1), prefix + n, out, text);
}

std::optional<std::string> env(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return std::nullopt;
  return std::string(v);
}

}  // namespace

std::vector<std::string> expand_hostlist(std::string_view text) {
  std::vector<std::string> out;
  for (std::string_view item : top_level_items(text)) {
    if (item.empty()) malformed("Slurm host list", text, "empty entry");
    expand_item(item, "", out, text);
  }
  return out;
}

std::vector<int> expand_counts(std::string_view text) {
  std::vector<int> out;
  for (std::string_view item : top_level_items(text)) {
    const size_t paren = item.find("(x");
    std::string_view count = item.substr(0, paren);
    int repeat = 1;
    if (paren != std::string_view::npos) {
      if (!item.ends_with(")")) malformed("Slurm task counts", text, "expected N(xM)");
      std::string_view times = item.substr(paren + 2, item.size() - paren - 3);
      if (times.empty() || times.find_first_not_of("0123456789") != std::string_view::npos)
        malformed("Slurm task counts", text, fmt::format("'{}'", item));
      repeat = std::stoi(std::string(times));
    }
    if (count.empty() || count.size() > 6 ||
        count.find_first_not_of("0123456789") != std::string_view::npos)
      malformed("Slurm task counts", text, fmt::format("'{}'", item));
    out.insert(out.end(), repeat, std::stoi(std::string(count)));
  }
  return out;
}

std::optional<Allocation> current_allocation() {
  auto job = env("SLURM_JOB_ID");
  auto nodelist = env("SLURM_JOB_NODELIST");
  if (!job || !nodelist) return std::nullopt;
  Allocation a;
  a.job_id = *job;
  a.hosts = expand_hostlist(*nodelist);
  auto counts = env("SLURM_TASKS_PER_NODE");
  if (!counts) counts = env("SLURM_JOB_CPUS_PER_NODE");
  if (!counts)
    throw InvalidArgument(
        "Slurm allocation without SLURM_TASKS_PER_NODE or SLURM_JOB_CPUS_PER_NODE");
  a.slots = expand_counts(*counts);
  if (a.slots.size() != a.hosts.size())
    throw InvalidArgument(fmt::format(
        "Slurm allocation: SLURM_JOB_NODELIST names {} host(s) but the task counts '{}' cover {}",
        a.hosts.size(), *counts, a.slots.size()));
  return a;
}

}  // namespace lockstep::slurm
