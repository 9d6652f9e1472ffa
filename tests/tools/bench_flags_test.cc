// Bad benchmark flags exit 2 with the flag's name before any work starts
// (the bug: `lockstep bench allreduce --factor 0` ran one size and exited 0).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <cctype>
#include <cstdlib>
#include <string>

namespace {

struct Outcome {
  int exit_code = -1;
  std::string output;
};

Outcome run(const std::string& args) {
  const char* dir = std::getenv("LOCKSTEP_BIN_DIR");
  std::string command = std::string(dir ? dir : ".") + "/lockstep " + args + " 2>&1";
  Outcome r;
  FILE* pipe = popen(command.c_str(), "r");
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, pipe)) > 0) r.output.append(buf, n);
  int status = pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

struct BadFlag {
  const char* args;
  const char* flag;
};

class BenchFlags : public ::testing::TestWithParam<BadFlag> {};

TEST_P(BenchFlags, ExitTwoNamingTheFlag) {
  Outcome r = run(GetParam().args);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find(GetParam().flag), std::string::npos) << r.output;
}

INSTANTIATE_TEST_SUITE_P(Collective, BenchFlags,
                         ::testing::Values(BadFlag{"bench allreduce --factor 0", "--factor"},
                                           BadFlag{"bench allreduce --factor 1", "--factor"},
                                           BadFlag{"bench allreduce --factor abc", "--factor"},
                                           BadFlag{"bench broadcast --seconds 0", "--seconds"},
                                           BadFlag{"bench allgather --max-iters 0", "--max-iters"},
                                           BadFlag{"bench allreduce --dtype f17", "--dtype"},
                                           BadFlag{"bench allreduce --sizes 0:1MiB", "--sizes"},
                                           BadFlag{"bench engine --steps 0", "--steps"},
                                           BadFlag{"bench engine --rounds -1", "--rounds"}),
                         [](const auto& info) {  // e.g. "bench_allreduce___factor_0"
                           std::string name = info.param.args;
                           for (char& ch : name)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return name;
                         });

}  // namespace
