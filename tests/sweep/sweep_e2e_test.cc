// `lockstep sweep` as a user runs it: real sweeps of a small scripted trial
// program (fake_trial.sh) through real `lockstep run` jobs.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "support/scratch.h"

namespace {

namespace fs = std::filesystem;

std::string bin(const std::string& name) {
  const char* dir = std::getenv("LOCKSTEP_BIN_DIR");
  return (fs::path(dir ? dir : ".") / name).string();
}

fs::path scratch(const std::string& name) {
  return lockstep::testing::scratch_folder("lockstep-sweep", name);
}

std::string write_space(const fs::path& dir, const std::string& json) {
  auto path = (dir / "space.json").string();
  std::ofstream(path) << json;
  return path;
}

// Starts `lockstep sweep ARGS -- fake_trial.sh {metrics} EPOCHS {quality} {behaviour}`.
pid_t start_sweep(const fs::path& dir, std::vector<std::string> args, int epochs) {
  std::vector<std::string> argv{bin("lockstep"),        "sweep",    "--dir",
                                (dir / "run").string(), "--metric", "score"};
  argv.insert(argv.end(), args.begin(), args.end());
  argv.insert(argv.end(), {"--", "bash", LOCKSTEP_SWEEP_TEST_DIR "/fake_trial.sh", "{metrics}",
                           std::to_string(epochs), "{quality}", "{behaviour}"});
  const pid_t pid = fork();
  if (pid == 0) {
    const std::string out = (dir / "sweep.out").string();
    freopen(out.c_str(), "a", stdout);
    dup2(fileno(stdout), STDERR_FILENO);
    std::vector<char*> cargv;
    for (auto& a : argv) cargv.push_back(a.data());
    cargv.push_back(nullptr);
    execv(cargv[0], cargv.data());
    _exit(127);
  }
  return pid;
}

int wait_exit(pid_t pid) {
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::vector<nlohmann::json> journal(const fs::path& dir) {
  std::vector<nlohmann::json> events;
  std::ifstream in(dir / "run" / "journal.jsonl");
  for (std::string line; std::getline(in, line);) events.push_back(nlohmann::json::parse(line));
  return events;
}

std::map<int, nlohmann::json> ends(const std::vector<nlohmann::json>& events) {
  std::map<int, nlohmann::json> out;
  for (const auto& e : events)
    if (e["event"] == "end") {
      EXPECT_EQ(out.count(e["trial"].get<int>()), 0u) << "trial ended twice: " << e.dump();
      out[e["trial"].get<int>()] = e;
    }
  return out;
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// TensorBoard's records of a directory as tests/summary/read_events.py
// (an independent reader) prints them; "--schema" decodes them fully.
std::string events(const fs::path& dir, bool schema = false) {
  const std::string tests = LOCKSTEP_SWEEP_TEST_DIR "/../summary";
  const std::string cmd = fmt::format(
      "/usr/bin/python3 {}/read_events.py {} '{}' 2>&1", tests,
      schema ? fmt::format("--schema {}/tensorboard_subset.proto", tests) : "", dir.string());
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  char buf[4096];
  for (size_t n; p && (n = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  if (p) pclose(p);
  return out;
}

// The HParams tab's records: the experiment in the sweep's directory, and a
// session per trial with the metric per epoch and its status.
void expect_hparams_records(const fs::path& run) {
  const std::string top = events(run, /*schema=*/true);
  for (const char* want :
       {"tag: \"_hparams_/experiment\"", "name: \"behaviour\"", "string_value: \"hang\"",
        "tag: \"sweep/score\"", "tag: \"sweep/epochs\""})
    EXPECT_NE(top.find(want), std::string::npos) << want << "\n" << top;
  const std::string ok = events(run / "trials" / "000");
  for (const char* want :
       {"0 _hparams_/session_start_info plugin=hparams\n", "1 sweep/score 2\n", "2 sweep/score 4\n",
        "3 sweep/score 6\n", "3 sweep/epochs 3\n", "3 _hparams_/session_end_info plugin=hparams\n"})
    EXPECT_NE(ok.find(want), std::string::npos) << want << "\n" << ok;
  EXPECT_NE(events(run / "trials" / "000", true).find("status: STATUS_SUCCESS"), std::string::npos);
  const std::string crashed = events(run / "trials" / "001", true);
  EXPECT_NE(crashed.find("string_value: \"crash\""), std::string::npos) << crashed;
  EXPECT_NE(crashed.find("status: STATUS_FAILURE"), std::string::npos) << crashed;
}

TEST(SweepEndToEnd, CrashingAndHangingTrialsAreRecordedAndTheSweepFinishes) {
  auto dir = scratch("faults");
  auto space = write_space(dir, R"({"quality": {"type": "choice", "values": [2]},
      "behaviour": {"type": "choice", "values": ["ok", "crash", "hang"]}})");
  pid_t pid = start_sweep(
      dir,
      {"--space", space, "--scheduler", "grid", "-np", "1", "--slots", "2", "--trial-timeout", "2"},
      3);
  ASSERT_EQ(wait_exit(pid), 0) << slurp(dir / "sweep.out");
  auto e = ends(journal(dir));
  ASSERT_EQ(e.size(), 3u) << slurp(dir / "sweep.out");
  // Grid order: behaviour varies slowest (parameters in name order): ok, crash, hang.
  EXPECT_EQ(e[0]["status"], "completed");
  EXPECT_EQ(e[0]["epochs"], 3);
  EXPECT_EQ(e[1]["status"], "failed");
  EXPECT_NE(e[1]["reason"].get<std::string>().find("exit code 3"), std::string::npos) << e[1];
  EXPECT_NE(e[1]["reason"].get<std::string>().find("crashing on purpose"), std::string::npos)
      << e[1];
  EXPECT_TRUE(fs::exists(e[1]["log"].get<std::string>()));
  EXPECT_EQ(e[2]["status"], "timeout");
  EXPECT_NE(e[2]["reason"].get<std::string>().find("--trial-timeout 2"), std::string::npos) << e[2];
  auto results = nlohmann::json::parse(slurp(dir / "run" / "results.json"));
  EXPECT_EQ(results["best"]["trial"], 0);  // failed trials are not ranked
  EXPECT_NE(slurp(dir / "sweep.out").find("best: trial 0"), std::string::npos);
  expect_hparams_records(dir / "run");
}

// SIGKILL of the sweep once a trial has ended: started again with the same
// directory, the ended trials are kept (never started twice) and the
// interrupted ones are started again as attempt 2.
TEST(SweepEndToEnd, ResumesAfterSigkillWithoutRerunningEndedTrials) {
  auto dir = scratch("resume");
  auto space = write_space(dir, R"({"quality": {"type": "choice", "values": [1, 2, 3, 4]},
      "behaviour": {"type": "choice", "values": ["ok"]}})");
  const std::vector<std::string> args{"--space", space,     "--scheduler", "grid",         "-np",
                                      "1",       "--slots", "2",           "--concurrent", "2"};
  setenv("FAKE_EPOCH_SECONDS", "0.4", 1);
  pid_t pid = start_sweep(dir, args, 4);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (ends(journal(dir)).empty() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ::kill(pid, SIGKILL);
  wait_exit(pid);
  const auto before = ends(journal(dir));
  ASSERT_FALSE(before.empty());
  ASSERT_LT(before.size(), 4u) << "every trial ended before the kill; nothing to resume";

  pid = start_sweep(dir, args, 4);
  ASSERT_EQ(wait_exit(pid), 0) << slurp(dir / "sweep.out");
  unsetenv("FAKE_EPOCH_SECONDS");
  const auto events = journal(dir);
  const auto after = ends(events);
  ASSERT_EQ(after.size(), 4u);
  std::map<int, int> starts;
  for (const auto& e : events)
    if (e["event"] == "start") starts[e["trial"].get<int>()]++;
  for (const auto& [trial, end] : before) {
    EXPECT_EQ(starts[trial], 1) << "ended trial " << trial << " was started again";
    EXPECT_EQ(after.at(trial), end);
  }
  int restarted = 0;
  for (const auto& [trial, end] : after) {
    EXPECT_EQ(end["status"], "completed") << end;
    EXPECT_EQ(end["epochs"], 4) << end;  // a fresh metrics file per attempt
    restarted += end["attempt"].get<int>() == 2;
  }
  EXPECT_GE(restarted, 1) << "the trials running at the kill are restarted";
  EXPECT_NE(slurp(dir / "sweep.out").find("resuming"), std::string::npos);
}

// -H across two hosts on this one machine: the remote-exec wrapper
// (fake_remote.sh) logs the host it was asked for and runs `lockstep
// remote-worker` here, as ssh would run it there, so the whole remote path of
// `lockstep run` (launch block, rendezvous over TCP, output and exit status
// back through the wrapper) carries every trial. With one slot per host and
// trials outlasting a poll, both hosts must be used, each trial must run
// where the journal says, and every result must come back to RUN_DIR.
TEST(SweepEndToEnd, TrialsRunOnEveryHostOfDashHAndTheirResultsAreGathered) {
  auto dir = scratch("hosts");
  auto space = write_space(dir, R"({"quality": {"type": "choice", "values": [1, 2, 3, 4]},
      "behaviour": {"type": "choice", "values": ["ok"]}})");
  const auto remote_log = (dir / "remote.log").string();
  pid_t pid = start_sweep(
      dir,
      {"--space", space, "--scheduler", "grid", "-np", "1", "-H", "sweephostA:1,sweephostB:1",
       "--remote-exec", "bash " LOCKSTEP_SWEEP_TEST_DIR "/fake_remote.sh " + remote_log + " {host}",
       "--run-arg=--rendezvous-addr=127.0.0.1"},
      2);
  ASSERT_EQ(wait_exit(pid), 0) << slurp(dir / "sweep.out");
  const auto events = journal(dir);
  std::map<std::string, int> trials_on;
  std::map<int, std::string> host_of;
  for (const auto& e : events)
    if (e["event"] == "start") {
      trials_on[e["host"].get<std::string>()]++;
      host_of[e["trial"].get<int>()] = e["host"].get<std::string>();
    }
  EXPECT_EQ(trials_on.size(), 2u) << slurp(dir / "sweep.out");
  EXPECT_GE(trials_on["sweephostA"], 1);
  EXPECT_GE(trials_on["sweephostB"], 1);
  // Every launch went through the wrapper, once per trial, to the host the journal names.
  std::map<std::string, int> launched_on;
  std::ifstream in(remote_log);
  for (std::string host; std::getline(in, host);) launched_on[host]++;
  EXPECT_EQ(launched_on, trials_on);
  const auto e = ends(events);
  ASSERT_EQ(e.size(), 4u) << slurp(dir / "sweep.out");
  for (const auto& [trial, end] : e) {
    EXPECT_EQ(end["status"], "completed") << end;
    EXPECT_EQ(end["epochs"], 2) << end;
    EXPECT_EQ(end["value"], 2.0 * (trial + 1)) << end;  // score = quality * epoch
    EXPECT_NE(slurp(end["log"].get<std::string>()).find("host " + host_of[trial]),
              std::string::npos)
        << "trial " << trial << " did not run as a worker of " << host_of[trial] << ":\n"
        << slurp(end["log"].get<std::string>());
  }
  auto results = nlohmann::json::parse(slurp(dir / "run" / "results.json"));
  ASSERT_EQ(results["trials"].size(), 4u);
  EXPECT_EQ(results["best"]["trial"], 3);
  EXPECT_EQ(results["best"]["value"], 8.0);
}

TEST(SweepEndToEnd, RefusesToOversubscribeAndNamesTheFix) {
  auto dir = scratch("oversubscribe");
  auto space = write_space(dir, R"({"quality": {"type": "choice", "values": [1]},
      "behaviour": {"type": "choice", "values": ["ok"]}})");
  pid_t pid = start_sweep(
      dir,
      {"--space", space, "--scheduler", "grid", "-np", "1", "--slots", "2", "--concurrent", "3"},
      1);
  EXPECT_EQ(wait_exit(pid), 2);
  EXPECT_NE(slurp(dir / "sweep.out").find("--concurrent 3 x -np 1 needs 3 slots but there are 2"),
            std::string::npos)
      << slurp(dir / "sweep.out");
  pid = start_sweep(dir,
                    {"--space", space, "--scheduler", "grid", "-np", "1", "--slots", "2",
                     "--concurrent", "3", "--oversubscribe"},
                    1);
  EXPECT_EQ(wait_exit(pid), 0) << slurp(dir / "sweep.out");
}

TEST(SweepEndToEnd, UnknownPlaceholderIsAnErrorBeforeAnyTrial) {
  auto dir = scratch("placeholder");
  auto space = write_space(dir, R"({"quality": {"type": "choice", "values": [1]}})");
  pid_t pid = start_sweep(dir, {"--space", space, "--scheduler", "grid", "-np", "1"}, 1);
  EXPECT_EQ(wait_exit(pid), 2);
  EXPECT_NE(slurp(dir / "sweep.out").find("{behaviour} is neither a parameter"), std::string::npos)
      << slurp(dir / "sweep.out");
  EXPECT_FALSE(fs::exists(dir / "run" / "trials" / "000"));
}

}  // namespace
