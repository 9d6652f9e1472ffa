// How a rank finds its NUMA node and how ranks group by node, for the
// two-level allreduce (src/comm/transport/shm/numa.h), on a fake sysfs
// directory: this host has one node, so the real one only shows "none".
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "comm/transport/shm/numa.h"
#include "support/scratch.h"

namespace lockstep::testing {
namespace {

using comm::shm::groups_from_nodes;
using comm::shm::numa_node_of;

// <dir>/node<k>/cpulist for each list, plus files sysfs has that are not nodes.
std::string fake_sysfs(const std::string& name, const std::vector<std::string>& cpulists) {
  const auto dir = scratch_folder("lockstep-numa", name);
  for (size_t k = 0; k < cpulists.size(); ++k) {
    std::filesystem::create_directories(dir / ("node" + std::to_string(k)));
    std::ofstream(dir / ("node" + std::to_string(k)) / "cpulist") << cpulists[k] << "\n";
  }
  std::ofstream(dir / "online") << "0-" << cpulists.size() - 1 << "\n";
  std::filesystem::create_directories(dir / "power");
  return dir.string();
}

TEST(ShmNuma, TheNodeHoldingEveryCpuOfTheRank) {
  // Two sockets with interleaved hyper-threads, as many hosts number them.
  const std::string sys = fake_sysfs("two", {"0-3,8-11", "4-7,12-15"});
  EXPECT_EQ(numa_node_of(std::vector<int>{0, 1}, sys), 0);
  EXPECT_EQ(numa_node_of(std::vector<int>{4, 12}, sys), 1);
  EXPECT_EQ(numa_node_of(std::vector<int>{9}, sys), 0);
  EXPECT_EQ(numa_node_of(std::vector<int>{3, 4}, sys), -1);   // spans both
  EXPECT_EQ(numa_node_of(std::vector<int>{12, 0}, sys), -1);  // spans both
  EXPECT_EQ(numa_node_of(std::vector<int>{}, sys), -1);
  EXPECT_EQ(numa_node_of(std::vector<int>{99}, sys), -1);  // on no node
}

TEST(ShmNuma, OneNodeOrNoSysfsMeansNoGrouping) {
  const std::string one = fake_sysfs("one", {"0-15"});
  EXPECT_EQ(numa_node_of(std::vector<int>{0, 1}, one), -1);
  EXPECT_EQ(numa_node_of(std::vector<int>{0}, "/nonexistent/lockstep/node"), -1);
  // This process: -1 on a one-node host, else a node that exists.
  EXPECT_GE(comm::shm::this_process_numa_node(), -1);
}

TEST(ShmNuma, ContiguousEqualGroupsOnly) {
  std::string why;
  EXPECT_EQ(groups_from_nodes(std::vector<int>{0, 0, 1, 1}, &why), 2);
  EXPECT_EQ(groups_from_nodes(std::vector<int>{1, 1, 1, 0, 0, 0}, &why), 2);  // any node numbers
  EXPECT_EQ(groups_from_nodes(std::vector<int>{0, 0, 1, 1, 2, 2}, &why), 3);
  const std::vector<std::vector<int>> flat = {
      {0, 1, 0, 1},        // interleaved: not contiguous
      {0, 0, 0, 1},        // unequal
      {0, 1},              // groups of one rank
      {0, 0, 0, 0},        // one node
      {0, 0, -1, -1},      // ranks on no single node
      {0, 0, 1, 1, 0, 0},  // node 0 twice
  };
  for (const auto& nodes : flat) {
    why.clear();
    EXPECT_EQ(groups_from_nodes(nodes, &why), 1) << ::testing::PrintToString(nodes);
    EXPECT_FALSE(why.empty());
  }
  groups_from_nodes(std::vector<int>{0, 1, 0, 1}, &why);
  EXPECT_NE(why.find("not contiguous"), std::string::npos) << why;
}

}  // namespace
}  // namespace lockstep::testing
