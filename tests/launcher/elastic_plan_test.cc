// The elastic launcher's pure planning and the store protocol's text format.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "launcher/elastic.h"
#include "lockstep/base/error.h"
#include "lockstep/base/host.h"

namespace lockstep::launcher {
namespace {

namespace el = rendezvous::elastic;

std::vector<std::string> ids_in_rank_order(
    const std::vector<std::pair<ElasticMember, el::Assignment>>& plan) {
  std::vector<std::string> out;
  for (const auto& [m, a] : plan) out.push_back(m.id);
  return out;
}

TEST(ElasticPlan, SurvivorsKeepOrderAndRankZeroIsTheLowestSurvivor) {
  // w0 died; w3 is new on host a; hosts ordered by their lowest survivor.
  auto plan = plan_generation({{"w3", "a", {}}, {"w2", "b", 2}, {"w1", "a", 1}, {"w4", "c", {}}});
  EXPECT_EQ(ids_in_rank_order(plan), (std::vector<std::string>{"w1", "w3", "w2", "w4"}));
  const auto& a = plan[0].second;
  EXPECT_EQ(a.rank, 0);
  EXPECT_EQ(a.size, 4);
  EXPECT_EQ(a.local_size, 2);
  EXPECT_EQ(a.cross_size, 3);
  EXPECT_EQ(plan[1].second.local_rank, 1);
  EXPECT_EQ(plan[1].second.cross_rank, 0);
  EXPECT_EQ(plan[2].second.cross_rank, 1);
  EXPECT_EQ(plan[3].second.cross_rank, 2);
  EXPECT_EQ(plan[3].second.local_rank, 0);
}

TEST(ElasticPlan, NewWorkersGoWhereSlotsAreFreeAndNotToCoolingHosts) {
  std::vector<HostSlots> found = {{"a", 2}, {"b", 2}, {"c", 4}};
  std::map<std::string, int> running = {{"a", 2}, {"b", 1}};
  EXPECT_EQ(hosts_for_new_workers(found, running, {"c"}, 5), (std::vector<std::string>{"b"}));
  EXPECT_EQ(hosts_for_new_workers(found, running, {}, 2), (std::vector<std::string>{"b", "c"}));
  EXPECT_TRUE(hosts_for_new_workers(found, running, {}, 0).empty());
}

TEST(ElasticPlan, HostsDroppedOrShrunkByDiscoveryLoseTheirHighestRanks) {
  std::vector<std::pair<int, std::string>> running = {{0, "a"}, {1, "a"}, {2, "b"}, {3, "b"}};
  EXPECT_EQ(workers_to_remove({{"a", 2}}, running), (std::vector<int>{2, 3}));
  EXPECT_EQ(workers_to_remove({{"a", 1}, {"b", 2}}, running), (std::vector<int>{1}));
  EXPECT_TRUE(workers_to_remove({{"a", 2}, {"b", 4}}, running).empty());
  EXPECT_EQ(workers_to_remove({}, running), (std::vector<int>{0, 1, 2, 3}));
}

// Issue 30.2: a script printing `localhost:3` while the job runs on this
// machine's name gave the joiner a host of its own (and asked to remove
// both running workers, at every poll).
TEST(ElasticPlan, DiscoveredLocalhostIsThisMachine) {
  const std::string me = host_name();
  auto found = parse_discovery_output("localhost:2\n127.0.0.1:1\n");
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].host, me);
  EXPECT_EQ(found[0].slots, 3);
  EXPECT_TRUE(workers_to_remove(found, {{0, me}, {1, me}}).empty());
  EXPECT_EQ(hosts_for_new_workers(found, {{me, 2}}, {}, 5), (std::vector<std::string>{me}));
  auto plan = plan_generation({{"w0", me, 0}, {"w1", me, 1}, {"w2", found[0].host, {}}});
  for (const auto& [m, a] : plan) {
    EXPECT_EQ(a.cross_size, 1);
    EXPECT_EQ(a.local_size, 3);
  }
}

// Discovery runs every few seconds; a warning it keeps causing was repeated
// at every poll (12 times in one short job).
TEST(ElasticPlan, ARepeatedDiscoveryWarningIsSaidOnce) {
  ElasticOptions options;
  options.discovery_script = "echo 'a:zero'";
  options.discovery_interval = std::chrono::milliseconds(0);
  ElasticController controller(options);
  ::testing::internal::CaptureStderr();
  for (int i = 0; i < 3; ++i) EXPECT_FALSE(controller.discover());
  std::string said = ::testing::internal::GetCapturedStderr();
  EXPECT_THAT(said, ::testing::HasSubstr("keeping the current hosts"));
  EXPECT_EQ(said.find("keeping the current hosts"), said.rfind("keeping the current hosts"))
      << said;
}

TEST(ElasticPlan, DiscoveryOutputFormats) {
  auto hosts = parse_discovery_output("a:2\nb slots=3\n# comment\nc\n");
  ASSERT_EQ(hosts.size(), 3u);
  EXPECT_EQ(hosts[0].slots, 2);
  EXPECT_EQ(hosts[1].slots, 3);
  EXPECT_EQ(hosts[2].slots, 1);
  EXPECT_THROW(parse_discovery_output("a:zero\n"), InvalidArgument);
}

TEST(ElasticProtocol, AssignmentRoundTripsAndRejectsBadText) {
  el::Assignment a{
      .rank = 3, .size = 4, .local_rank = 1, .local_size = 2, .cross_rank = 1, .cross_size = 2};
  auto b = el::Assignment::decode(a.encode());
  EXPECT_EQ(b.rank, 3);
  EXPECT_EQ(b.cross_size, 2);
  for (const char* bad :
       {"", "1 2 3", "4 4 0 1 0 1", "0 1 0 1 0 1 extra", "x 1 0 1 0 1", "0 1 0 1 -1 1"}) {
    try {
      el::Assignment::decode(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const InvalidArgument& e) {
      EXPECT_THAT(e.what(), ::testing::HasSubstr("assignment"));
    }
  }
  EXPECT_EQ(el::parse_generation("12"), 12);
  EXPECT_THROW(el::parse_generation("12x"), InvalidArgument);
  EXPECT_THROW(el::parse_generation("-1"), InvalidArgument);
  EXPECT_THROW(el::parse_generation(""), InvalidArgument);
}

TEST(ElasticController, HostCoolsDownAfterRepeatedFailures) {
  ElasticOptions options;
  options.host_failure_limit = 2;
  ElasticController c(options);
  EXPECT_FALSE(c.record_failure("a"));
  EXPECT_TRUE(c.cooling_down().empty());
  EXPECT_TRUE(c.record_failure("a"));
  EXPECT_EQ(c.cooling_down(), (std::vector<std::string>{"a"}));
}

}  // namespace
}  // namespace lockstep::launcher
