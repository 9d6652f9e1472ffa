// `lockstep run` with real workers over shared memory: success, and a worker
// SIGKILLed in the middle of a large allreduce.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <regex>
#include <string>

namespace {

struct JobResult {
  int exit_code = -1;
  std::string output;
  double seconds = 0;
};

std::string bin(const std::string& name) {
  const char* dir = std::getenv("LOCKSTEP_BIN_DIR");
  return std::string(dir ? dir : ".") + "/" + name;
}

JobResult run_job(const std::string& command) {
  auto start = std::chrono::steady_clock::now();
  JobResult r;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, pipe)) > 0) r.output.append(buf, n);
  int status = pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

std::string job_id(const std::string& output) {
  std::smatch m;
  std::regex re("job=([A-Za-z0-9_-]+)");
  return std::regex_search(output, m, re) ? m[1].str() : "";
}

bool shm_has_job(const std::string& job) {
  for (const auto& e : std::filesystem::directory_iterator("/dev/shm"))
    if (e.path().filename().string().rfind("lockstep-" + job, 0) == 0) return true;
  return false;
}

TEST(EndToEnd, ThreeWorkersAllreduceAndExitZero) {
  JobResult r = run_job(bin("lockstep") + " run -np 3 -- " + bin("lockstep-test-worker") +
                        " --iterations 5 --mib 4");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  for (int rank = 0; rank < 3; ++rank)
    EXPECT_NE(r.output.find("rank " + std::to_string(rank) + " done"), std::string::npos)
        << r.output;
  std::string job = job_id(r.output);
  ASSERT_FALSE(job.empty()) << r.output;
  EXPECT_FALSE(shm_has_job(job));
}

TEST(EndToEnd, SigkilledWorkerIsNamedEverySurvivorFailsAndShmIsClean) {
  JobResult r = run_job(bin("lockstep") + " run -np 3 -- " + bin("lockstep-test-worker") +
                        " --die-rank 1 --die-after-ms 300 --mib 16");
  EXPECT_NE(r.exit_code, 0) << r.output;
  // The launcher names the rank and the signal...
  EXPECT_NE(r.output.find("rank 1"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("SIGKILL"), std::string::npos) << r.output;
  // ...and each survivor reported the dead rank itself (before being stopped).
  std::regex survivor_error("test-worker: .*rank 1 .*died");
  auto begin = std::sregex_iterator(r.output.begin(), r.output.end(), survivor_error);
  EXPECT_GE(std::distance(begin, std::sregex_iterator()), 1) << r.output;
  EXPECT_LT(r.seconds, 10.0) << "job took " << r.seconds << " s to come down";
  std::string job = job_id(r.output);
  ASSERT_FALSE(job.empty()) << r.output;
  EXPECT_FALSE(shm_has_job(job));
}

}  // namespace
