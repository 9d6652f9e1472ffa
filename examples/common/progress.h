// A per-epoch progress bar on stderr for rank 0: loss, accuracy, samples/s,
// ETA. On a TTY it redraws one line with '\r' (at most 10 times a second);
// otherwise (logs, CI) it prints a line every ~10% of the epoch.
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace lockstep::examples {

class ProgressBar {
 public:
  ProgressBar(std::string title, int64_t total_steps, bool enabled)
      : title_(std::move(title)),
        total_(total_steps),
        enabled_(enabled),
        tty_(isatty(STDERR_FILENO) != 0),
        start_(Clock::now()),
        last_draw_(start_) {}

  // After each step: running means of the epoch so far, samples this rank's
  // job processed (all ranks) since the epoch began.
  void update(int64_t step, double loss, double accuracy, double samples) {
    if (!enabled_) return;
    const auto now = Clock::now();
    const bool last = step >= total_;
    if (tty_) {
      if (!last && now - last_draw_ < std::chrono::milliseconds(100)) return;
    } else {
      const int64_t tenth = std::max<int64_t>(1, total_ / 10);
      if (!last && step % tenth != 0) return;
    }
    last_draw_ = now;
    const double elapsed = std::chrono::duration<double>(now - start_).count();
    const double rate = elapsed > 0 ? samples / elapsed : 0;
    const double eta = step > 0 ? elapsed * static_cast<double>(total_ - step) / step : 0;
    const int width = 24;
    const int filled = total_ > 0 ? static_cast<int>(width * step / total_) : width;
    std::string bar(static_cast<size_t>(filled), '#');
    bar.resize(width, '.');
    std::fprintf(stderr, "%s%s [%s] %lld/%lld loss %.4f acc %.2f%% %.0f samples/s ETA %.0fs%s",
                 tty_ ? "\r" : "", title_.c_str(), bar.c_str(), static_cast<long long>(step),
                 static_cast<long long>(total_), loss, 100 * accuracy, rate, eta,
                 tty_ ? "\033[K" : "\n");
    if (tty_ && last) std::fprintf(stderr, "\n");
    std::fflush(stderr);
  }

 private:
  using Clock = std::chrono::steady_clock;
  std::string title_;
  int64_t total_;
  bool enabled_, tty_;
  Clock::time_point start_, last_draw_;
};

}  // namespace lockstep::examples
