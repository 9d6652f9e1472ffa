// Fake sysfs trees for the CPU topology reader (lockstep/base/cpu_topology.h)
// and the placement built on it: hosts of several NUMA nodes and SMT that
// the machines the tests run on are not. Header-only; not thread-safe.
#pragma once

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "lockstep/base/cpu_topology.h"
#include "support/scratch.h"

namespace lockstep::testing {

// A folder laid out as /sys is for `cpus`: devices/system/node/node<k>/cpulist
// and devices/system/cpu/cpu<n>/topology/{physical_package_id,core_id}, plus
// entries sysfs has that are neither.
inline std::string fake_sysfs_tree(const std::string& name, const std::vector<CpuPlace>& cpus) {
  const auto root = scratch_folder("lockstep-sysfs", name);
  const auto nodes = root / "devices/system/node";
  std::map<int, std::vector<int>> members;
  for (const CpuPlace& p : cpus) {
    members[p.node].push_back(p.cpu);
    const auto topo = root / fmt::format("devices/system/cpu/cpu{}/topology", p.cpu);
    std::filesystem::create_directories(topo);
    std::ofstream(topo / "physical_package_id") << p.package << "\n";
    std::ofstream(topo / "core_id") << p.core << "\n";
  }
  for (const auto& [node, list] : members) {
    std::filesystem::create_directories(nodes / fmt::format("node{}", node));
    std::ofstream(nodes / fmt::format("node{}", node) / "cpulist")
        << fmt::format("{}\n", fmt::join(list, ","));
  }
  std::filesystem::create_directories(nodes / "power");
  std::ofstream(nodes / "online") << "0-" << members.size() - 1 << "\n";
  return root.string();
}

// A two-socket host numbered as many are: `2 * cores` CPUs per socket, node
// 0 = 0..c-1 and 2c..3c-1, node 1 = c..2c-1 and 3c..4c-1, CPU k and k+2c
// the two threads of one core (cores = 16: node 0 = 0-15,32-47).
inline std::vector<CpuPlace> interleaved_two_socket(int cores) {
  std::vector<CpuPlace> out;
  for (int cpu = 0; cpu < 4 * cores; ++cpu) {
    const int rest = cpu % (2 * cores), node = rest / cores;
    out.push_back(CpuPlace{.cpu = cpu, .node = node, .package = node, .core = rest % cores});
  }
  return out;
}

// The CPUs 0..n-1.
inline std::vector<int> cpu_range(int n) {
  std::vector<int> out;
  for (int c = 0; c < n; ++c) out.push_back(c);
  return out;
}

}  // namespace lockstep::testing
