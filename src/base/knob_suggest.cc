#include "lockstep/base/knob_suggest.h"

#include <algorithm>
#include <cctype>
#include <vector>

#include <fmt/format.h>

#include "lockstep/base/knobs.h"

namespace lockstep {

// Optimal string alignment distance: Levenshtein plus adjacent swaps, the
// commonest typos. O(|a| |b|) on names of a few dozen characters.
size_t edit_distance(std::string_view a, std::string_view b) {
  auto same = [](char x, char y) {
    return std::toupper(static_cast<unsigned char>(x)) ==
           std::toupper(static_cast<unsigned char>(y));
  };
  const size_t n = a.size(), m = b.size();
  std::vector<std::vector<size_t>> d(n + 1, std::vector<size_t>(m + 1));
  for (size_t i = 0; i <= n; ++i) d[i][0] = i;
  for (size_t j = 0; j <= m; ++j) d[0][j] = j;
  for (size_t i = 1; i <= n; ++i)
    for (size_t j = 1; j <= m; ++j) {
      const size_t cost = same(a[i - 1], b[j - 1]) ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && same(a[i - 1], b[j - 2]) && same(a[i - 2], b[j - 1]))
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[n][m];
}

std::string_view closest_knob(std::string_view name) {
  constexpr std::string_view kPrefix = "LOCKSTEP_";
  const size_t tail = name.size() > kPrefix.size() ? name.size() - kPrefix.size() : 0;
  // A third of the part the user chose, so LOCKSTEP_X is not "near" every
  // short knob; never more than 3 edits.
  const size_t limit = std::min<size_t>(3, tail / 3);
  std::string_view best;
  size_t best_distance = limit + 1;
  for (const Knob& k : all_knobs()) {
    const size_t d = edit_distance(name, k.name);
    if (d == 0) return {};
    if (d < best_distance) {
      best = k.name;
      best_distance = d;
    }
  }
  return best;
}

std::string did_you_mean(std::string_view name) {
  const std::string_view best = closest_knob(name);
  return best.empty() ? std::string() : fmt::format(" (did you mean {}?)", best);
}

}  // namespace lockstep
