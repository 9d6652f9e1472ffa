#include "lockstep/base/cpu_topology.h"

#include <dirent.h>

#include <algorithm>
#include <charconv>
#include <fstream>
#include <iterator>
#include <optional>
#include <tuple>

#include <fmt/format.h>

// Note [Placement order]
// `lockstep run` gives local rank r of n the r-th block of cpus/n CPUs
// (src/torch/placement.cc). Taken in CPU-number order, that block is wrong
// on many two-socket hosts, which number CPUs so that nodes and SMT siblings
// interleave: node 0 = 0-15,32-47 and node 1 = 16-31,48-63, with CPU k and
// k+32 two threads of one core. Four ranks then got 0-15 / 16-31 / 32-47 /
// 48-63: ranks 0 and 2 shared node 0's 16 cores thread for thread, and the
// node groups {0,2},{1,3} were not contiguous, so the two-level shm
// allreduce fell back to the flat one (docs/shm.md). Sorting the CPUs by
// (node, package, core, number) first makes SMT siblings adjacent and each
// node's CPUs contiguous, so a block holds whole cores (when the block size
// is a multiple of the threads per core) and, when the ranks divide a
// node's CPUs evenly, lies within one node, consecutive ranks filling a
// node before the next: what `mpirun --map-by core` does. A host with one
// node and no SMT (or without the sysfs files) keeps CPU-number order.

namespace lockstep {
namespace {

bool parse_int(std::string_view text, int* out) {
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), *out);
  return ec == std::errc() && end == text.data() + text.size() && *out >= 0;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// A non-negative number alone on its line in `path`, or `fallback`.
int read_int(const std::string& path, int fallback) {
  std::string text = read_text(path);
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  int value = 0;
  return parse_int(text, &value) ? value : fallback;
}

}  // namespace

std::vector<int> parse_cpulist(std::string_view text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.remove_suffix(1);
  std::vector<int> cpus;
  while (!text.empty()) {
    const size_t comma = text.find(',');
    std::string_view item = text.substr(0, comma);
    text = comma == std::string_view::npos ? std::string_view{} : text.substr(comma + 1);
    const size_t dash = item.find('-');
    int lo = 0, hi = 0;
    if (!parse_int(item.substr(0, dash), &lo)) return {};
    hi = lo;
    if (dash != std::string_view::npos && (!parse_int(item.substr(dash + 1), &hi) || hi < lo))
      return {};
    for (int c = lo; c <= hi; ++c) cpus.push_back(c);
  }
  return cpus;
}

std::map<int, std::vector<int>> read_numa_nodes(const std::string& node_dir) {
  std::map<int, std::vector<int>> out;
  DIR* dir = opendir(node_dir.c_str());
  if (!dir) return out;
  while (const dirent* e = readdir(dir)) {
    std::string_view name = e->d_name;
    int k = 0;
    if (name.starts_with("node") && parse_int(name.substr(4), &k))
      out[k] = parse_cpulist(read_text(fmt::format("{}/{}/cpulist", node_dir, name)));
  }
  closedir(dir);
  return out;
}

std::vector<CpuPlace> read_cpu_topology(std::span<const int> cpus, const std::string& sysfs_root) {
  std::map<int, int> node_of;
  for (const auto& [node, members] : read_numa_nodes(sysfs_root + "/devices/system/node"))
    for (int cpu : members) node_of.emplace(cpu, node);
  std::vector<CpuPlace> out;
  out.reserve(cpus.size());
  for (int cpu : cpus) {
    const std::string dir = fmt::format("{}/devices/system/cpu/cpu{}/topology", sysfs_root, cpu);
    const auto node = node_of.find(cpu);
    out.push_back(CpuPlace{.cpu = cpu,
                           .node = node == node_of.end() ? 0 : node->second,
                           .package = read_int(dir + "/physical_package_id", 0),
                           .core = read_int(dir + "/core_id", cpu)});
  }
  return out;
}

std::vector<int> placement_order(std::span<const int> cpus, std::span<const CpuPlace> topology) {
  std::map<int, CpuPlace> place;
  for (const CpuPlace& p : topology) place.emplace(p.cpu, p);
  const auto key = [&](int cpu) {
    const auto it = place.find(cpu);
    const CpuPlace p = it == place.end() ? CpuPlace{cpu, 0, 0, cpu} : it->second;
    return std::tuple(p.node, p.package, p.core, cpu);
  };
  std::vector<int> out(cpus.begin(), cpus.end());
  std::stable_sort(out.begin(), out.end(), [&](int a, int b) { return key(a) < key(b); });
  return out;
}

}  // namespace lockstep
