// Where each CPU sits on its host: NUMA node, package (socket) and core,
// read from sysfs, and the order in which `lockstep run` hands CPUs to the
// workers of a host (Note [Placement order] in src/base/cpu_topology.cc).
//
// The sysfs root is a parameter so tests can hand in a fake tree. A file
// that is missing or does not parse counts as node 0, package 0, core =
// the CPU's number: a host that exposes nothing keeps CPU-number order.
// Pure functions apart from the reads of sysfs; thread-safe.
#pragma once

#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace lockstep {

inline constexpr std::string_view kSysfsRoot = "/sys";

// Where one CPU sits. `core` is the kernel's core_id, unique only within a
// package; SMT siblings (hyper-threads) share node, package and core.
struct CpuPlace {
  int cpu = 0;
  int node = 0;
  int package = 0;
  int core = 0;
  bool operator==(const CpuPlace&) const = default;
};

// The CPUs of a sysfs cpulist ("0-3,8,10-11\n"); empty for text that does
// not parse.
std::vector<int> parse_cpulist(std::string_view text);

// Node number -> its CPUs, from <node_dir>/node<k>/cpulist (node_dir is
// <sysfs>/devices/system/node); empty when the directory is missing.
std::map<int, std::vector<int>> read_numa_nodes(const std::string& node_dir);

// The place of each CPU of `cpus`, in the order given, read under
// `sysfs_root` (<root>/devices/system/{node,cpu}).
std::vector<CpuPlace> read_cpu_topology(std::span<const int> cpus,
                                        const std::string& sysfs_root = std::string(kSysfsRoot));

// `cpus` sorted by (node, package, core, CPU number): SMT siblings are
// adjacent and each node's CPUs contiguous. A CPU that `topology` does not
// list counts as node 0, package 0, core = its number.
std::vector<int> placement_order(std::span<const int> cpus, std::span<const CpuPlace> topology);

}  // namespace lockstep
