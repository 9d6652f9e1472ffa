// Pipeline parallelism against the single-process model on the same batch:
// loss and every parameter gradient, at 2 and 4 stages, both schedules,
// m in {1, 3, 4}; schedules and partitions as pure functions; a SIGKILLed
// stage fails every other stage with PeerFailure.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <signal.h>

#include <chrono>

#include "lockstep/base/error.h"
#include "lockstep/parallel/mesh.h"
#include "lockstep/parallel/pipeline.h"
#include "torch/helpers.h"

namespace lockstep::parallel {
namespace {

using lockstep::torch::testing::run_torch_workers;
namespace lt = lockstep::torch;
using ::torch::Tensor;

constexpr int64_t kBatch = 10;  // m = 3 and 4 give uneven micro-batches (4,3,3 and 3,3,2,2)

// Six layers, four of them with parameters, so 4 stages always get some.
::torch::nn::Sequential make_model() {
  ::torch::manual_seed(21);
  return ::torch::nn::Sequential(::torch::nn::Linear(6, 12), ::torch::nn::Tanh(),
                                 ::torch::nn::Linear(12, 8), ::torch::nn::Linear(8, 8),
                                 ::torch::nn::ReLU(), ::torch::nn::Linear(8, 3));
}

std::pair<Tensor, Tensor> make_batch() {
  auto g = ::torch::make_generator<at::CPUGeneratorImpl>(5);
  return {::torch::randn({kBatch, 6}, g), ::torch::randint(0, 3, {kBatch}, g)};
}

Tensor cross_entropy(const Tensor& out, const Tensor& target) {
  return ::torch::nn::functional::cross_entropy(out, target);
}

struct Reference {
  double loss;
  std::map<std::string, Tensor> grads;
};

Reference single_process() {
  auto model = make_model();
  auto [x, y] = make_batch();
  auto loss = cross_entropy(model->forward(x), y);
  loss.backward();
  Reference r{loss.item<double>(), {}};
  for (const auto& item : model->named_parameters())
    r.grads[item.key()] = item.value().grad().clone();
  return r;
}

// Every schedule and micro-batch count on the ranks of `group`, in one
// worker process each.
void check_all_cases(const Group& group) {
  const Reference ref = single_process();
  for (Schedule schedule : {Schedule::kGPipe, Schedule::k1F1B})
    for (int m : {1, 3, 4}) {
      Pipeline pipe(make_model(), {.micro_batches = m,
                                   .schedule = schedule,
                                   .group = group,
                                   .name = fmt::format("pp{}{}", static_cast<int>(schedule), m)});
      auto [x, y] = make_batch();
      for (auto& p : pipe.parameters()) p.mutable_grad() = Tensor();
      const double loss = pipe.train_step(x, y, cross_entropy);
      const std::string what =
          fmt::format("stage {} of {}, m={}, {}", pipe.stage(), pipe.num_stages(), m,
                      schedule == Schedule::kGPipe ? "gpipe" : "1f1b");
      if (pipe.is_last()) {
        EXPECT_NEAR(loss, ref.loss, 1e-5 * std::abs(ref.loss)) << what;
      }
      for (const auto& [name, param] : pipe.named_parameters()) {
        ASSERT_TRUE(param.grad().defined()) << name << " " << what;
        EXPECT_TRUE(::torch::allclose(param.grad(), ref.grads.at(name), 1e-5, 1e-6))
            << name << " " << what;
      }
      // Inference through the pipeline gives the model's output on the last stage.
      auto out = pipe.forward(x);
      if (pipe.is_last()) {
        EXPECT_TRUE(::torch::allclose(out, make_model()->forward(x), 1e-5, 1e-6)) << what;
      }
      EXPECT_GE(pipe.last_step().step_seconds, pipe.last_step().compute_seconds);
    }
}

TEST(PipelineSchedule, OneF1BLimitsInFlightMicroBatches) {
  for (int stages : {1, 2, 4})
    for (int m : {1, 3, 4, 8})
      for (int s = 0; s < stages; ++s)
        for (Schedule schedule : {Schedule::kGPipe, Schedule::k1F1B}) {
          auto actions = pipeline_schedule(schedule, s, stages, m);
          ASSERT_EQ(actions.size(), 2u * m);
          int in_flight = 0, most = 0, next_f = 0, next_b = 0;
          for (const auto& a : actions) {
            if (a.forward) {
              EXPECT_EQ(a.micro_batch, next_f++);
              most = std::max(most, ++in_flight);
            } else {
              EXPECT_EQ(a.micro_batch, next_b++);
              EXPECT_LT(a.micro_batch, next_f) << "backward before its forward";
              --in_flight;
            }
          }
          EXPECT_EQ(most, schedule == Schedule::kGPipe ? m : std::min(m, stages - s));
        }
  EXPECT_EQ(parse_schedule("1f1b"), Schedule::k1F1B);
  EXPECT_THROW(parse_schedule("zigzag"), InvalidArgument);
}

TEST(PipelinePartition, BalancesParameterCounts) {
  EXPECT_EQ(balance_by_parameters({10, 0, 10, 10, 0, 10}, 2), (std::vector<int>{3, 3}));
  EXPECT_EQ(balance_by_parameters({100, 1, 1, 1}, 2), (std::vector<int>{1, 3}));
  EXPECT_EQ(balance_by_parameters({1, 1, 1}, 3), (std::vector<int>{1, 1, 1}));
  EXPECT_THROW(balance_by_parameters({1, 1}, 3), InvalidArgument);
}

TEST(Pipeline, SingleStageEqualsTheModel) { check_all_cases(Group()); }

TEST(Pipeline, TwoStagesEqualSingleProcess) {
  run_torch_workers(2, [] { check_all_cases(Group()); });
}

TEST(Pipeline, FourStagesEqualSingleProcess) {
  run_torch_workers(4, [] { check_all_cases(Group()); });
}

TEST(Pipeline, BadPartitionsAreNamed) {
  run_torch_workers(2, [] {
    EXPECT_THAT(
        [] {
          Pipeline(make_model(), {.partition = {3, 2}});
        },
        ::testing::ThrowsMessage<InvalidArgument>(
            ::testing::HasSubstr("adding up to the model's 6")));
    EXPECT_THAT([] { Pipeline(make_model(), {.micro_batches = 0}); },
                ::testing::ThrowsMessage<InvalidArgument>(::testing::HasSubstr("micro_batches=0")));
    Pipeline pipe(make_model(), {.micro_batches = 4, .partition = {2, 4}, .name = "bad"});
    EXPECT_EQ(pipe.layers_of(1), std::make_pair(2, 4));
    auto [x, y] = make_batch();
    EXPECT_THAT(
        [&] { pipe.train_step(x.narrow(0, 0, 3), y.narrow(0, 0, 3), cross_entropy); },
        ::testing::ThrowsMessage<InvalidArgument>(::testing::HasSubstr("cannot be cut into 4")));
  });
}

// data=2 x pipeline=2: each pipeline sees half the batch, DistributedOptimizer
// averages each stage's gradients over its data group; one SGD step equals
// the single-process step on the whole batch.
TEST(Pipeline, DataByPipelineOnFourRanksMatchesLargeBatch) {
  run_torch_workers(4, [] {
    Mesh mesh = Mesh::parse("data=2,pipeline=2");
    Pipeline pipe(make_model(), {.micro_batches = 2, .group = mesh.group("pipeline")});
    ::torch::optim::SGD sgd(pipe.parameters(), 0.5);
    lt::DistributedOptimizer dist(sgd, pipe.named_parameters(),
                                  {.backward_passes_per_step = 2, .group = mesh.group("data")});
    auto [x, y] = make_batch();
    const int64_t half = kBatch / 2, d = mesh.coordinate("data");
    dist.zero_grad();
    pipe.train_step(x.narrow(0, d * half, half), y.narrow(0, d * half, half), cross_entropy);
    dist.step();

    auto reference = make_model();
    ::torch::optim::SGD ref_sgd(reference->parameters(), 0.5);
    cross_entropy(reference->forward(x), y).backward();
    ref_sgd.step();
    std::map<std::string, Tensor> expected;
    for (const auto& item : reference->named_parameters()) expected[item.key()] = item.value();
    for (const auto& [name, param] : pipe.named_parameters())
      EXPECT_TRUE(::torch::allclose(param, expected.at(name), 1e-5, 1e-6)) << name;
  });
}

// Stage 1 of 3 kills itself in the middle of a step; stages 0 and 2 must fail
// with PeerFailure naming rank 1 within 5 s rather than hang.
TEST(Pipeline, KilledStageFailsEveryOtherStage) {
  lockstep::testing::MultiProcOptions options;
  options.env = {{"LOCKSTEP_BIND_TO", "none"}, {"LOCKSTEP_INTRA_OP_THREADS", "1"}};
  options.deadline = std::chrono::seconds(60);
  auto results = lockstep::testing::run_workers_raw(
      3,
      [](const comm::WorldInfo& world) {
        engine::init(world);
        lt::init();
        Pipeline pipe(make_model(), {.micro_batches = 4, .schedule = Schedule::kGPipe});
        auto [x, y] = make_batch();
        pipe.train_step(x, y, cross_entropy);  // one healthy step
        lt::barrier();
        if (lt::rank() == 1) ::raise(SIGKILL);
        const auto start = std::chrono::steady_clock::now();
        try {
          for (int i = 0; i < 100; ++i) pipe.train_step(x, y, cross_entropy);
          ADD_FAILURE() << "rank " << lt::rank() << " finished 100 steps without its neighbour";
        } catch (const PeerFailure& e) {
          const double waited =
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
          EXPECT_EQ(e.rank(), 1) << e.what();
          EXPECT_LT(waited, 5.0) << e.what();
        }
        lt::shutdown();
      },
      options);
  ASSERT_EQ(results.size(), 3u);
  EXPECT_EQ(results[1].signal, SIGKILL);
  EXPECT_TRUE(results[0].ok()) << results[0].describe();
  EXPECT_TRUE(results[2].ok()) << results[2].describe();
}

}  // namespace
}  // namespace lockstep::parallel
