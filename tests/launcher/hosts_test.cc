// Host lists, hostfiles, rank placement, the remote launch block and the
// mpirun command of --backend mpi.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "launcher/failure_note.h"
#include "launcher/hosts.h"
#include "launcher/mpirun.h"
#include "launcher/remote.h"
#include "lockstep/base/error.h"
#include "lockstep/base/host.h"
#include "lockstep/base/terminate.h"

namespace lockstep::launcher {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(HostList, ParsesHostsAndSlots) {
  auto hosts = parse_host_list("node1:2,node2,10.0.0.3:4");
  ASSERT_EQ(hosts.size(), 3u);
  EXPECT_EQ(hosts[0].host, "node1");
  EXPECT_EQ(hosts[0].slots, 2);
  EXPECT_EQ(hosts[1].host, "node2");
  EXPECT_EQ(hosts[1].slots, 1);
  EXPECT_EQ(hosts[2].host, "10.0.0.3");
  EXPECT_EQ(hosts[2].slots, 4);
}

TEST(HostList, RejectsBadEntriesNamingThem) {
  for (const char* bad : {"", "a:0", "a:x", "a:2,,b", "a;rm -rf:2", "-oProxy:1"}) {
    try {
      parse_host_list(bad);
      FAIL() << "accepted '" << bad << "'";
    } catch (const InvalidArgument& e) {
      EXPECT_THAT(e.what(), HasSubstr("-H")) << bad;
    }
  }
}

TEST(Hostfile, ReadsMpirunSyntaxWithComments) {
  auto hosts = parse_hostfile_text(
      "# cluster\nnode1 slots=2\n\n  node2 slots = 3  # big\nnode3:2\nnode4\n", "hf");
  ASSERT_EQ(hosts.size(), 4u);
  EXPECT_EQ(hosts[0].slots, 2);
  EXPECT_EQ(hosts[1].host, "node2");
  EXPECT_EQ(hosts[1].slots, 3);
  EXPECT_EQ(hosts[2].slots, 2);
  EXPECT_EQ(hosts[3].slots, 1);
}

TEST(Hostfile, ErrorsNameFileAndLine) {
  try {
    parse_hostfile_text("node1 slots=2\nnode2 cpus=4\n", "my.hosts");
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("my.hosts:2"));
  }
  EXPECT_THROW(parse_hostfile_text("# only a comment\n", "empty"), InvalidArgument);
  EXPECT_THROW(read_hostfile("/nonexistent/hostfile"), InvalidArgument);
}

TEST(Placement, FillsHostsInOrderAndNumbersLocalAndCrossRanks) {
  auto p = place_ranks({{"a", 2}, {"b", 3}, {"c", 2}}, 4);
  ASSERT_EQ(p.size(), 4u);
  EXPECT_EQ(p[0].host, "a");
  EXPECT_EQ(p[1].local_rank, 1);
  EXPECT_EQ(p[2].host, "b");
  EXPECT_EQ(p[2].local_rank, 0);
  EXPECT_EQ(p[3].local_rank, 1);
  EXPECT_EQ(p[0].local_size, 2);
  EXPECT_EQ(p[3].local_size, 2);                       // only 2 of b's 3 slots are used
  for (const auto& r : p) EXPECT_EQ(r.cross_size, 2);  // c gets no rank
  EXPECT_EQ(p[3].cross_rank, 1);
  EXPECT_FALSE(p[0].local);
}

TEST(Placement, MergesRepeatedHostsAndRejectsTooFewSlots) {
  auto p = place_ranks({{"a", 1}, {"b", 1}, {"a", 1}}, 3);
  EXPECT_EQ(p[1].host, "a");
  EXPECT_EQ(p[1].local_rank, 1);
  EXPECT_EQ(p[2].host, "b");
  EXPECT_EQ(p[2].cross_rank, 1);
  try {
    place_ranks({{"a", 2}, {"b", 1}}, 4);
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("3 slot"));
  }
}

TEST(Placement, LocalHostNamesAreRecognised) {
  EXPECT_TRUE(is_local_host("localhost"));
  EXPECT_TRUE(is_local_host("127.0.0.1"));
  EXPECT_FALSE(is_local_host("ns-that-is-not-this-host"));
  EXPECT_EQ(choose_rendezvous_host("", place_ranks({{"localhost", 2}}, 2)), "127.0.0.1");
  EXPECT_EQ(choose_rendezvous_host("10.1.2.3", place_ranks({{"x", 2}}, 2)), "10.1.2.3");
  EXPECT_THROW(choose_rendezvous_host("", place_ranks({{"no-such-host.invalid", 1}}, 1)),
               InvalidArgument);
}

// Issue 30.2: `localhost` beside this machine's name was a second host (its
// own local ranks, its own shared-memory group).
TEST(Placement, ThisMachineIsOneHostByAnyName) {
  const std::string me = host_name();
  EXPECT_TRUE(is_local_host(me));
  EXPECT_TRUE(is_local_host("127.0.1.1"));
  EXPECT_TRUE(is_local_host("::1"));
  auto hosts = parse_host_list("localhost:1,127.0.0.1:1," + me + ":1");
  for (const auto& h : hosts) EXPECT_EQ(h.host, me);
  auto p = place_ranks(hosts, 3);
  for (const auto& r : p) {
    EXPECT_EQ(r.host, me);
    EXPECT_EQ(r.cross_size, 1);
    EXPECT_EQ(r.local_size, 3);
    EXPECT_TRUE(r.local);
  }
  EXPECT_EQ(parse_hostfile_text("localhost slots=2\n", "f")[0].host, me);
  EXPECT_EQ(parse_host_list("other:1")[0].host, "other");
}

TEST(RemoteCommand, SubstitutesOrAppendsTheHost) {
  EXPECT_THAT(remote_command("ip netns exec {host}", "ns1", "/usr/bin/lockstep"),
              ElementsAre("ip", "netns", "exec", "ns1", "/usr/bin/lockstep", "remote-worker"));
  EXPECT_THAT(remote_command("ssh -o 'BatchMode=yes' -p 22", "node2", "/opt/l/lockstep"),
              ElementsAre("ssh", "-o", "BatchMode=yes", "-p", "22", "node2", "/opt/l/lockstep",
                          "remote-worker"));
  EXPECT_THROW(remote_command("  ", "n", "/usr/bin/lockstep"), InvalidArgument);
  EXPECT_THROW(remote_command("ssh 'unbalanced", "n", "/usr/bin/lockstep"), InvalidArgument);
  EXPECT_THROW(remote_command("ssh", "n", "/my dir/lockstep"), InvalidArgument);
}

LaunchBlock sample_block() {
  LaunchBlock b;
  b.host = "ns2";
  b.rank = 3;
  b.cwd = "/work dir";
  b.start_timeout = std::chrono::seconds(45);
  b.argv = {"/bin/prog", "arg with spaces", "line\nbreak", "", "end 0"};
  b.env = {{"LOCKSTEP_SECRET", "abcd"}, {"X", "a=b\n"}};
  return b;
}

TEST(LaunchBlock, RoundTripsArbitraryBytes) {
  std::string bytes = encode_launch_block(sample_block());
  EXPECT_EQ(launch_block_size(bytes), bytes.size());
  LaunchBlock b = decode_launch_block(bytes);
  EXPECT_EQ(b.host, "ns2");
  EXPECT_EQ(b.rank, 3);
  EXPECT_EQ(b.cwd, "/work dir");
  EXPECT_EQ(b.start_timeout.count(), 45);
  EXPECT_EQ(b.argv, sample_block().argv);
  EXPECT_EQ(b.env, sample_block().env);
}

TEST(LaunchBlock, SizeIsUnknownUntilTheHeaderArrives) {
  std::string bytes = encode_launch_block(sample_block());
  EXPECT_EQ(launch_block_size(bytes.substr(0, 5)), 0u);
  EXPECT_EQ(launch_block_size(bytes.substr(0, bytes.find('\n', 20))), 0u);
  EXPECT_THROW(launch_block_size("GET / HTTP/1.1\r\n"), Error);
}

TEST(LaunchBlock, RejectsEveryTruncationAndCorruption) {
  std::string bytes = encode_launch_block(sample_block());
  for (size_t cut = 0; cut < bytes.size(); ++cut)
    EXPECT_THROW(decode_launch_block(bytes.substr(0, cut)), Error) << "cut at " << cut;
  std::string unknown = bytes;
  unknown.replace(unknown.find("cwd "), 4, "xyz ");
  EXPECT_THROW(decode_launch_block(unknown), Error);
  std::string bad_rank = encode_launch_block(sample_block());
  bad_rank.replace(bad_rank.find("rank 1\n3"), 8, "rank 1\nx");
  EXPECT_THROW(decode_launch_block(bad_rank), Error);
}

}  // namespace
}  // namespace lockstep::launcher

namespace lockstep::launcher {
namespace {

TEST(MpirunCommand, MapsHostsEnvironmentAndRemoteAgent) {
  LaunchSpec spec;
  spec.num_proc = 4;
  spec.prefix_output = true;
  spec.hosts = {{"node1", 2}, {"node2", 2}};
  spec.remote_exec = "ssh -p 2222";
  spec.env = {{"LOCKSTEP_BACKEND", "mpi"}, {"MY_FLAG", "1"}};
  spec.program = {"/bin/prog", "--x"};
  auto argv = mpirun_command(spec, /*as_root=*/true);
  std::string line = fmt::format("{}", fmt::join(argv, " "));
  EXPECT_THAT(line, ::testing::StartsWith("mpirun -np 4 --oversubscribe --allow-run-as-root "
                                          "--tag-output --host node1:2,node2:2 --mca "
                                          "plm_rsh_agent ssh -p 2222"));
  EXPECT_THAT(line, HasSubstr("-x LOCKSTEP_BACKEND"));
  EXPECT_THAT(line, HasSubstr("-x MY_FLAG"));
  EXPECT_THAT(line, ::testing::EndsWith("/bin/prog --x"));
  EXPECT_STREQ(std::getenv("MY_FLAG"), "1");  // exported for mpirun's -x NAME
  spec.remote_exec = "ip netns exec {host}";
  EXPECT_THROW(mpirun_command(spec, false), InvalidArgument);
}

TEST(FailureNote, TheTerminateHandlersLineIsFoundAcrossReadsAndSummarised) {
  std::string line = uncaught_error_line("lockstep::MismatchError", "allreduce 'w': 3 vs 4", 1);
  EXPECT_EQ(line, "lockstep: uncaught lockstep::MismatchError on rank 1: allreduce 'w': 3 vs 4");
  FailureNoteScanner scanner;
  std::string stream = "training...\n" + line + "\nmore\n";
  for (size_t at = 0; at < stream.size(); at += 5)
    scanner.feed(std::string_view(stream).substr(at, 5));
  EXPECT_EQ(scanner.note(), "MismatchError: allreduce 'w': 3 vs 4");
  EXPECT_EQ(uncaught_error_summary(uncaught_error_line("std::out_of_range", "x", -1)),
            "out_of_range: x");
  EXPECT_EQ(uncaught_error_summary("lockstep: something else"), "");
}

TEST(FailureNote, OverlongOrUnfinishedLinesAreNotNotes) {
  FailureNoteScanner scanner;
  scanner.feed(std::string(kUncaughtErrorMarker) +
               "X: " + std::string(FailureNoteScanner::kMaxLineBytes, 'a') + "\n");
  scanner.feed(std::string(kUncaughtErrorMarker) + "Y: no newline yet");
  EXPECT_EQ(scanner.note(), "");
}

}  // namespace
}  // namespace lockstep::launcher
