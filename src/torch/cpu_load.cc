#include "torch/cpu_load.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>

namespace lockstep::torch::detail {

std::vector<CpuTimes> parse_proc_stat(std::string_view text) {
  std::vector<CpuTimes> out;
  std::istringstream lines{std::string(text)};
  for (std::string line; std::getline(lines, line);) {
    // "cpu3 user nice system idle iowait irq softirq steal ..."; the summary
    // line "cpu " has no number.
    if (line.size() < 4 || line.compare(0, 3, "cpu") != 0 || line[3] == ' ') continue;
    std::istringstream fields(line.substr(3));
    CpuTimes t;
    fields >> t.cpu;
    unsigned long long value = 0;
    for (int i = 0; i < 8 && fields >> value; ++i) {
      t.total += value;
      if (i == 3 || i == 4) t.idle += value;
    }
    if (t.cpu >= 0) out.push_back(t);
  }
  return out;
}

double idle_cpus_between(const std::vector<CpuTimes>& before, const std::vector<CpuTimes>& after,
                         const std::vector<int>& cpus) {
  std::map<int, CpuTimes> first;
  for (const auto& t : before) first[t.cpu] = t;
  double idle = 0;
  for (const auto& t : after) {
    if (std::find(cpus.begin(), cpus.end(), t.cpu) == cpus.end()) continue;
    auto it = first.find(t.cpu);
    if (it == first.end() || t.total <= it->second.total) continue;
    idle += static_cast<double>(t.idle - it->second.idle) /
            static_cast<double>(t.total - it->second.total);
  }
  return idle;
}

namespace {

std::vector<CpuTimes> read_proc_stat() {
  std::ifstream in("/proc/stat");
  std::stringstream text;
  text << in.rdbuf();
  return parse_proc_stat(text.str());
}

}  // namespace

double measure_idle_cpus(const std::vector<int>& cpus, int window_ms) {
  auto before = read_proc_stat();
  if (before.empty()) return -1;
  std::this_thread::sleep_for(std::chrono::milliseconds(window_ms));
  return idle_cpus_between(before, read_proc_stat(), cpus);
}

int threads_for_idle_cpus(double idle_cpus, int cpus) {
  return std::clamp(static_cast<int>(std::lround(idle_cpus)), 1, std::max(1, cpus));
}

}  // namespace lockstep::torch::detail
