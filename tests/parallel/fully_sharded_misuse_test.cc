// FullyShardedModel misuse that LibTorch alone turns into a raw crash, in
// real worker processes (issue 39): the wrapped Sequential's own forward
// and a unit's weight read by the model's own code outside every unit end
// as lockstep's uncaught InvalidArgument naming the fix (exit 70, no
// SIGABRT), and lt::shutdown() with a FullyShardedModel still alive after a
// forward without backward, or after a backward without step(), cuts no
// collective short (no flight-recorder dump).
#include <fcntl.h>
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <unistd.h>

#include <filesystem>
#include <functional>
#include <fstream>
#include <sstream>
#include <thread>

#include "lockstep/base/terminate.h"
#include "lockstep/parallel/fully_sharded.h"
#include "parallel/fsdp_helpers.h"
#include "support/multiproc.h"
#include "torch/helpers.h"

namespace lockstep::parallel {
namespace {

namespace lt = lockstep::torch;
namespace nn = ::torch::nn;
namespace F = ::torch::nn::functional;
using testing::CheckpointDir;
using ::testing::HasSubstr;
using testing::local_batch;
using ::torch::Tensor;

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// f() on a thread of its own, where nothing catches: its exception goes to
// std::terminate with the caller's objects (the FullyShardedModel) alive, as
// one that a training program does not catch does.
void uncaught(const std::function<void()>& f) { std::thread(f).join(); }

// Runs body() on `ranks` workers as run_torch_workers does, each worker's
// stderr going to dir/rank<r>.err. Every worker's stderr, after each exited.
std::vector<std::string> run_uncaught(int ranks, const std::function<void()>& body,
                                      std::vector<lockstep::testing::ChildResult>& results) {
  CheckpointDir dir("fsdp-misuse");
  const std::filesystem::path folder = std::filesystem::path(dir.path()).parent_path();
  lockstep::testing::MultiProcOptions options;
  options.env = {{"LOCKSTEP_BIND_TO", "none"}, {"LOCKSTEP_INTRA_OP_THREADS", "1"}};
  results = lockstep::testing::run_workers_raw(
      ranks,
      [&](const comm::WorldInfo& world) {
        const std::string err = (folder / fmt::format("rank{}.err", world.rank)).string();
        const int fd = ::open(err.c_str(), O_CREAT | O_WRONLY | O_TRUNC, 0600);
        if (fd < 0 || ::dup2(fd, STDERR_FILENO) < 0) std::abort();
        engine::init(world);
        lt::init();
        body();
        lt::shutdown();
      },
      options);
  std::vector<std::string> errs;
  for (int r = 0; r < ranks; ++r) errs.push_back(read_file(folder / fmt::format("rank{}.err", r)));
  return errs;
}

// Every worker ended through lockstep's uncaught-error path with one
// InvalidArgument line holding `texts`, not by a signal.
void expect_named_exit(const std::function<void()>& body, const std::vector<std::string>& texts) {
  std::vector<lockstep::testing::ChildResult> results;
  const auto errs = run_uncaught(2, body, results);
  for (size_t r = 0; r < results.size(); ++r) {
    EXPECT_EQ(results[r].signal, 0) << "rank " << r << " was killed by a signal: " << errs[r];
    EXPECT_TRUE(results[r].exited && results[r].exit_code == kUncaughtErrorExitCode)
        << results[r].describe() << ": " << errs[r];
    EXPECT_THAT(errs[r], HasSubstr("lockstep: uncaught lockstep::InvalidArgument on rank"));
    for (const auto& text : texts) EXPECT_THAT(errs[r], HasSubstr(text)) << "rank " << r;
  }
}

nn::Sequential make_mlp() {
  ::torch::manual_seed(3);
  return nn::Sequential(nn::Linear(8, 12), nn::Tanh(), nn::Linear(12, 4));
}

// One ordinary step first: the misuse comes from a program that trains.
void train_one_step(FullyShardedModel& fsdp, const std::function<Tensor(Tensor)>& forward) {
  ::torch::optim::SGD sgd(fsdp.parameters(), 0.1);
  auto [x, y] = local_batch(0);
  fsdp.zero_grad();
  F::mse_loss(forward(x), y).backward();
  fsdp.step(sgd);
}

TEST(FullyShardedMisuse, TheSequentialsOwnForwardNamesFsdpForward) {
  expect_named_exit(
      [] {
        auto model = make_mlp();
        FullyShardedModel fsdp(model, {.name = "own"});
        train_one_step(fsdp, [&](Tensor x) { return fsdp.forward(x); });
        uncaught([&] { model->forward(local_batch(1).first); });  // not fsdp.forward
      },
      {"fsdp.forward(x)", "model->forward(x)", "gather_full()", "0.weight (unit 0 (layers 0..0))",
       "LibTorch said: "});
}

// The model's own code (outside every unit) reads the unit's weight.
struct RootReadsImpl : nn::Module {
  RootReadsImpl() {
    ::torch::manual_seed(5);
    fc = register_module("fc", fsdp_unit(nn::Linear(8, 4)));
    inner = std::dynamic_pointer_cast<nn::LinearImpl>(fc->wrapped());
  }
  Tensor forward(const Tensor& x) { return fc->forward(x) + F::linear(x, inner->weight); }
  FullyShardedUnit fc{nullptr};
  std::shared_ptr<nn::LinearImpl> inner;
};
class RootReads : public nn::ModuleHolder<RootReadsImpl> {  // TORCH_MODULE, spelled out
 public:
  using nn::ModuleHolder<RootReadsImpl>::ModuleHolder;
};

TEST(FullyShardedMisuse, AUnitsWeightReadOutsideEveryUnitIsNamed) {
  expect_named_exit(
      [] {
        RootReads net;
        FullyShardedModel fsdp(net, {.name = "root"});
        uncaught([&] { net->forward(local_batch(0).first); });
      },
      {"outside every FullyShardedUnit", "fc.weight (unit 0 (fc))", "Tied weights",
       "LibTorch said: "});
}

// a -> b -> a (a unit called twice, as a head tied to the embedding is):
// a's second call must not leave b's all-gather pending, nor a forward
// that calls fewer units than the first.
struct TwiceImpl : nn::Module {
  TwiceImpl() {
    ::torch::manual_seed(7);
    a = register_module("a", fsdp_unit(nn::Linear(8, 8)));
    b = register_module("b", fsdp_unit(nn::Linear(8, 8)));
    c = register_module("c", fsdp_unit(nn::Linear(8, 4)));
  }
  Tensor forward(const Tensor& x, bool all = true) {
    Tensor h = a->forward(::torch::tanh(b->forward(a->forward(x))));
    return all ? c->forward(h) : h;
  }
  FullyShardedUnit a{nullptr}, b{nullptr}, c{nullptr};
};
class Twice : public nn::ModuleHolder<TwiceImpl> {  // TORCH_MODULE, spelled out
 public:
  using nn::ModuleHolder<TwiceImpl>::ModuleHolder;
};

// `body` on 2 ranks, ending with lt::shutdown() while its model is alive:
// no flight-recorder dump (a collective cut short writes one).
void expect_no_flight_dump(const std::string& tag, const std::function<void()>& body) {
  CheckpointDir flight(tag);
  const auto folder = std::filesystem::path(flight.path()).parent_path();
  lt::testing::run_torch_workers(2, body, {{"LOCKSTEP_FLIGHT_DIR", folder.string()}});
  for (const auto& entry : std::filesystem::directory_iterator(folder))
    ADD_FAILURE() << "flight recorder dump " << entry.path().filename() << ": "
                  << read_file(entry.path());
}

TEST(FullyShardedMisuse, ShutdownAfterAForwardWithoutBackwardReportsNothing) {
  expect_no_flight_dump("fsdp-flight", [] {
    Twice net;
    FullyShardedModel fsdp(net, {.name = "twice"});
    train_one_step(fsdp, [&](Tensor x) { return net->forward(x); });  // records the order
    train_one_step(fsdp, [&](Tensor x) { return net->forward(x); });  // prefetches by it
    ::torch::NoGradGuard no_grad;
    net->forward(local_batch(2).first);
    net->forward(local_batch(3).first, /*all=*/false);  // stops before c
    lt::shutdown();                                     // fsdp is still alive
  });
}

// A backward without step() (an evaluation of the gradient norm, a loop
// that stops between backward and step) leaves the last unit's
// reduce-scatter in flight: shutdown with the model alive completes it
// (its shutdown hook) instead of cutting it short (about one run in six
// did before the hook).
TEST(FullyShardedMisuse, ShutdownAfterABackwardWithoutStepReportsNothing) {
  expect_no_flight_dump("fsdp-flight-backward", [] {
    Twice net;
    FullyShardedModel fsdp(net, {.name = "rs"});
    train_one_step(fsdp, [&](Tensor x) { return net->forward(x); });
    auto [x, y] = local_batch(1);
    fsdp.zero_grad();
    F::mse_loss(net->forward(x), y).backward();  // no step()
    lt::shutdown();                              // fsdp is still alive
  });
}

}  // namespace
}  // namespace lockstep::parallel
