#include "tools/sweep/output.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace lockstep::sweep {

Output::Output() : tty_(isatty(STDERR_FILENO) != 0), start_(Clock::now()), last_draw_(start_) {}

std::string describe_params(const Config& params) {
  std::string out;
  for (auto it = params.begin(); it != params.end(); ++it)
    out += fmt::format("{}{}={}", out.empty() ? "" : " ", it.key(), format_value(it.value()));
  return out;
}

void Output::progress(const std::vector<Trial>& trials, const SweepOptions& o, const Trial* best) {
  int count[6] = {0, 0, 0, 0, 0, 0};
  for (const auto& t : trials) ++count[static_cast<int>(t.status)];
  const int done = count[2] + count[3] + count[4] + count[5];
  std::string text = fmt::format(
      "sweep: {}/{} ended ({} completed, {} stopped early, {} failed, {} timed out), {} running",
      done, trials.size(), count[2], count[3], count[4], count[5], count[1]);
  if (best) text += fmt::format(" | best {} {:.4f} (trial {})", o.metric, best->value(), best->id);
  const auto now = Clock::now();
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  const std::string clock =
      fmt::format(" | {}m{:02}s", static_cast<int>(elapsed) / 60, static_cast<int>(elapsed) % 60);
  if (tty_) {
    if (now - last_draw_ < std::chrono::milliseconds(500) && text == last_) return;
    fmt::print(stderr, "\r{}{}\033[K", text, clock);
    drawn_ = true;
  } else {
    // Logs get a line when something changed, and one a minute regardless.
    if (text == last_ && now - last_draw_ < std::chrono::seconds(60)) return;
    fmt::print(stderr, "{}{}\n", text, clock);
  }
  std::fflush(stderr);
  last_ = text;
  last_draw_ = now;
}

void Output::finish_progress() {
  if (drawn_) fmt::print(stderr, "\n");
  drawn_ = false;
}

void Output::trial_ended(const Trial& t, const SweepOptions& o) {
  finish_progress();
  std::string value = std::isfinite(t.value()) ? fmt::format("{:.4f}", t.value()) : "-";
  fmt::print(stderr, "trial {} {} after {} epoch(s), {} s: {} {} [{}]{}\n", t.id,
             status_name(t.status), t.epochs, static_cast<int>(t.seconds), o.metric, value,
             describe_params(t.params),
             t.reason.empty() ? "" : "\n  " + t.reason.substr(0, t.reason.find('\n')));
  last_.clear();
}

void Output::table(const std::vector<Trial>& trials, const SweepOptions& o, const Space& space,
                   Mode mode) {
  std::vector<const Trial*> order;
  for (const auto& t : trials) order.push_back(&t);
  // Completed and stopped trials by their value, then failed and timed-out ones.
  auto key = [&](const Trial* t) {
    const double v = t->value();
    const bool ranked = counts_for_best(t->status) && std::isfinite(v);
    return std::make_pair(ranked ? 0 : 1, ranked ? (mode == Mode::kMax ? -v : v) : 0.0);
  };
  std::stable_sort(order.begin(), order.end(), [&](auto* a, auto* b) { return key(a) < key(b); });
  std::string head =
      fmt::format("{:>5}  {:<9} {:>6} {:>10}", "trial", "status", "epochs", o.metric);
  for (const auto& p : space.params()) head += fmt::format("  {:>12}", p.name);
  fmt::print("\n{}\n", head);
  for (const Trial* t : order) {
    std::string row =
        fmt::format("{:>5}  {:<9} {:>6} {:>10}", t->id, status_name(t->status), t->epochs,
                    std::isfinite(t->value()) ? fmt::format("{:.4f}", t->value()) : "-");
    for (const auto& p : space.params())
      row += fmt::format("  {:>12}",
                         t->params.contains(p.name) ? format_value(t->params[p.name]) : "");
    fmt::print("{}\n", row);
  }
  if (!order.empty() && key(order.front()).first == 0)
    fmt::print("\nbest: trial {} with {} {:.4f}: {}\n", order.front()->id, o.metric,
               order.front()->value(), describe_params(order.front()->params));
  fmt::print(
      "results: {}/results.json, journal {}/journal.jsonl; plot with: lockstep report {} -o "
      "report.html\n",
      o.dir, o.dir, o.dir);
}

}  // namespace lockstep::sweep
