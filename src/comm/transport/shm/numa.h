// Which NUMA node a rank runs on, and how ranks group by node, for the
// two-level allreduce (Note [Two-level allreduce] in shm_two_level.cc).
//
// A rank's node is the one that holds every CPU it is bound to
// (sched_getaffinity), read from sysfs: <root>/node<k>/cpulist
// (read_numa_nodes in lockstep/base/cpu_topology.h). The root is a
// parameter so tests can hand in a fake directory. Pure functions apart
// from the reads of sysfs and of the affinity; thread-safe.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace lockstep::comm::shm {

inline constexpr std::string_view kSysfsNodes = "/sys/devices/system/node";

// The node holding every CPU of `cpus`, or -1 when there is no such single
// node: the CPUs span nodes, the host lists one node (or none), or `cpus`
// is empty.
int numa_node_of(std::span<const int> cpus, const std::string& sysfs_root);

// numa_node_of for the CPUs this process may run on.
int this_process_numa_node(const std::string& sysfs_root = std::string(kSysfsNodes));

// The number of node groups of ranks whose nodes are `nodes` (rank order):
// G when the ranks form G > 1 contiguous groups of equal size >= 2, each
// on its own node; else 1, with the reason in `why`.
int groups_from_nodes(std::span<const int> nodes, std::string* why);

}  // namespace lockstep::comm::shm
