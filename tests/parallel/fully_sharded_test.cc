// FullyShardedModel (ZeRO-3/FSDP) against data parallelism
// (DistributedOptimizer on a whole replica): the same parameters after K steps
// of SGD, Adam and LAMB, with and without activation checkpointing, in f32
// (1e-6 relative) and f64 (1e-12); HSDP on a 2x2 mesh; peak bytes per rank
// measured by AllocationTracker; checkpoints written at 4 ranks resumed at 4
// (bitwise), at 2 and as a plain model on one process; named errors.
#include <fmt/format.h>
#include <gmock/gmock.h>

#include <filesystem>

#include "lockstep/base/error.h"
#include "lockstep/optim/lamb.h"
#include "lockstep/parallel/activation_checkpoint.h"
#include "lockstep/parallel/fully_sharded.h"
#include "lockstep/parallel/mesh.h"
#include "lockstep/parallel/optimizer_state.h"
#include "lockstep/torch/memory.h"
#include "parallel/fsdp_helpers.h"
#include "torch/helpers.h"

namespace lockstep::parallel {
namespace {

using lockstep::torch::testing::flat_parameters;
using lockstep::torch::testing::run_torch_workers;
using testing::local_batch;
using testing::make_optimizer;
using testing::relative_error;
namespace lt = lockstep::torch;
using ::torch::Tensor;

constexpr int kSteps = 8;

::torch::nn::Sequential make_model(bool checkpointed = false, int64_t width = 40,
                                   uint64_t seed = 3) {
  ::torch::manual_seed(seed);
  auto model = ::torch::nn::Sequential(::torch::nn::Linear(8, width), ::torch::nn::Tanh(),
                                       ::torch::nn::Linear(width, 24), ::torch::nn::Tanh(),
                                       ::torch::nn::Linear(24, 4));
  return checkpointed ? checkpoint_layers(model, 2) : model;
}

Tensor train_data_parallel(const std::string& kind, ::torch::ScalarType dtype, int first = 0,
                           ::torch::nn::Sequential model = make_model()) {
  model->to(dtype);
  auto opt = make_optimizer(kind, model->parameters());
  lt::DistributedOptimizer dist(*opt, *model);
  for (int s = first; s < first + kSteps; ++s) {
    auto [x, y] = local_batch(s, dtype);
    dist.zero_grad();
    ::torch::nn::functional::mse_loss(model->forward(x), y).backward();
    dist.step();
  }
  return flat_parameters(*model);
}

void train(FullyShardedModel& fsdp, ::torch::optim::Optimizer& opt, int first, int steps,
           ::torch::ScalarType dtype = ::torch::kFloat32) {
  for (int s = first; s < first + steps; ++s) {
    auto [x, y] = local_batch(s, dtype);
    fsdp.zero_grad();
    ::torch::nn::functional::mse_loss(fsdp.forward(x), y).backward();
    fsdp.step(opt);
  }
}

Tensor whole_parameters(FullyShardedModel& fsdp) {
  fsdp.gather_full();
  Tensor flat = flat_parameters(*fsdp.module()).clone();
  fsdp.release_full();
  return flat;
}

void check_equals_data_parallel(FullyShardedOptions base = {}) {
  for (const std::string kind : {"sgd", "adam", "lamb"})
    for (bool checkpointed : {false, true})
      for (auto dtype : {::torch::kFloat32, ::torch::kFloat64}) {
        if (dtype == ::torch::kFloat64 && checkpointed) continue;
        const Tensor expected = train_data_parallel(kind, dtype);
        auto model = make_model(checkpointed);
        model->to(dtype);
        FullyShardedOptions o = base;
        o.granularity = kind == "lamb" ? ShardGranularity::kTensor : ShardGranularity::kElement;
        o.name = fmt::format("{}{}{}{}", base.name, kind, checkpointed, c10::toString(dtype));
        FullyShardedModel fsdp(model, o);
        auto opt = make_optimizer(kind, fsdp.parameters());
        train(fsdp, *opt, 0, kSteps, dtype);
        const double tolerance = dtype == ::torch::kFloat64 ? 1e-12 : 1e-6;
        EXPECT_LE(relative_error(whole_parameters(fsdp), expected), tolerance)
            << kind << (checkpointed ? " checkpointed" : "") << " " << dtype << " on " << lt::size()
            << " ranks";
      }
}

// Peak tracked bytes of training steps, counting what the strategy already
// holds when they start (allocated inside the tracker's window).
struct Peak {
  int64_t steps = 0;  // parameters + gradients + optimizer state + transients
  int64_t held = 0;   // after construction, before the first step
};

Peak data_parallel_peak(::torch::nn::Sequential (*make)()) {
  lt::AllocationTracker tracker;
  auto model = make();
  ::torch::optim::Adam adam(model->parameters(), 0.01);
  Peak peak{0, tracker.current_bytes()};
  tracker.reset_peak();
  for (int s = 0; s < 3; ++s) {
    adam.zero_grad();
    auto [x, y] = local_batch(s);
    ::torch::nn::functional::mse_loss(model->forward(x.repeat({1, 4})), y.repeat({1, 8}))
        .backward();
    adam.step();
  }
  peak.steps = tracker.peak_bytes();
  return peak;
}

::torch::nn::Sequential wide_model() {
  ::torch::manual_seed(5);
  return ::torch::nn::Sequential(::torch::nn::Linear(32, 256), ::torch::nn::Tanh(),
                                 ::torch::nn::Linear(256, 256), ::torch::nn::Tanh(),
                                 ::torch::nn::Linear(256, 256), ::torch::nn::Tanh(),
                                 ::torch::nn::Linear(256, 32));
}

// Per rank: FSDP's peak <= data parallelism's / N + one unit's parameters,
// gradients and Adam state (4 x its parameter bytes).
void check_memory_is_one_nth_plus_a_unit() {
  const int n = lt::size();
  const Peak dense = data_parallel_peak(wide_model);
  lt::AllocationTracker tracker;
  auto model = wide_model();
  FullyShardedModel fsdp(model, {.layers_per_unit = 2, .name = "mem"});
  ::torch::optim::Adam adam(fsdp.parameters(), 0.01);
  tracker.reset_peak();
  const int64_t held = tracker.current_bytes();
  for (int s = 0; s < 3; ++s) {
    fsdp.zero_grad();
    auto [x, y] = local_batch(s);
    ::torch::nn::functional::mse_loss(fsdp.forward(x.repeat({1, 4})), y.repeat({1, 8})).backward();
    fsdp.step(adam);
  }
  const int64_t peak = tracker.peak_bytes();
  const int64_t unit = fsdp.max_unit_elements() * 4 * 4;
  EXPECT_LE(peak, dense.steps / n + unit)
      << "FSDP peak " << peak << " B, data parallel " << dense.steps << " B, unit " << unit;
  EXPECT_LE(held, dense.held / n + fsdp.max_unit_elements() * 4);
  if (lt::rank() == 0)
    fmt::print(
        "[memory] {} ranks: data parallel peak {} B (held {} B), FSDP peak {} B (held {} "
        "B): ratio {:.3f}; bound DP/N + unit = {} B\n",
        n, dense.steps, dense.held, peak, held, static_cast<double>(peak) / dense.steps,
        dense.steps / n + unit);
}

// 30 layers of 128 x 128 whose parameters alone (2 MB) exceed a per-rank
// budget of 3/4 of them: with plain SGD at 4 ranks, FSDP trains inside it.
::torch::nn::Sequential deep_model() {
  ::torch::manual_seed(9);
  ::torch::nn::Sequential model(::torch::nn::Linear(8, 128));
  for (int i = 0; i < 28; ++i) {
    model->push_back(::torch::nn::Tanh());
    model->push_back(::torch::nn::Linear(128, 128));
  }
  model->push_back(::torch::nn::Tanh());
  model->push_back(::torch::nn::Linear(128, 4));
  return model;
}

void check_trains_a_model_over_the_budget() {
  auto model = deep_model();
  const int64_t whole = flat_parameters(*model).numel() * 4;
  const int64_t budget = whole * 3 / 4;
  lt::AllocationTracker tracker;
  FullyShardedModel fsdp(model, {.layers_per_unit = 2, .name = "budget"});
  model = nullptr;  // the caller's whole copy is not kept
  ::torch::optim::SGD sgd(fsdp.parameters(), 0.05);
  tracker.reset_peak();
  double first = 0, last = 0;
  for (int s = 0; s < 6; ++s) {
    fsdp.zero_grad();
    auto [x, y] = local_batch(0);  // one batch: the loss must fall
    auto loss = ::torch::nn::functional::mse_loss(fsdp.forward(x), y);
    loss.backward();
    fsdp.step(sgd);
    (s == 0 ? first : last) = lt::allreduce(loss.detach(), "budget.loss").item<double>();
  }
  EXPECT_LT(last, first);
  // What the rank held before training (its shards; construction's whole
  // model was the caller's) plus the steps' peak.
  EXPECT_LE(tracker.peak_bytes(), budget) << "whole parameters " << whole << " B";
  EXPECT_GT(whole, budget);
  if (lt::rank() == 0)
    fmt::print("[budget] {} ranks: parameters {} B, budget {} B, FSDP peak {} B\n", lt::size(),
               whole, budget, tracker.peak_bytes());
}

// HSDP on a replicate=2 x shard=2 mesh follows data parallelism at 4.
void check_hybrid_sharding() {
  Mesh mesh({{"replicate", 2}, {"shard", 2}});
  const Tensor expected = train_data_parallel("adam", ::torch::kFloat32);
  auto model = make_model();
  FullyShardedModel fsdp(
      model, {.group = mesh.group("shard"), .replicate = mesh.group("replicate"), .name = "hsdp"});
  auto opt = make_optimizer("adam", fsdp.parameters());
  train(fsdp, *opt, 0, kSteps);
  EXPECT_LE(relative_error(whole_parameters(fsdp), expected), 1e-6);
  EXPECT_LT(fsdp.shard_elements(), flat_parameters(*make_model()).numel());
}

// Mixed precision: bf16 compute copies of f32 master segments against the
// same recipe by hand on whole replicas (bf16 forward and backward, f32
// gradients averaged, Adam on f32 masters); the masters, read back through
// a checkpoint into a plain f32 model, agree within 1e-6.
void check_mixed_precision(const std::string& path) {
  const Tensor expected =
      testing::mixed_precision_by_hand([] { return make_model(); }, kSteps, "mp");
  auto model = make_model();
  FullyShardedModel fsdp(
      model, {.layers_per_unit = 2, .compute_dtype = ::torch::kBFloat16, .name = "mixed"});
  EXPECT_EQ(model->parameters()[0].scalar_type(), ::torch::kBFloat16);
  ::torch::optim::Adam adam(fsdp.parameters(), 0.01);
  train(fsdp, adam, 0, kSteps);
  EXPECT_EQ(fsdp.parameters()[0].scalar_type(), ::torch::kFloat32);
  lt::TrainingProgress progress;
  save_checkpoint(path, fsdp, adam, progress);
  lt::barrier();  // rank 0 wrote it
  auto dense = make_model(false, 40, 77);
  ::torch::optim::Adam dense_adam(dense->parameters(), 0.01);
  EXPECT_TRUE(lt::load_checkpoint(path, *dense, dense_adam, progress));
  EXPECT_LE(relative_error(flat_parameters(*dense), expected), 1e-6);
  train(fsdp, adam, kSteps, 1);  // the hooks survived the checkpoint's f32 view
}

// offload_optimizer on CPU parameters: everything is in host memory already,
// so the option changes nothing, bit for bit.
void check_offload_is_a_no_op_on_the_cpu() {
  Tensor result[2];
  for (bool offload : {false, true}) {
    auto model = make_model();
    FullyShardedModel fsdp(
        model, {.offload_optimizer = offload, .name = fmt::format("offload{}", offload)});
    auto opt = make_optimizer("adam", fsdp.parameters());
    train(fsdp, *opt, 0, kSteps);
    result[offload] = whole_parameters(fsdp);
  }
  EXPECT_TRUE(::torch::equal(result[0], result[1]));
}

void check_named_errors() {
  {  // rank 1 builds another model
    auto model = make_model(false, lt::rank() == 1 ? 41 : 40);
    try {
      FullyShardedModel fsdp(model, {.name = "mismatch"});
      ADD_FAILURE() << "mismatched models were accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_THAT(e.what(), ::testing::HasSubstr("group rank 1 has '0.weight [41, 8]"));
    }
  }
  auto model = make_model();
  FullyShardedModel fsdp(model, {.name = "errors"});
  optim::Lamb lamb(fsdp.parameters(), optim::LambOptions(0.01));
  EXPECT_THAT([&] { fsdp.step(lamb); },
              ::testing::ThrowsMessage<InvalidArgument>(::testing::HasSubstr("kTensor")));
  auto other = make_model();
  ::torch::optim::SGD wrong(other->parameters(), 0.1);
  EXPECT_THAT([&] { fsdp.step(wrong); },
              ::testing::ThrowsMessage<InvalidArgument>(::testing::HasSubstr("fsdp.parameters()")));
  Tensor small = ::torch::empty({3});  // the gather of 2 x 2 values does not fit
  try {
    lt::allgather_into_async(::torch::ones({2}), small, "into.small").wait();
    ADD_FAILURE() << "allgather_into_async wrote past its output";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("the result has shape [4] but output has [3]"));
  }
  EXPECT_THAT([&] { FullyShardedModel bad(make_model(), {.layers_per_unit = 0}); },
              ::testing::ThrowsMessage<InvalidArgument>(::testing::HasSubstr("layers_per_unit=0")));
}

TEST(FullyShardedModel, OneRankIsThePlainModel) {
  run_torch_workers(1, [] { check_equals_data_parallel(); });
}

TEST(FullyShardedModel, TwoRanksComputeWhatDataParallelismComputes) {
  run_torch_workers(2, [] {
    check_equals_data_parallel({.layers_per_unit = 2, .name = "two"});
    check_memory_is_one_nth_plus_a_unit();
    check_offload_is_a_no_op_on_the_cpu();
    check_named_errors();
  });
}

TEST(FullyShardedModel, FourRanksComputeWhatDataParallelismComputes) {
  run_torch_workers(4, [] {
    check_equals_data_parallel({.prefetch = false, .name = "four"});
    check_hybrid_sharding();
    check_memory_is_one_nth_plus_a_unit();
    check_trains_a_model_over_the_budget();
  });
}

// Checkpoints: written by FSDP at 4 ranks after kSteps, in the format of a
// one-process model (lockstep::torch::save_checkpoint).
Tensor continue_fsdp(const std::string& path, const std::string& name, Tensor* loaded = nullptr) {
  auto model = make_model(false, 40, /*seed=*/77);  // other values: the load must replace them
  FullyShardedModel fsdp(model, {.name = name});
  ::torch::optim::Adam adam(fsdp.parameters(), 0.01);
  lt::TrainingProgress progress;
  EXPECT_TRUE(load_checkpoint(path, fsdp, adam, progress));
  EXPECT_EQ(progress.step, kSteps);
  if (loaded) *loaded = whole_parameters(fsdp);
  train(fsdp, adam, kSteps, kSteps);
  return whole_parameters(fsdp);
}

// The same continuation by data parallelism on whole replicas.
Tensor continue_dense(const std::string& path) {
  auto model = make_model(false, 40, 77);
  ::torch::optim::Adam adam(model->parameters(), 0.01);
  lt::TrainingProgress progress;
  EXPECT_TRUE(lt::load_checkpoint(path, *model, adam, progress));
  lt::DistributedOptimizer dist(adam, *model);
  for (int s = kSteps; s < 2 * kSteps; ++s) {
    auto [x, y] = local_batch(s);
    dist.zero_grad();
    ::torch::nn::functional::mse_loss(model->forward(x), y).backward();
    dist.step();
  }
  return flat_parameters(*model);
}

Tensor dense_at_save(const std::string& path) {
  auto model = make_model(false, 40, 77);
  ::torch::optim::Adam adam(model->parameters(), 0.01);
  lt::TrainingProgress progress;
  EXPECT_TRUE(lt::load_checkpoint(path, *model, adam, progress));
  return flat_parameters(*model);
}

void write_at_four_and_resume_bitwise(const std::string& path) {
  auto model = make_model();
  FullyShardedModel fsdp(model, {.name = "ck4"});
  ::torch::optim::Adam adam(fsdp.parameters(), 0.01);
  train(fsdp, adam, 0, kSteps);
  lt::TrainingProgress progress;
  progress.step = kSteps;
  save_checkpoint(path, fsdp, adam, progress);
  const Tensor saved = whole_parameters(fsdp);
  train(fsdp, adam, kSteps, kSteps);
  const Tensor uninterrupted = whole_parameters(fsdp);
  Tensor loaded;
  const Tensor resumed = continue_fsdp(path, "ck4r", &loaded);
  EXPECT_TRUE(::torch::equal(loaded, saved));
  EXPECT_TRUE(::torch::equal(resumed, uninterrupted)) << "resuming at the same world size";
  EXPECT_TRUE(::torch::equal(dense_at_save(path), saved));
}

class FullyShardedCheckpoint : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / fmt::format("lockstep-fsdp-{}", ::getpid());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string path() const { return (dir_ / "checkpoint.pt").string(); }
  std::filesystem::path dir_;
};

TEST_F(FullyShardedCheckpoint, WrittenAtFourResumesAtFourTwoAndAsAPlainModelAtOne) {
  const std::string p = path();
  run_torch_workers(4, [&] { write_at_four_and_resume_bitwise(p); });
  run_torch_workers(2, [&] {
    Tensor loaded;
    const Tensor sharded = continue_fsdp(p, "ck2", &loaded);
    EXPECT_TRUE(::torch::equal(loaded, dense_at_save(p)));
    const Tensor dense = continue_dense(p);
    EXPECT_LE(relative_error(sharded, dense), 1e-6);
    if (lt::rank() == 0)
      fmt::print("[checkpoint] at 2 ranks FSDP and data parallel continue {}\n",
                 ::torch::equal(sharded, dense) ? "bitwise equal" : "within 1e-6");
  });
  run_torch_workers(1, [&] {  // the plain model resumes bit for bit as FSDP at one rank
    EXPECT_TRUE(::torch::equal(continue_fsdp(p, "ck1"), continue_dense(p)));
  });
}

TEST_F(FullyShardedCheckpoint, AnotherModelIsANamedError) {
  const std::string p = path();
  run_torch_workers(1, [&] {
    auto model = make_model();
    FullyShardedModel fsdp(model, {.name = "a"});
    ::torch::optim::Adam adam(fsdp.parameters(), 0.01);
    train(fsdp, adam, 0, 1);
    lt::TrainingProgress progress;
    save_checkpoint(p, fsdp, adam, progress);
    auto wider = make_model(false, 41);
    FullyShardedModel other(wider, {.name = "b"});
    ::torch::optim::Adam adam2(other.parameters(), 0.01);
    try {  // by hand: EXPECT_THAT(Throws) runs a failing callable twice
      load_checkpoint(p, other, adam2, progress);
      ADD_FAILURE() << "a checkpoint of another model was loaded";
    } catch (const Error& e) {
      EXPECT_THAT(
          e.what(),
          ::testing::HasSubstr("'0.weight' is 40x8 Float in the file but 41x8 Float in the model"));
    }
  });
}

TEST_F(FullyShardedCheckpoint, MixedPrecisionFollowsTheRecipeAndSavesMasters) {
  const std::string p = path();
  run_torch_workers(2, [&] { check_mixed_precision(p); });
}

}  // namespace
}  // namespace lockstep::parallel
