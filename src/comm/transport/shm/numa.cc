#include "comm/transport/shm/numa.h"

#include <sched.h>

#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "lockstep/base/cpu_topology.h"
#include "lockstep/policy/shm_algorithm.h"

namespace lockstep::comm::shm {

int numa_node_of(std::span<const int> cpus, const std::string& sysfs_root) {
  const std::map<int, std::vector<int>> nodes = read_numa_nodes(sysfs_root);
  if (nodes.size() < 2 || cpus.empty()) return -1;
  // Not a structured binding: clang before 16 cannot capture one in a lambda.
  for (const auto& entry : nodes) {
    const int node = entry.first;
    const std::vector<int>& mine = entry.second;
    const auto on_node = [&](int cpu) {
      return std::find(mine.begin(), mine.end(), cpu) != mine.end();
    };
    const auto count = std::count_if(cpus.begin(), cpus.end(), on_node);
    if (count == static_cast<long>(cpus.size())) return node;
    if (count > 0) return -1;  // the CPUs span this node and another
  }
  return -1;
}

int this_process_numa_node(const std::string& sysfs_root) {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return -1;
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  return numa_node_of(cpus, sysfs_root);
}

int groups_from_nodes(std::span<const int> nodes, std::string* why) {
  std::vector<int> seen;     // the node of each group, in rank order
  std::vector<size_t> runs;  // the ranks of each group
  for (size_t r = 0; r < nodes.size(); ++r) {
    if (nodes[r] < 0) {
      *why = fmt::format(
          "rank {} runs on no single node of several: a host of one node, or "
          "CPUs on more than one",
          r);
      return 1;
    }
    if (r == 0 || nodes[r] != nodes[r - 1]) {
      if (std::find(seen.begin(), seen.end(), nodes[r]) != seen.end()) {
        *why = fmt::format("the ranks on node {} are not contiguous (rank {})", nodes[r], r);
        return 1;
      }
      seen.push_back(nodes[r]);
      runs.push_back(0);
    }
    ++runs.back();
  }
  if (runs.size() < 2) {
    *why = "all ranks are on one node";
    return 1;
  }
  const bool equal = std::all_of(runs.begin(), runs.end(), [&](size_t n) { return n == runs[0]; });
  // Which group counts two_level can run is the planner's rule, asked once.
  policy::ShmPolicy found;
  found.nodes = static_cast<int>(runs.size());
  if (!equal || policy::shm_node_groups(found, static_cast<int>(nodes.size())) == 1) {
    *why = fmt::format("the {} nodes do not hold equal numbers (at least 2) of ranks", runs.size());
    return 1;
  }
  return static_cast<int>(runs.size());
}

}  // namespace lockstep::comm::shm
