// A one-line progress bar on stderr, redrawn at most every 100 ms so
// converting millions of small records is not slowed by terminal output.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace lockstep::cli {

class ProgressBar {
 public:
  explicit ProgressBar(std::string label) : label_(std::move(label)) {}

  void update(uint64_t done, uint64_t total, uint64_t bytes) {
    auto now = std::chrono::steady_clock::now();
    if (done != total && now - last_ < std::chrono::milliseconds(100)) return;
    last_ = now;
    double seconds = std::chrono::duration<double>(now - start_).count();
    int filled = total ? static_cast<int>(kWidth * done / total) : kWidth;
    std::fprintf(stderr, "\r%s [%s%s] %llu/%llu records  %.1f MB  %.1f s", label_.c_str(),
                 std::string(filled, '#').c_str(), std::string(kWidth - filled, ' ').c_str(),
                 static_cast<unsigned long long>(done), static_cast<unsigned long long>(total),
                 bytes / 1e6, seconds);
    if (done == total) std::fputc('\n', stderr);
    std::fflush(stderr);
  }

 private:
  static constexpr int kWidth = 30;
  std::string label_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point last_{};
};

}  // namespace lockstep::cli
