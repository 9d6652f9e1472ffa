// End-to-end behaviour of `lockstep run`: exit codes, failure teardown,
// signal forwarding, the worker environment, output prefixing, flag errors and
// shared-memory cleanup.
#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "launcher/launch_helper.h"

namespace lockstep::testing {
namespace {

using Args = std::vector<std::string>;

Args sh_job(int np, const std::string& script, Args flags = {}) {
  Args args{"run", "-np", std::to_string(np)};
  args.insert(args.end(), flags.begin(), flags.end());
  args.insert(args.end(), {"--", "/bin/sh", "-c", script});
  return args;
}

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

std::string describe(const Finished& f) {
  return "status " + std::to_string(f.status) + "\n--- stdout\n" + f.out + "\n--- stderr\n" + f.err;
}

std::vector<std::string> shm_entries(const std::string& prefix) {
  std::vector<std::string> out;
  for (const auto& entry : std::filesystem::directory_iterator("/dev/shm")) {
    std::string name = entry.path().filename();
    if (name.rfind(prefix, 0) == 0) out.push_back(name);
  }
  return out;
}

TEST(LauncherTest, ExitsZeroWhenEveryWorkerSucceeds) {
  Finished f = run_lockstep(sh_job(3, "exit 0"));
  EXPECT_EQ(f.status, 0) << describe(f);
}

TEST(LauncherTest, NonZeroExitIsPropagatedNamingTheRankAndStopsTheOthers) {
  Finished f = run_lockstep(sh_job(3, "if [ \"$LOCKSTEP_RANK\" = 2 ]; then exit 3; fi; sleep 60"));
  EXPECT_EQ(f.status, 3) << describe(f);
  EXPECT_TRUE(contains(f.err, "lockstep run: rank 2 (pid ")) << describe(f);
  EXPECT_TRUE(contains(f.err, "exited with code 3")) << describe(f);
  EXPECT_LT(f.seconds, 5.0) << describe(f);
}

TEST(LauncherTest, WorkerKilledBySigkillGives137AndTheJobIsDownWithinFiveSeconds) {
  Finished f =
      run_lockstep(sh_job(3, "if [ \"$LOCKSTEP_RANK\" = 1 ]; then kill -9 $$; fi; sleep 60"));
  EXPECT_EQ(f.status, 137) << describe(f);
  EXPECT_TRUE(contains(f.err, "rank 1 (pid ")) << describe(f);
  EXPECT_TRUE(contains(f.err, "was killed by signal 9 (SIGKILL)")) << describe(f);
  EXPECT_LT(f.seconds, 5.0) << describe(f);
}

TEST(LauncherTest, WorkersIgnoringSigtermAreKilledWithinFiveSeconds) {
  // Rank 0 fails only once rank 1 ignores SIGTERM; the fifo orders the two.
  std::string fifo = ::testing::TempDir() + "lockstep_fifo_" + std::to_string(::getpid());
  std::filesystem::remove(fifo);
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  Finished f = run_lockstep(sh_job(2, "if [ \"$LOCKSTEP_RANK\" = 0 ]; then read x < " + fifo +
                                          "; exit 1; fi; "
                                          "trap '' TERM; echo armed > " +
                                          fifo + "; sleep 60"));
  std::filesystem::remove(fifo);
  EXPECT_EQ(f.status, 1) << describe(f);
  EXPECT_TRUE(contains(f.err, "sending SIGKILL")) << describe(f);
  EXPECT_LT(f.seconds, 5.0) << describe(f);
}

class SignalForwardingTest : public ::testing::TestWithParam<int> {};

TEST_P(SignalForwardingTest, EveryWorkerReceivesTheSignal) {
  int sig = GetParam();
  std::string dir = ::testing::TempDir() + "lockstep_signal_" + std::to_string(::getpid()) + "_" +
                    std::to_string(sig);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  Launch l = start_lockstep(
      sh_job(2, "trap 'echo got > " + dir +
                    "/rank$LOCKSTEP_RANK; exit 0' TERM INT; echo ready; sleep 60 & wait"));
  ASSERT_TRUE(wait_for_output(l, "ready", 2)) << l.out << l.err;
  ASSERT_EQ(::kill(l.pid, sig), 0);
  Finished f = finish(l);
  EXPECT_EQ(f.status, 128 + sig) << describe(f);
  EXPECT_TRUE(contains(f.err, "forwarding it to the workers")) << describe(f);
  EXPECT_TRUE(std::filesystem::exists(dir + "/rank0")) << describe(f);
  EXPECT_TRUE(std::filesystem::exists(dir + "/rank1")) << describe(f);
  EXPECT_LT(f.seconds, 30.0);
  std::filesystem::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(TermAndInt, SignalForwardingTest, ::testing::Values(SIGTERM, SIGINT),
                         [](const auto& info) { return std::string(sigabbrev_np(info.param)); });

TEST(LauncherTest, SecondInterruptKillsWorkersThatIgnoreTheFirst) {
  Launch l = start_lockstep(sh_job(2, "trap '' INT TERM; echo ready; sleep 60"));
  ASSERT_TRUE(wait_for_output(l, "ready", 2)) << l.out << l.err;
  ASSERT_EQ(::kill(l.pid, SIGINT), 0);
  ASSERT_TRUE(wait_for_error_output(l, "forwarding it to the workers")) << l.err;
  ASSERT_EQ(::kill(l.pid, SIGINT), 0);
  Finished f = finish(l);
  EXPECT_EQ(f.status, 130) << describe(f);
  EXPECT_TRUE(contains(f.err, "received SIGINT again; killing the workers")) << describe(f);
  EXPECT_LT(f.seconds, 5.0) << describe(f);
}

TEST(LauncherTest, EveryRankGetsItsIdentity) {
  Finished f = run_lockstep(
      sh_job(3,
             "echo \"$LOCKSTEP_RANK $LOCKSTEP_SIZE $LOCKSTEP_LOCAL_RANK $LOCKSTEP_LOCAL_SIZE "
             "$LOCKSTEP_CROSS_RANK $LOCKSTEP_CROSS_SIZE $LOCKSTEP_JOB_ID $LOCKSTEP_RENDEZVOUS "
             "$LOCKSTEP_SECRET\""));
  ASSERT_EQ(f.status, 0) << describe(f);
  std::map<int, std::vector<std::string>> by_rank;
  std::istringstream lines(f.out);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream fields(line.substr(line.find(": ") + 2));
    std::vector<std::string> v;
    for (std::string s; fields >> s;) v.push_back(s);
    ASSERT_EQ(v.size(), 9u) << line;
    EXPECT_EQ(line.substr(0, line.find(": ")), "[" + v[0] + "]");
    by_rank[std::stoi(v[0])] = v;
  }
  ASSERT_EQ(by_rank.size(), 3u) << describe(f);
  for (auto& [rank, v] : by_rank) {
    EXPECT_EQ(v[1], "3");
    EXPECT_EQ(v[2], std::to_string(rank));
    EXPECT_EQ(v[3], "3");
    EXPECT_EQ(v[4], "0");
    EXPECT_EQ(v[5], "1");
    EXPECT_EQ(v[6], by_rank[0][6]) << "one job id for the whole job";
    EXPECT_TRUE(v[6].find_first_not_of("0123456789abcdefghijklmnopqrstuvwxyz") ==
                std::string::npos);
    EXPECT_FALSE(v[6].empty());
    EXPECT_EQ(v[7].rfind("127.0.0.1:", 0), 0u) << v[7];
    EXPECT_EQ(v[8].size(), 64u);
    EXPECT_TRUE(v[8].find_first_not_of("0123456789abcdef") == std::string::npos);
    EXPECT_EQ(v[8], by_rank[0][8]);
    EXPECT_FALSE(contains(f.err, v[8])) << "the launcher must never print the secret";
  }
}

TEST(LauncherTest, EachJobGetsAFreshIdAndSecret) {
  Finished a = run_lockstep(sh_job(1, "echo $LOCKSTEP_JOB_ID $LOCKSTEP_SECRET"));
  Finished b = run_lockstep(sh_job(1, "echo $LOCKSTEP_JOB_ID $LOCKSTEP_SECRET"));
  ASSERT_EQ(a.status, 0);
  ASSERT_EQ(b.status, 0);
  EXPECT_NE(a.out, b.out);
}

TEST(LauncherTest, KnobFlagsAndExtraEnvironmentReachTheWorkers) {
  ::setenv("LOCKSTEP_TEST_PASSTHROUGH", "from-launcher", 1);
  ::setenv("PASS_ME", "passed", 1);
  Finished f = run_lockstep(sh_job(
      1,
      "echo \"$LOCKSTEP_BACKEND $LOCKSTEP_TIMEOUT $LOCKSTEP_TIMELINE $LOCKSTEP_BIND_TO "
      "$LOCKSTEP_LOG_LEVEL $LOCKSTEP_INTRA_OP_THREADS $FOO $PASS_ME\"",
      {"--backend", "gloo", "--timeout", "7", "--timeline", "/tmp/t.json", "--bind-to", "core",
       "--log-level", "debug", "--threads-per-worker", "3", "-x", "FOO=a=b", "--env", "PASS_ME"}));
  ASSERT_EQ(f.status, 0) << describe(f);
  EXPECT_EQ(f.out, "gloo 7 /tmp/t.json core debug 3 a=b passed\n") << describe(f);
  Finished a =
      run_lockstep(sh_job(1, "echo $LOCKSTEP_INTRA_OP_THREADS", {"--threads-per-worker", "auto"}));
  EXPECT_EQ(a.out, "auto\n") << describe(a);
}

// The lines of `text` that start with `prefix`, in order.
std::string lines_with_prefix(const std::string& text, const std::string& prefix) {
  std::string out;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);)
    if (line.rfind(prefix, 0) == 0) out += line + "\n";
  return out;
}

TEST(LauncherTest, OutputLinesArePrefixedWithTheRankAndPartialLinesFlushed) {
  Finished f = run_lockstep(sh_job(2, "printf 'one\\ntwo\\npartial'; echo oops >&2"));
  ASSERT_EQ(f.status, 0) << describe(f);
  EXPECT_TRUE(f.out.ends_with("\n")) << describe(f);
  for (std::string r : {"0", "1"}) {
    std::string p = "[" + r + "]: ";
    EXPECT_EQ(lines_with_prefix(f.out, p), p + "one\n" + p + "two\n" + p + "partial\n")
        << describe(f);
    EXPECT_EQ(lines_with_prefix(f.err, p), p + "oops\n") << describe(f);
  }
}

TEST(LauncherTest, NoPrefixOutputPassesBytesThrough) {
  Finished f = run_lockstep(sh_job(2, "printf 'raw\\001\\377'", {"--no-prefix-output"}));
  ASSERT_EQ(f.status, 0) << describe(f);
  EXPECT_EQ(f.out, std::string("raw\001\377raw\001\377"));
}

TEST(LauncherTest, SingleWorkerOutputIsNotPrefixedByDefault) {
  Finished f = run_lockstep(sh_job(1, "echo hello"));
  EXPECT_EQ(f.out, "hello\n") << describe(f);
  Finished g = run_lockstep(sh_job(1, "echo hello", {"--prefix-output"}));
  EXPECT_EQ(g.out, "[0]: hello\n") << describe(g);
}

TEST(LauncherTest, LargeOutputIsNotLost) {
  Finished f =
      run_lockstep(sh_job(2, "i=0; while [ $i -lt 5000 ]; do echo line$i; i=$((i+1)); done"));
  ASSERT_EQ(f.status, 0) << describe(f);
  std::istringstream lines(f.out);
  int count = 0;
  for (std::string line; std::getline(lines, line);) ++count;
  EXPECT_EQ(count, 10000);
  EXPECT_TRUE(contains(f.out, "[1]: line4999\n"));
}

TEST(LauncherTest, BadUsageExitsTwoWithAMessage) {
  for (const Args& args : std::vector<Args>{
           {"run", "-np", "2", "--bogus", "--", "true"},
           {"run", "-np", "0", "--", "true"},
           {"run", "-np", "2"},
           {"run", "-np", "2", "--"},
           {"run", "--", "true"},
           {"run", "-np", "two", "--", "true"},
           {"run", "-np", "2", "--backend", "carrier-pigeon", "--", "true"},
           {"run", "-np", "2", "--bind-to", "socket", "--", "true"},
           {"run", "-np", "2", "--timeout", "-1", "--", "true"},
           {"run", "-np", "2", "--threads-per-worker", "0", "--", "true"},
           {"run", "-np", "2", "--threads-per-worker", "many", "--", "true"},
           {"run", "-np", "2", "-x", "NOEQUALS_AND_UNSET_1234", "--", "true"},
           {"run", "-np", "2", "-x", "LOCKSTEP_TYPO=1", "--", "true"},
           {"run", "-np", "2", "-x", "LOCKSTEP_RANK=5", "--", "true"},
       }) {
    Finished f = run_lockstep(args);
    std::string cmd;
    for (const auto& a : args) cmd += a + " ";
    EXPECT_EQ(f.status, 2) << cmd << describe(f);
    EXPECT_TRUE(contains(f.err, "lockstep run: ")) << cmd << describe(f);
  }
}

// issue 39 item 7: a misspelt knob names the one meant.
TEST(LauncherTest, MisspeltKnobInEnvFlagNamesTheNearestKnob) {
  Finished f = run_lockstep({"run", "-np", "1", "-x", "LOCKSTEP_FUSION_TRESHOLD=1", "--", "true"});
  EXPECT_EQ(f.status, 2) << describe(f);
  EXPECT_TRUE(contains(f.err,
                       "-x LOCKSTEP_FUSION_TRESHOLD: unknown knob (did you mean "
                       "LOCKSTEP_FUSION_THRESHOLD?)"))
      << describe(f);
  Finished far = run_lockstep({"run", "-np", "1", "-x", "LOCKSTEP_ZZZZZZZZZZZZ=1", "--", "true"});
  EXPECT_EQ(far.status, 2) << describe(far);
  EXPECT_FALSE(contains(far.err, "did you mean")) << describe(far);
}

// issue 39 item 7: --backend nccl on a build without NCCL started the job
// (rc 0 with /bin/true). Every backend the knob accepts but this build lacks
// (lockstep config lists the built ones) is refused before a worker starts.
TEST(LauncherTest, BackendThisBuildLacksIsRefusedBeforeAnyWorkerStarts) {
  Finished config = run_lockstep({"config"});
  const auto line = config.out.find("LOCKSTEP_BACKEND ");
  ASSERT_NE(line, std::string::npos) << describe(config);
  const std::string built = config.out.substr(line, config.out.find('\n', line) - line);
  int refused = 0;
  for (std::string backend : {"nccl", "mpi"}) {
    if (contains(built, "|" + backend)) continue;
    const std::string marker = ::testing::TempDir() + "/started-" + backend;
    std::remove(marker.c_str());
    Finished f = run_lockstep(
        {"run", "-np", "2", "--backend", backend, "--", "/bin/sh", "-c", "touch " + marker});
    EXPECT_EQ(f.status, 2) << backend << describe(f);
    EXPECT_TRUE(contains(
        f.err, "lockstep run: backend " + backend + " is not built into this lockstep (it has: "))
        << describe(f);
    if (backend == "nccl") {
      EXPECT_TRUE(contains(f.err, "scripts/setup.sh --gpu")) << describe(f);
    }
    EXPECT_NE(::access(marker.c_str(), F_OK), 0) << backend << ": a worker started";
    ++refused;
  }
  if (refused == 0) GTEST_SKIP() << "this build has both nccl and mpi";
}

TEST(LauncherTest, HelpDocumentsEveryFlag) {
  Finished f = run_lockstep({"run", "--help"});
  EXPECT_EQ(f.status, 0);
  for (const char* flag : {"-np", "--num-proc", "--prefix-output", "--no-prefix-output",
                           "--backend", "--timeout", "--timeline", "--bind-to",
                           "--threads-per-worker", "-x", "--env", "--log-level", "--verbose"})
    EXPECT_TRUE(contains(f.out, flag)) << flag << "\n" << f.out;
}

TEST(LauncherTest, MissingProgramIsReported) {
  Finished f = run_lockstep({"run", "-np", "2", "--", "/nonexistent/lockstep-no-such-program"});
  EXPECT_EQ(f.status, 127) << describe(f);
  EXPECT_TRUE(contains(f.err, "lockstep-no-such-program")) << describe(f);
}

TEST(LauncherTest, ProgramMayFollowTheFlagsWithoutSeparator) {
  Finished f = run_lockstep({"run", "-np", "2", "/bin/sh", "-c", "echo $LOCKSTEP_RANK"});
  EXPECT_EQ(f.status, 0) << describe(f);
  EXPECT_TRUE(contains(f.out, "[1]: 1\n")) << describe(f);
}

// Issue 16.1: without "--" the program's own arguments were rewritten
// (-np became --num-proc) or swallowed by -x.
TEST(LauncherTest, ProgramArgumentsThatLookLikeLauncherFlagsReachTheProgramUntouched) {
  Finished f = run_lockstep({"run", "-np", "2", "/bin/echo", "-np", "5", "--verbose", "-x", "FOO=1",
                             "--", "--timeout", "0", "-np=3"});
  EXPECT_EQ(f.status, 0) << describe(f);
  EXPECT_TRUE(contains(f.out, "[0]: -np 5 --verbose -x FOO=1 -- --timeout 0 -np=3\n"))
      << describe(f);
  EXPECT_TRUE(contains(f.out, "[1]: -np 5 --verbose -x FOO=1 -- --timeout 0 -np=3\n"))
      << describe(f);
  EXPECT_FALSE(contains(f.err, "job ")) << "--verbose reached the launcher\n" << describe(f);
}

TEST(LauncherTest, EnvFlagTakesOneValueAndNeverSwallowsTheProgram) {
  Finished f = run_lockstep(
      {"run", "-np", "2", "-x", "FOO=1", "-x", "BAR=2", "/bin/sh", "-c", "echo $FOO$BAR"});
  EXPECT_EQ(f.status, 0) << describe(f);
  EXPECT_TRUE(contains(f.out, "[1]: 12\n")) << describe(f);
}

// Issue 15.8: every bad value names the flag and what would be accepted.
TEST(LauncherTest, BadValuesNameTheFlagAndTheValidRange) {
  struct Case {
    Args args;
    std::string expected;
  };
  for (const Case& c : std::vector<Case>{
           {{"run", "-np", "abc", "true"}, "-np 'abc': expected a whole number of at least 1"},
           {{"run", "-np", "0", "true"}, "-np '0': expected a whole number of at least 1"},
           {{"run", "-np", "2", "--timeout", "0", "true"},
            "--timeout '0': expected a number of seconds greater than 0 and at most 604800"},
           {{"run", "-np", "2", "--timeout", "abc", "true"}, "--timeout 'abc': expected a number"},
           {{"run", "-np", "2", "--start-timeout", "-3", "true"},
            "--start-timeout '-3': expected a whole number from 1 to 86400"},
           {{"run", "-np", "2", "--min-np", "x", "true"}, "--min-np 'x': expected a whole number"},
           {{"run", "-np", "2", "--discovery-interval", "0", "--min-np", "1", "true"},
            "--discovery-interval '0'"},
       }) {
    Finished f = run_lockstep(c.args);
    EXPECT_EQ(f.status, 2) << describe(f);
    EXPECT_TRUE(contains(f.err, "lockstep run: " + c.expected)) << describe(f);
  }
}

// Issue 16.3: -np 99999 forked thousands of workers and failed after a minute.
TEST(LauncherTest, NpBeyondWhatThisHostCanRunFailsBeforeStartingAnyWorker) {
  Finished f = run_lockstep({"run", "-np", "99999", "/bin/true"});
  EXPECT_EQ(f.status, 2) << describe(f);
  EXPECT_TRUE(contains(f.err, "-np 99999: at most ")) << describe(f);
  EXPECT_EQ(f.err.find("lockstep run: lockstep run:"), std::string::npos) << describe(f);
  EXPECT_LT(f.seconds, 5.0) << describe(f);
}

// Issue 15.8: "execve failed for the worker program", naming neither.
TEST(LauncherTest, ProgramThatCannotBeExecutedIsNamedWithTheReason) {
  std::string dir = ::testing::TempDir() + "lockstep_noexec_" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  std::string text = dir + "/not-elf";
  { std::ofstream(text) << "plain text\n"; }
  std::filesystem::permissions(text, std::filesystem::perms::owner_all);
  Finished d = run_lockstep({"run", "-np", "2", dir});
  EXPECT_EQ(d.status, 126) << describe(d);
  EXPECT_TRUE(contains(
      d.err, "cannot execute the program '" + dir + "': Permission denied (it is a directory)"))
      << describe(d);
  Finished t = run_lockstep({"run", "-np", "2", text});
  EXPECT_EQ(t.status, 126) << describe(t);
  EXPECT_TRUE(contains(t.err, "cannot execute the program '" + text + "': Exec format error"))
      << describe(t);
  std::filesystem::remove_all(dir);
}

// Issue 16.2: a launcher started in the background by a script inherits
// SIGINT ignored; its workers must not, or the forwarded SIGINT does nothing
// and they are SIGKILLed 2 s later without cleaning up.
TEST(LauncherTest, WorkersOfALauncherStartedWithSigintIgnoredStillStopOnTheForwardedSigint) {
  struct sigaction ignore {
  }, old_int{}, old_quit{};
  ignore.sa_handler = SIG_IGN;
  ::sigaction(SIGINT, &ignore, &old_int);
  ::sigaction(SIGQUIT, &ignore, &old_quit);
  Launch l = start_lockstep(
      {"run", "--verbose", "-np", "2", "/bin/sh", "-c", "echo ready; exec sleep 60"});
  ::sigaction(SIGINT, &old_int, nullptr);
  ::sigaction(SIGQUIT, &old_quit, nullptr);
  ASSERT_TRUE(wait_for_output(l, "ready", 2)) << l.out << l.err;
  ASSERT_EQ(::kill(l.pid, SIGINT), 0);
  Finished f = finish(l);
  EXPECT_EQ(f.status, 130) << describe(f);
  size_t by_sigint = 0;
  for (size_t at = f.err.find("was killed by signal 2 (SIGINT)"); at != std::string::npos;
       at = f.err.find("was killed by signal 2 (SIGINT)", at + 1))
    ++by_sigint;
  EXPECT_EQ(by_sigint, 2u) << describe(f);
  EXPECT_FALSE(contains(f.err, "killed by signal 9")) << describe(f);
}

// Issue 30.3: `nohup lockstep run … &` sets SIGHUP to ignored, yet the
// launcher forwarded the SIGHUP of a logout and the job died with rc 129.
TEST(LauncherTest, ALauncherStartedWithSighupIgnoredSurvivesSighup) {
  std::string go = ::testing::TempDir() + "lockstep_nohup_" + std::to_string(::getpid());
  std::filesystem::remove(go);
  struct sigaction ignore {
  }, old_hup{};
  ignore.sa_handler = SIG_IGN;
  ::sigaction(SIGHUP, &ignore, &old_hup);
  // Each worker reports whether SIGHUP is ignored in it (bit 0 of SigIgn).
  Launch l = start_lockstep(
      sh_job(2,
             "echo ign=$(awk '/^SigIgn/ {print substr($2, length($2))}' /proc/$$/status); "
             "echo ready; while [ ! -e " +
                 go + " ]; do sleep 0.05; done; echo finished"));
  ::sigaction(SIGHUP, &old_hup, nullptr);
  ASSERT_TRUE(wait_for_output(l, "ready", 2)) << l.out << l.err;
  ASSERT_EQ(::kill(l.pid, SIGHUP), 0);
  ::usleep(300 * 1000);  // time to (wrongly) forward it before the workers may finish
  std::ofstream(go) << "go";
  Finished f = finish(l);
  std::filesystem::remove(go);
  EXPECT_EQ(f.status, 0) << describe(f);
  EXPECT_FALSE(contains(f.err, "received SIGHUP")) << describe(f);
  size_t finished = 0;
  for (size_t at = f.out.find("finished"); at != std::string::npos;
       at = f.out.find("finished", at + 1))
    ++finished;
  EXPECT_EQ(finished, 2u) << describe(f);
  size_t at_default = 0;  // SIGHUP's bit (the last hex digit's lowest) clear
  for (size_t at = f.out.find("ign="); at != std::string::npos; at = f.out.find("ign=", at + 1))
    at_default += std::string("02468ace").find(f.out[at + 4]) != std::string::npos;
  EXPECT_EQ(at_default, 2u) << describe(f);
}

// Issue 16.6: an uncaught MismatchError ended as "terminate called after
// throwing an instance of ..." + SIGABRT, reported as "killed by signal 6".
TEST(LauncherTest, UncaughtLockstepErrorIsReportedWithItsTypeMessageAndRank) {
  std::string worker = lockstep_binary() + "-test-uncaught-worker";
  Finished f = run_lockstep({"run", "-np", "2", worker, "lockstep"});
  EXPECT_EQ(f.status, 70) << describe(f);
  EXPECT_TRUE(contains(f.err,
                       "[1]: lockstep: uncaught lockstep::MismatchError on rank 1: allreduce "
                       "'w': rank 0 sent 3 floats, rank 1 sent 4\n"))
      << describe(f);
  EXPECT_TRUE(contains(f.err,
                       ") failed with MismatchError: allreduce 'w': rank 0 sent 3 floats, "
                       "rank 1 sent 4; stopping the other workers"))
      << describe(f);
  EXPECT_TRUE(contains(f.err, "lockstep run: rank 1 (pid ")) << describe(f);
  EXPECT_FALSE(contains(f.err, "terminate called")) << describe(f);
}

// Issue 30.6: a collective before init() ended in a bare "terminate called"
// and SIGABRT: the handler that names lockstep errors came with init().
TEST(LauncherTest, ACollectiveBeforeInitIsANamedError) {
  std::string worker = lockstep_binary() + "-test-uncaught-worker";
  Finished f = run_lockstep({"run", "-np", "2", worker, "before-init"});
  EXPECT_EQ(f.status, 70) << describe(f);
  EXPECT_TRUE(contains(f.err,
                       "lockstep: uncaught lockstep::InvalidArgument: engine: not "
                       "initialized; call lockstep::engine::init()"))
      << describe(f);
  EXPECT_TRUE(contains(f.err, "failed with InvalidArgument: engine: not initialized"))
      << describe(f);
  EXPECT_FALSE(contains(f.err, "terminate called")) << describe(f);
  EXPECT_FALSE(contains(f.err, "SIGABRT")) << describe(f);
}

TEST(LauncherTest, UncaughtForeignExceptionStillAbortsButIsNamed) {
  std::string worker = lockstep_binary() + "-test-uncaught-worker";
  Finished f = run_lockstep({"run", "-np", "2", worker, "std"});
  EXPECT_EQ(f.status, 128 + SIGABRT) << describe(f);
  EXPECT_TRUE(contains(f.err,
                       "was killed by signal 6 (SIGABRT) after an uncaught "
                       "out_of_range: index 7 of 3"))
      << describe(f);
}

std::string job_id_from(const std::string& out) {
  auto colon = out.find(": ");
  std::string id = out.substr(colon + 2, out.find('\n') - colon - 2);
  return id;
}

TEST(LauncherTest, SharedMemoryOfAKilledJobIsRemoved) {
  Finished f = run_lockstep(sh_job(
      2,
      "touch /dev/shm/lockstep-$LOCKSTEP_JOB_ID-x$LOCKSTEP_RANK; echo $LOCKSTEP_JOB_ID; kill -9 $$"));
  EXPECT_EQ(f.status, 137) << describe(f);
  std::string id = job_id_from(f.out);
  ASSERT_FALSE(id.empty()) << describe(f);
  EXPECT_TRUE(shm_entries("lockstep-" + id).empty());
}

TEST(LauncherTest, SharedMemoryOfAFinishedJobIsRemovedAndOthersKept) {
  std::string other = "/dev/shm/lockstep-launchertest-other-" + std::to_string(::getpid());
  {
    std::FILE* keep = std::fopen(other.c_str(), "w");
    ASSERT_NE(keep, nullptr);
    std::fclose(keep);
  }
  Finished f = run_lockstep(
      sh_job(2, "touch /dev/shm/lockstep-$LOCKSTEP_JOB_ID-x$LOCKSTEP_RANK; echo $LOCKSTEP_JOB_ID"));
  EXPECT_EQ(f.status, 0) << describe(f);
  std::string id = job_id_from(f.out);
  ASSERT_FALSE(id.empty());
  EXPECT_TRUE(shm_entries("lockstep-" + id).empty());
  EXPECT_TRUE(std::filesystem::exists(other)) << "another job's segment was removed";
  std::filesystem::remove(other);
}

TEST(LauncherTest, WorkersMeetThroughTheAuthenticatedRendezvousStore) {
  std::string worker =
      std::string(std::getenv("LOCKSTEP_BIN_DIR") ? std::getenv("LOCKSTEP_BIN_DIR") : ".") +
      "/lockstep-test-rendezvous-worker";
  Finished f = run_lockstep({"run", "-np", "4", "--", worker});
  ASSERT_EQ(f.status, 0) << describe(f);
  for (int r = 0; r < 4; ++r)
    EXPECT_TRUE(contains(f.out, "[" + std::to_string(r) + "]: rank " + std::to_string(r) + " saw "))
        << describe(f);
}

TEST(LauncherTest, WorkerWithAWrongSecretIsRefusedAndTheRefusalLogged) {
  std::string worker =
      std::string(std::getenv("LOCKSTEP_BIN_DIR") ? std::getenv("LOCKSTEP_BIN_DIR") : ".") +
      "/lockstep-test-rendezvous-worker";
  Finished f = run_lockstep(sh_job(1, "LOCKSTEP_SECRET=00112233 " + worker));
  EXPECT_EQ(f.status, 1) << describe(f);
  EXPECT_TRUE(contains(f.err, "lockstep run: refused rendezvous connection from 127.0.0.1:"))
      << describe(f);
  EXPECT_TRUE(contains(f.err, ": bad authentication\n")) << describe(f);
  EXPECT_TRUE(contains(f.err, "LOCKSTEP_SECRET")) << "the worker is told what to check\n"
                                                  << describe(f);
}

}  // namespace
}  // namespace lockstep::testing
