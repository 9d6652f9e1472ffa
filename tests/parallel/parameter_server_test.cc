// The parameter-server reduction gives the allreduce's averaged gradients,
// with colocated and dedicated servers; a dead server is named.
#include <gmock/gmock.h>
#include <signal.h>
#include <unistd.h>

#include "lockstep/base/error.h"
#include "lockstep/parallel/parameter_server.h"
#include "torch/helpers.h"

namespace lockstep::parallel {
namespace {

using lockstep::torch::testing::make_mlp;
using lockstep::torch::testing::run_torch_workers;
namespace lt = lockstep::torch;
using ::torch::Tensor;

// Each worker's own gradients (its rank seeds the data).
void local_gradients(::torch::nn::Module& model, int worker) {
  auto g = ::torch::make_generator<at::CPUGeneratorImpl>(40 + worker);
  auto x = ::torch::randn({5, 8}, g), y = ::torch::randn({5, 4}, g);
  model.zero_grad();
  ::torch::nn::functional::mse_loss(model.as<::torch::nn::Sequential>()->forward(x), y).backward();
}

// Averaged gradients through the servers equal an allreduce over the workers.
void check_equals_allreduce(int colocated) {
  if (serve_if_dedicated_server()) return;  // a dedicated server served until finish()
  const Group workers = parallel::workers();
  auto model = make_mlp(7);
  ::torch::optim::SGD sgd(model->parameters(), 0.1);
  ParameterServer ps(sgd, *model, {.servers = colocated});
  for (int round = 0; round < 2; ++round) {
    local_gradients(*model, workers.rank() + 10 * round);
    std::vector<Tensor> expected;
    for (auto& p : model->parameters())
      expected.push_back(
          lt::allreduce(p.grad(), "", {.op = lt::ReduceOp::kAverage, .process_set = workers.id()}));
    ps.synchronize();
    auto params = model->parameters();
    for (size_t i = 0; i < params.size(); ++i)
      EXPECT_TRUE(::torch::allclose(params[i].grad(), expected[i], 1e-6, 1e-7)) << "param " << i;
  }
  ps.finish();
}

TEST(ParameterServer, ColocatedServersGiveTheAllreduceAverage) {
  run_torch_workers(3, [] {
    check_equals_allreduce(2);  // ranks 0 and 1 serve
    check_equals_allreduce(0);  // every worker serves
  });
}

TEST(ParameterServer, DedicatedServersGiveTheAllreduceAverage) {
  run_torch_workers(4, [] { check_equals_allreduce(0); }, {{"LOCKSTEP_SERVERS", "2"}});
}

TEST(ParameterServer, TooManyServersIsAnError) {
  run_torch_workers(2, [] { EXPECT_THROW(dedicated_servers(), InvalidArgument); },
                    {{"LOCKSTEP_SERVERS", "2"}});
}

// Rank 2 serves ranks 0 and 1; worker 0 kills it after a healthy step. Both
// workers' next step fails with a PeerFailure naming the server.
TEST(ParameterServer, DeadServerIsNamed) {
  lockstep::testing::MultiProcOptions options;
  options.env = {
      {"LOCKSTEP_BIND_TO", "none"}, {"LOCKSTEP_INTRA_OP_THREADS", "1"}, {"LOCKSTEP_SERVERS", "1"}};
  options.deadline = std::chrono::seconds(60);
  auto results = lockstep::testing::run_workers_raw(
      3,
      [](const comm::WorldInfo& world) {
        engine::init(world);
        lt::init();
        const auto pids = lt::allgather_object<int>(static_cast<int>(::getpid()), "pids");
        if (serve_if_dedicated_server()) {
          ADD_FAILURE() << "the server should have been killed";
          return;
        }
        auto model = make_mlp(7);
        ::torch::optim::SGD sgd(model->parameters(), 0.1);
        ParameterServer ps(sgd, *model);
        local_gradients(*model, lt::rank());
        ps.step();  // healthy
        lt::allreduce(::torch::ones({1}), "workers.sync", {.process_set = workers().id()});
        if (lt::rank() == 0) ::kill(pids[2], SIGKILL);
        try {
          for (int i = 0; i < 50; ++i) {
            local_gradients(*model, lt::rank());
            ps.step();
          }
          ADD_FAILURE() << "steps went on without the server";
        } catch (const PeerFailure& e) {
          EXPECT_EQ(e.rank(), 2) << e.what();
          EXPECT_THAT(e.what(), ::testing::HasSubstr("parameter server 0 (rank 2)"));
        }
        lt::shutdown();
      },
      options);
  ASSERT_EQ(results.size(), 3u);
  EXPECT_EQ(results[2].signal, SIGKILL);
  EXPECT_TRUE(results[0].ok()) << results[0].describe();
  EXPECT_TRUE(results[1].ok()) << results[1].describe();
}

}  // namespace
}  // namespace lockstep::parallel
