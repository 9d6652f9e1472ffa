// FullyShardedModel over a model's own module (FullyShardedUnit submodules,
// the forward the model's own) against data parallelism on the same model
// without units: the same parameters after K steps of SGD, Adam and LAMB in
// f32 (1e-6 relative) at 1, 2 and 4 ranks and in f64 (1e-12) at 2, a unit
// called twice per forward, peak bytes per rank below data parallelism's
// (AllocationTracker), checkpoints read by the plain model, mixed precision
// (bf16 compute, f32 masters) against the recipe by hand at 2 and 4 ranks,
// and named errors.
#include <fmt/format.h>
#include <gmock/gmock.h>

#include <optional>

#include "lockstep/base/error.h"
#include "lockstep/parallel/activation_checkpoint.h"
#include "lockstep/parallel/fully_sharded.h"
#include "lockstep/parallel/mesh.h"
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
namespace nn = ::torch::nn;
using ::torch::Tensor;

constexpr int kSteps = 6;

template <typename ModuleType>
nn::AnyModule unit_or_plain(bool unit, ModuleType module) {
  return unit ? nn::AnyModule(fsdp_unit(std::move(module))) : nn::AnyModule(std::move(module));
}

// y = x + fc2(relu(fc1(x))), fc1 and fc2 units of their own or not.
struct BlockImpl : nn::Module {
  BlockImpl(int64_t d, int64_t w, bool units)
      : fc1(unit_or_plain(units, nn::Linear(d, w))), fc2(unit_or_plain(units, nn::Linear(w, d))) {
    register_module("fc1", fc1.ptr());
    register_module("fc2", fc2.ptr());
  }
  Tensor forward(const Tensor& x) { return x + fc2.forward(::torch::relu(fc1.forward(x))); }
  nn::AnyModule fc1, fc2;
};
class Block : public nn::ModuleHolder<BlockImpl> {
 public:
  using nn::ModuleHolder<BlockImpl>::ModuleHolder;
};

struct Shape {
  bool units = true;          // FullyShardedUnit submodules (false: the plain model)
  bool inner_units = true;    // block2's fc1 and fc2 units (else block2 is root)
  bool twice = false;         // block1 runs twice per forward (shared weights)
  bool checkpointed = false;  // block1 is also Checkpointed (recomputed in backward)
  int64_t d = 16, w = 32;
};

// embed (unit) -> block1 (one unit) -> block2 (a unit per layer) -> * scale
// -> head; scale and head are outside every unit (the root unit).
struct NetImpl : nn::Module {
  explicit NetImpl(Shape s) : twice(s.twice) {
    ::torch::manual_seed(3);
    embed = unit_or_plain(s.units, nn::Linear(8, s.d));
    register_module("embed", embed.ptr());
    block1 = s.checkpointed ? unit_or_plain(s.units, Checkpointed(Block(s.d, s.w, false)))
                            : unit_or_plain(s.units, Block(s.d, s.w, false));
    register_module("block1", block1.ptr());
    block2 = register_module("block2", Block(s.d, s.w, s.units && s.inner_units));
    scale = register_parameter("scale", ::torch::rand({s.d}) + 0.5);
    head = register_module("head", nn::Linear(s.d, 4));
  }
  Tensor forward(const Tensor& x) {
    Tensor h = block1.forward(embed.forward(x));
    if (twice) h = block1.forward(h);
    return head->forward(block2->forward(h) * scale);
  }
  bool twice;
  nn::AnyModule embed, block1;
  Block block2{nullptr};
  Tensor scale;
  nn::Linear head{nullptr};
};
class Net : public nn::ModuleHolder<NetImpl> {
 public:
  using nn::ModuleHolder<NetImpl>::ModuleHolder;
};

Tensor train_data_parallel(const std::string& kind, Shape shape,
                           ::torch::ScalarType dtype = ::torch::kFloat32) {
  shape.units = false;
  Net net(shape);
  net->to(dtype);
  auto opt = make_optimizer(kind, net->parameters());
  lt::DistributedOptimizer dist(*opt, *net);
  for (int s = 0; s < kSteps; ++s) {
    auto [x, y] = local_batch(s, dtype);
    dist.zero_grad();
    ::torch::nn::functional::mse_loss(net->forward(x), y).backward();
    dist.step();
  }
  return flat_parameters(*net);
}

// The model's own forward (its output, in the compute dtype with
// compute_dtype, cast to `dtype` for the loss), the model's parameters made
// whole at the end.
Tensor train_fsdp(Net& net, FullyShardedModel& fsdp, ::torch::optim::Optimizer& opt, int first,
                  int steps, ::torch::ScalarType dtype = ::torch::kFloat32) {
  for (int s = first; s < first + steps; ++s) {
    auto [x, y] = local_batch(s, dtype);
    fsdp.zero_grad();
    ::torch::nn::functional::mse_loss(net->forward(x).to(dtype), y).backward();
    fsdp.step(opt);
  }
  fsdp.gather_full();
  Tensor flat = flat_parameters(*net).clone();
  fsdp.release_full();
  return flat;
}

// 1e-6 relative in f32, 1e-12 in f64 (the bound).
void check_equals_data_parallel(bool prefetch, ::torch::ScalarType dtype = ::torch::kFloat32) {
  const double tolerance = dtype == ::torch::kFloat64 ? 1e-12 : 1e-6;
  for (const std::string kind : {"sgd", "adam", "lamb"})
    for (bool twice : {false, true}) {
      const Shape shape{.twice = twice};
      const Tensor expected = train_data_parallel(kind, shape, dtype);
      Net net(shape);
      net->to(dtype);
      FullyShardedModel fsdp(
          net, {.granularity = kind == "lamb" ? ShardGranularity::kTensor : ShardGranularity::kAuto,
                .prefetch = prefetch,
                .name = fmt::format("m{}{}{}{}", kind, twice, prefetch, c10::toString(dtype))});
      EXPECT_EQ(fsdp.units(), 5);  // embed, block1, block2.fc1, block2.fc2, root
      auto opt = make_optimizer(kind, fsdp.parameters());
      const Tensor actual = train_fsdp(net, fsdp, *opt, 0, kSteps, dtype);
      EXPECT_EQ(actual.scalar_type(), dtype);
      EXPECT_LE(relative_error(actual, expected), tolerance)
          << kind << (twice ? " block1 twice" : "") << " in " << c10::toString(dtype) << " on "
          << lt::size() << " ranks";
    }
}

// Units made whole by gather_full() and kept whole through training (the
// model evaluated with its own forward between steps, as the header
// allows) take every step's new values: the kept units are gathered again
// after the optimizer's step, not only the root, so the next forward does
// not run on the values of the step before.
void check_kept_whole_units_follow_the_steps() {
  const Shape shape{};
  const Tensor expected = train_data_parallel("adam", shape);
  Net net(shape);
  FullyShardedModel fsdp(net, {.name = "kept"});
  auto opt = make_optimizer("adam", fsdp.parameters());
  fsdp.gather_full();
  for (int s = 0; s < kSteps; ++s) {
    auto [x, y] = local_batch(s);
    fsdp.zero_grad();
    ::torch::nn::functional::mse_loss(net->forward(x), y).backward();
    fsdp.step(*opt);
  }
  EXPECT_LE(relative_error(flat_parameters(*net), expected), 1e-6)
      << "whole units kept on " << lt::size() << " ranks";
  fsdp.release_full();
}

// Saved from FSDP over the module, the plain model's parameters (no units,
// an Adam of its own) read from the file.
Tensor read_by_the_plain_model(const std::string& path, FullyShardedModel& fsdp,
                               ::torch::optim::Adam& adam) {
  lt::TrainingProgress progress;
  save_checkpoint(path, fsdp, adam, progress);
  lt::barrier();  // rank 0 wrote it
  Net plain(Shape{.units = false});
  ::torch::optim::Adam plain_adam(plain->parameters(), 0.01);
  EXPECT_TRUE(lt::load_checkpoint(path, *plain, plain_adam, progress));
  return flat_parameters(*plain);
}

// Mixed precision, checked as the Sequential path's is (fully_sharded_test.cc,
// check_mixed_precision): the recipe written out by hand on whole replicas
// of the plain model (bf16 forward and backward from the input cast to bf16,
// f32 gradients averaged, Adam on f32 masters) against FSDP with
// compute_dtype = bf16, whose units and root are bf16 and whose segments
// are f32; the masters, read back through a checkpoint into the plain f32
// model, agree within 1e-6; training goes on after the save.
void check_mixed_precision(const std::string& path) {
  const Tensor expected =
      testing::mixed_precision_by_hand([] { return Net(Shape{.units = false}); }, kSteps, "mmp");
  Net net(Shape{});
  FullyShardedModel fsdp(net, {.compute_dtype = ::torch::kBFloat16, .name = "mixed"});
  for (const auto& p : net->named_parameters())  // units' and root's (scale, head) alike
    EXPECT_EQ(p.value().scalar_type(), ::torch::kBFloat16) << p.key();
  ::torch::optim::Adam adam(fsdp.parameters(), 0.01);
  EXPECT_EQ(fsdp.parameters()[0].scalar_type(), ::torch::kFloat32);
  train_fsdp(net, fsdp, adam, 0, kSteps);
  const Tensor read = read_by_the_plain_model(path, fsdp, adam);
  EXPECT_EQ(read.scalar_type(), ::torch::kFloat32);
  EXPECT_LE(relative_error(read, expected), 1e-6) << "on " << lt::size() << " ranks";
  EXPECT_EQ(net->named_parameters()["scale"].scalar_type(), ::torch::kBFloat16);
  train_fsdp(net, fsdp, adam, kSteps, 1);  // the hooks survived the checkpoint's f32 view
  lt::barrier();  // every rank read the file before the next run replaces it
}

// Activation checkpointing inside a unit (the recomputation reads the
// parameters the unit's backward gathered) and HSDP (replicate=2 x shard=2,
// 4 ranks) also compute what data parallelism computes.
void check_checkpointed_and_hybrid(bool hybrid) {
  const Shape shape{.checkpointed = true};
  const Tensor expected = train_data_parallel("adam", shape);
  Net net(shape);
  FullyShardedOptions o{.name = fmt::format("cph{}", hybrid)};
  std::optional<Mesh> mesh;
  if (hybrid) {
    mesh.emplace(std::vector<MeshDim>{{"replicate", 2}, {"shard", 2}});
    o.group = mesh->group("shard");
    o.replicate = mesh->group("replicate");
  }
  FullyShardedModel fsdp(net, o);
  auto opt = make_optimizer("adam", fsdp.parameters());
  EXPECT_LE(relative_error(train_fsdp(net, fsdp, *opt, 0, kSteps), expected), 1e-6)
      << "checkpointed block" << (hybrid ? ", HSDP 2 x 2" : "");
}

// The wrapper keeps the wrapped modules' names: the plain model's.
void check_names_are_the_plain_models() {
  std::vector<std::string> plain, sharded;
  for (const auto& p : Net(Shape{.units = false})->named_parameters()) plain.push_back(p.key());
  for (const auto& p : Net(Shape{})->named_parameters()) sharded.push_back(p.key());
  EXPECT_EQ(plain, sharded);
}

// Peak tracked bytes of 3 Adam steps, counting what the strategy holds when
// they start (built inside the tracker's window).
int64_t peak_bytes(bool sharded, int64_t* unit_bytes) {
  const Shape shape{.units = sharded, .d = 64, .w = 512};
  lt::AllocationTracker tracker;
  Net net(shape);
  std::unique_ptr<FullyShardedModel> fsdp;
  if (sharded) fsdp = std::make_unique<FullyShardedModel>(net, FullyShardedOptions{.name = "peak"});
  ::torch::optim::Adam adam(sharded ? fsdp->parameters() : net->parameters(), 0.01);
  std::unique_ptr<lt::DistributedOptimizer> dist;
  if (!sharded) dist = std::make_unique<lt::DistributedOptimizer>(adam, *net);
  for (int s = 0; s < 3; ++s) {
    auto [x, y] = local_batch(s);
    sharded ? fsdp->zero_grad() : dist->zero_grad();
    ::torch::nn::functional::mse_loss(net->forward(x), y).backward();
    sharded ? fsdp->step(adam) : dist->step();
  }
  if (sharded) *unit_bytes = fsdp->max_unit_elements() * 4;
  return tracker.peak_bytes();
}

// Below data parallelism's, within its 1/N plus one unit's parameters,
// gradients and Adam state (4 x its bytes) and the root kept whole.
void check_memory_below_data_parallel() {
  int64_t unit = 0;
  const int64_t dense = peak_bytes(false, &unit);
  const int64_t sharded = peak_bytes(true, &unit);
  const int64_t root = (64 * 4 + 4 + 64) * 4;  // head and scale
  EXPECT_LT(sharded, dense);
  EXPECT_LE(sharded, dense / lt::size() + 4 * unit + 4 * root);
  if (lt::rank() == 0)
    fmt::print(
        "[memory] module at {} ranks: data parallel peak {} B, FSDP peak {} B: ratio "
        "{:.3f}; largest unit {} B\n",
        lt::size(), dense, sharded, static_cast<double>(sharded) / dense, unit);
}

// Prefetch is visible in memory: a unit's buffer is allocated while the one
// before it (forward) or after it (backward) computes. From the second step
// on (the first records the order), the peak of a training step and that of
// an evaluation forward exceed those without prefetch.
std::pair<int64_t, int64_t> steady_peaks(bool prefetch) {
  Net net(Shape{.d = 64, .w = 512});
  FullyShardedModel fsdp(net, {.prefetch = prefetch, .name = fmt::format("steady{}", prefetch)});
  ::torch::optim::SGD sgd(fsdp.parameters(), 0.01);
  lt::AllocationTracker tracker;
  int64_t start = 0;
  for (int s = 0; s < 3; ++s) {
    if (s == 1) {
      tracker.reset_peak();
      start = tracker.current_bytes();
    }
    auto [x, y] = local_batch(s);
    fsdp.zero_grad();
    ::torch::nn::functional::mse_loss(net->forward(x), y).backward();
    fsdp.step(sgd);
  }
  const int64_t step = tracker.peak_bytes() - start;
  ::torch::NoGradGuard no_grad;
  tracker.reset_peak();
  start = tracker.current_bytes();
  net->forward(local_batch(0).first);
  return {step, tracker.peak_bytes() - start};
}

void check_prefetch_gathers_ahead() {
  const auto [step, forward] = steady_peaks(true);
  const auto [step_without, forward_without] = steady_peaks(false);
  EXPECT_GT(step, step_without) << "no unit gathered ahead in backward";
  EXPECT_GT(forward, forward_without) << "no unit gathered ahead in forward";
  if (lt::rank() == 0)
    fmt::print("[prefetch] peak with/without prefetch: step {}/{} B, forward {}/{} B\n", step,
               step_without, forward, forward_without);
}

// Saved from FSDP over the module, read by the plain model (the same names)
// and by another FSDP over the module (the root unit's values included).
void check_checkpoint_round_trip(const std::string& path) {
  Net net(Shape{});
  FullyShardedModel fsdp(net, {.name = "ckm"});
  ::torch::optim::Adam adam(fsdp.parameters(), 0.01);
  const Tensor trained = train_fsdp(net, fsdp, adam, 0, 2);
  EXPECT_TRUE(::torch::equal(read_by_the_plain_model(path, fsdp, adam), trained));
  lt::TrainingProgress progress;
  Net other(Shape{});
  {
    ::torch::NoGradGuard no_grad;
    for (auto& p : other->parameters()) p.mul_(2);  // the load must replace these
  }
  FullyShardedModel resumed(other, {.name = "ckm2"});
  ::torch::optim::Adam resumed_adam(resumed.parameters(), 0.01);
  EXPECT_TRUE(load_checkpoint(path, resumed, resumed_adam, progress));
  EXPECT_TRUE(::torch::equal(train_fsdp(other, resumed, resumed_adam, 2, 0), trained));
  // Both continue alike (the root's loaded values are used, not stale ones).
  EXPECT_TRUE(::torch::equal(train_fsdp(other, resumed, resumed_adam, 2, 2),
                             train_fsdp(net, fsdp, adam, 2, 2)));
}

void check_named_errors() {
  try {  // rank 1 leaves block2's layers unwrapped: another structure
    Net net(Shape{.inner_units = lt::rank() != 1});
    FullyShardedModel fsdp(net, {.name = "structure"});
    ADD_FAILURE() << "different structures were accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr(
                              "group rank 1 has 'block2.fc1.weight [32, 16] Float in unit root' "
                              "where group rank 0 has 'block2.fc1.weight [32, 16] Float in unit "
                              "2 (block2.fc1)'"));
  }
  EXPECT_THAT([] { FullyShardedModel fsdp(Net(Shape{.units = false})); },
              ::testing::ThrowsMessage<InvalidArgument>(
                  ::testing::HasSubstr("no FullyShardedUnit submodule")));
  auto nested = nn::Sequential(fsdp_unit(nn::Sequential(fsdp_unit(nn::Linear(4, 4)))));
  EXPECT_THAT([&] { FullyShardedModel fsdp(std::shared_ptr<nn::Module>(nested.ptr())); },
              ::testing::ThrowsMessage<InvalidArgument>(::testing::HasSubstr(
                  "unit '0' contains another FullyShardedUnit ('0.0'); nested units")));
  auto tied = std::make_shared<nn::Module>();  // a unit's weight registered outside it too
  auto fc = tied->register_module("fc", fsdp_unit(nn::Linear(4, 4)));
  tied->register_parameter("w", fc->named_parameters()["weight"]);
  EXPECT_THAT([&] { FullyShardedModel fsdp(tied); },
              ::testing::ThrowsMessage<InvalidArgument>(::testing::HasSubstr(
                  "w is a parameter of unit 'fc' that is also registered outside it")));
  EXPECT_THAT([] { FullyShardedModel fsdp(Net(Shape{}), {.compute_dtype = ::torch::kInt32}); },
              ::testing::ThrowsMessage<InvalidArgument>(
                  ::testing::HasSubstr("compute_dtype Int is not a floating type")));
  Net net(Shape{});
  FullyShardedModel fsdp(net, {.name = "errors"});
  EXPECT_THAT(
      [&] {
        fsdp.forward(::torch::ones({2, 8}));
      },
      ::testing::ThrowsMessage<InvalidArgument>(::testing::HasSubstr("own forward")));
  EXPECT_THAT([&] { fsdp.module(); },
              ::testing::ThrowsMessage<InvalidArgument>(::testing::HasSubstr("use wrapped()")));
  EXPECT_THAT([&] { FullyShardedModel again(net, {.name = "again"}); },
              ::testing::ThrowsMessage<InvalidArgument>(
                  ::testing::HasSubstr("already belongs to another FullyShardedModel")));
}

TEST(FullyShardedModule, OneRankIsThePlainModel) {
  run_torch_workers(1, [] { check_equals_data_parallel(/*prefetch=*/true); });
}

TEST(FullyShardedModule, TwoRanksComputeWhatDataParallelismComputes) {
  run_torch_workers(2, [] {
    check_names_are_the_plain_models();
    check_equals_data_parallel(/*prefetch=*/true);
    check_equals_data_parallel(/*prefetch=*/true, ::torch::kFloat64);
    check_checkpointed_and_hybrid(false);
    check_memory_below_data_parallel();
    check_prefetch_gathers_ahead();
    check_kept_whole_units_follow_the_steps();
    check_named_errors();
  });
}

TEST(FullyShardedModule, FourRanksComputeWhatDataParallelismComputes) {
  run_torch_workers(4, [] {
    check_equals_data_parallel(/*prefetch=*/false);
    check_checkpointed_and_hybrid(true);
    check_memory_below_data_parallel();
  });
}

TEST(FullyShardedModule, CheckpointsAreThePlainModels) {
  const testing::CheckpointDir dir("fsdp-module");
  run_torch_workers(2, [&] { check_checkpoint_round_trip(dir.path()); });
}

TEST(FullyShardedModule, MixedPrecisionFollowsTheRecipeAndSavesMasters) {
  const testing::CheckpointDir dir("fsdp-module-mixed");
  for (int ranks : {2, 4}) run_torch_workers(ranks, [&] { check_mixed_precision(dir.path()); });
}

}  // namespace
}  // namespace lockstep::parallel
