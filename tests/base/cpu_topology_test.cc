// The CPU topology reader and the order `lockstep run` places workers in
// (lockstep/base/cpu_topology.h, Note [Placement order]), on fake sysfs
// trees: the hosts these tests run on have one node and no SMT.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "lockstep/base/cpu_topology.h"
#include "support/fake_sysfs.h"

namespace lockstep::testing {
namespace {

TEST(CpuTopology, ParsesCpulists) {
  EXPECT_EQ(parse_cpulist("0-3\n"), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(parse_cpulist("0,2-3,8"), (std::vector<int>{0, 2, 3, 8}));
  EXPECT_EQ(parse_cpulist("5"), (std::vector<int>{5}));
  EXPECT_EQ(parse_cpulist(""), (std::vector<int>{}));
  EXPECT_EQ(parse_cpulist("3-1"), (std::vector<int>{}));
  EXPECT_EQ(parse_cpulist("0-x"), (std::vector<int>{}));
  EXPECT_EQ(parse_cpulist("0,,1"), (std::vector<int>{}));
}

TEST(CpuTopology, ReadsNodePackageAndCoreOfEachCpu) {
  const std::vector<CpuPlace> host = interleaved_two_socket(16);
  const std::string sys = fake_sysfs_tree("read", host);
  EXPECT_EQ(read_cpu_topology(cpu_range(64), sys), host);
  // Only the CPUs asked for, in the order asked.
  const std::vector<int> some{48, 3};
  EXPECT_EQ(read_cpu_topology(some, sys), (std::vector<CpuPlace>{host[48], host[3]}));
  const auto nodes = read_numa_nodes(sys + "/devices/system/node");
  ASSERT_EQ(nodes.size(), 2u);
  EXPECT_EQ(nodes.at(0).size(), 32u);
  EXPECT_EQ(nodes.at(1).front(), 16);
}

// A host without the files (or a CPU that has none) keeps CPU-number order.
TEST(CpuTopology, MissingFilesMeanNodeZeroPackageZeroCoreTheCpu) {
  const std::vector<int> cpus{0, 1, 2, 5, 7};
  const auto places = read_cpu_topology(cpus, "/nonexistent/lockstep/sys");
  ASSERT_EQ(places.size(), cpus.size());
  for (size_t i = 0; i < cpus.size(); ++i) EXPECT_EQ(places[i], (CpuPlace{cpus[i], 0, 0, cpus[i]}));
  EXPECT_EQ(placement_order(cpus, places), cpus);
  EXPECT_EQ(placement_order(cpus, {}), cpus);
  // The node directory exists, the per-CPU topology files do not.
  const std::string sys = fake_sysfs_tree("partial", interleaved_two_socket(2));
  std::filesystem::remove_all(sys + "/devices/system/cpu");
  EXPECT_EQ(read_cpu_topology(std::vector<int>{2}, sys), (std::vector<CpuPlace>{{2, 1, 0, 2}}));
}

TEST(CpuTopology, OneNodeWithoutSmtKeepsCpuNumberOrder) {
  std::vector<CpuPlace> host;
  for (int c = 0; c < 8; ++c) host.push_back(CpuPlace{c, 0, 0, c});
  const std::string sys = fake_sysfs_tree("flat", host);
  EXPECT_EQ(placement_order(cpu_range(8), read_cpu_topology(cpu_range(8), sys)), cpu_range(8));
}

// Regression for issue 28: on the interleaved host, SMT siblings come next
// to each other and each node's CPUs together.
TEST(CpuTopology, InterleavedSmtHostOrdersByNodeThenCore) {
  const std::vector<CpuPlace> host = interleaved_two_socket(16);
  const std::vector<int> order = placement_order(cpu_range(64), host);
  ASSERT_EQ(order.size(), 64u);
  for (int i = 0; i < 64; i += 2) {
    const int first = i / 2;  // node 0's cores hold CPUs 0..15, node 1's 16..31
    EXPECT_EQ(order[i], first) << i;
    EXPECT_EQ(order[i + 1], first + 32) << i;
  }
  // A subset (a cpuset) keeps the same rule.
  EXPECT_EQ(placement_order(std::vector<int>{48, 1, 16, 33, 0}, host),
            (std::vector<int>{0, 1, 33, 16, 48}));
}

// The real /sys against another source: /proc/cpuinfo's "physical id" and
// "core id" of each processor (x86 lists them; skipped elsewhere).
TEST(CpuTopology, ThisHostAgreesWithProcCpuinfo) {
  std::ifstream in("/proc/cpuinfo");
  std::vector<CpuPlace> expected;
  for (std::string line; std::getline(in, line);) {
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    const int value = std::atoi(line.c_str() + colon + 1);
    if (line.starts_with("processor"))
      expected.push_back(CpuPlace{value, 0, -1, -1});
    else if (line.starts_with("physical id") && !expected.empty())
      expected.back().package = value;
    else if (line.starts_with("core id") && !expected.empty())
      expected.back().core = value;
  }
  if (expected.empty() || expected.front().core < 0) GTEST_SKIP() << "no core ids in /proc/cpuinfo";
  std::vector<int> cpus;
  for (const CpuPlace& p : expected) cpus.push_back(p.cpu);
  const std::vector<CpuPlace> read = read_cpu_topology(cpus);
  ASSERT_EQ(read.size(), expected.size());
  for (size_t i = 0; i < read.size(); ++i) {
    EXPECT_EQ(read[i].package, expected[i].package) << "cpu " << cpus[i];
    EXPECT_EQ(read[i].core, expected[i].core) << "cpu " << cpus[i];
  }
}

}  // namespace
}  // namespace lockstep::testing
