// Layout-independent checkpoints of tensor- and pipeline-parallel models,
// optimizer state included: Adam trained for a few steps in one layout,
// saved, loaded in another layout or world size (real worker processes),
// must hold the single-process run's Adam moments (sliced like the
// parameters) and continue its losses. f64, relative tolerance 1e-9.
#include <fmt/format.h>
#include <gmock/gmock.h>

#include <filesystem>

#include "lockstep/base/error.h"
#include "lockstep/parallel/checkpoint.h"
#include "lockstep/parallel/checkpoint_dir.h"
#include "lockstep/parallel/optimizer_state.h"
#include "lockstep/parallel/pipeline.h"
#include "lockstep/parallel/tensor_parallel.h"
#include "lockstep/torch/memory.h"
#include "torch/helpers.h"

namespace lockstep::parallel {
namespace {

using lockstep::torch::testing::run_torch_workers;
namespace lt = lockstep::torch;
using ::torch::Tensor;

constexpr int kBefore = 3, kAfter = 3;
constexpr int64_t kIn = 6, kHidden = 10, kOut = 4;  // 10 = 4+3+3 on 3 ranks
constexpr uint64_t kSeed = 5, kOtherSeed = 77;      // resumed models start elsewhere

void use_f64() { ::torch::set_default_dtype(caffe2::TypeMeta::Make<double>()); }

// Built one statement at a time: the first layer must draw first.
::torch::nn::Sequential dense_model(uint64_t seed, int64_t hidden = kHidden) {
  ::torch::manual_seed(seed);
  ::torch::nn::Linear first(kIn, hidden);
  ::torch::nn::Linear second(hidden, kOut);
  return ::torch::nn::Sequential(first, ::torch::nn::Tanh(), second);
}

// The same names ("0.weight", "2.bias"...) and, from the same seed, the
// same whole matrices as dense_model.
::torch::nn::Sequential tensor_parallel_model(uint64_t seed) {
  ::torch::manual_seed(seed);
  ColumnParallelLinear first(ColumnParallelLinearOptions(kIn, kHidden));
  RowParallelLinear second(RowParallelLinearOptions(kHidden, kOut));
  return ::torch::nn::Sequential(first, ::torch::nn::Tanh(), second);
}

std::pair<Tensor, Tensor> batch(int step) {
  auto g = ::torch::make_generator<at::CPUGeneratorImpl>(700 + step);
  return {::torch::randn({8, kIn}, g), ::torch::randn({8, kOut}, g)};
}

Tensor mse(const Tensor& out, const Tensor& target) {
  return ::torch::nn::functional::mse_loss(out, target);
}

// One layout: a model (or pipeline stage), its parts and its optimizer.
struct Layout {
  enum Kind { kDense, kTensor, kPipeline } kind;
  ::torch::nn::Sequential model{nullptr};
  std::unique_ptr<Pipeline> pipe;
  std::unique_ptr<::torch::optim::Adam> adam;
  ModelParts parts;

  Layout(Kind k, uint64_t seed) : kind(k) {
    model = k == kTensor ? tensor_parallel_model(seed) : dense_model(seed);
    if (k == kPipeline) {
      pipe = std::make_unique<Pipeline>(model,
                                        PipelineOptions{.micro_batches = 2, .partition = {2, 1}});
      parts = model_parts(*pipe);
      adam = std::make_unique<::torch::optim::Adam>(pipe->parameters(), 0.05);
    } else {
      parts = model_parts(*model);
      adam = std::make_unique<::torch::optim::Adam>(model->parameters(), 0.05);
    }
  }

  // The batch's loss on every rank.
  double step(int s) {
    auto [x, y] = batch(s);
    adam->zero_grad();
    double loss = 0;
    if (pipe) {
      loss = lt::broadcast_object(pipe->train_step(x, y, mse), lt::size() - 1,
                                  fmt::format("loss.{}", s));
    } else {
      auto l = mse(model->forward(x), y);
      l.backward();
      loss = l.item<double>();
    }
    adam->step();
    return loss;
  }

  // The one call (Note [One checkpoint call]): the model as it is trained,
  // a Pipeline or a (tensor-parallel or plain) module; it asks for the layout.
  void save(const std::string& path, const lt::TrainingProgress& progress) {
    if (pipe)
      save_checkpoint(path, *pipe, *adam, progress);
    else
      save_checkpoint(path, *model, *adam, progress);
  }
  void save(CheckpointWriter& writer, const lt::TrainingProgress& progress) {
    if (pipe)
      writer.save(*pipe, *adam, progress);
    else
      writer.save(*model, *adam, progress);
  }
  bool load(const std::string& path, bool dir, lt::TrainingProgress& progress) {
    if (dir)
      return pipe ? load_checkpoint_dir(path, *pipe, *adam, progress)
                  : load_checkpoint_dir(path, *model, *adam, progress);
    // Qualified: lockstep::torch's load_checkpoint takes the same arguments
    // and argument-dependent lookup (TrainingProgress) would find it too.
    return pipe ? parallel::load_checkpoint(path, *pipe, *adam, progress)
                : parallel::load_checkpoint(path, *model, *adam, progress);
  }
};

// The uninterrupted single-process run: its losses, and its Adam state after
// kBefore steps by parameter name.
struct Reference {
  std::vector<double> losses;
  std::map<std::string, StateValues> state;
};

Reference reference() {
  Layout dense(Layout::kDense, kSeed);
  Reference r;
  for (int s = 0; s < kBefore + kAfter; ++s) {
    r.losses.push_back(dense.step(s));
    if (s + 1 != kBefore) continue;
    for (const auto& [name, p] : dense.parts.parameters)
      r.state[name] = state_values(*dense.adam->state().at(state_key(p)));
  }
  return r;
}

double relative_error(const Tensor& actual, const Tensor& expected) {
  return (actual - expected).abs().max().item<double>() /
         std::max(expected.abs().max().item<double>(), 1e-300);
}

// This rank's Adam state equals the reference's, sliced like its parameter.
void expect_reference_state(const Layout& layout, const Reference& ref) {
  for (const auto& [name, param] : layout.parts.parameters) {
    auto it = layout.adam->state().find(state_key(param));
    ASSERT_NE(it, layout.adam->state().end())
        << name << " has no Adam state on rank " << lt::rank();
    const StateValues mine = state_values(*it->second);
    const StateValues& whole = ref.state.at(name);
    ASSERT_EQ(mine.size(), whole.size()) << name;
    auto shard = layout.parts.shards.find(name);
    for (size_t k = 0; k < mine.size(); ++k) {
      const auto& [key, value] = mine[k];
      if (!value.isTensor()) {
        EXPECT_EQ(value, whole[k].second) << name << "." << key;
        continue;
      }
      Tensor expected = whole[k].second.toTensor();
      if (!value.toTensor().defined() || !expected.defined()) {  // Adam's unused max_exp_avg_sq
        EXPECT_EQ(value.toTensor().defined(), expected.defined()) << name << "." << key;
        continue;
      }
      if (shard != layout.parts.shards.end()) {
        auto [begin, length] = shard_range(shard->second.full_size, shard->second.group.rank(),
                                           shard->second.group.size());
        expected = expected.narrow(shard->second.dim, begin, length);
      }
      ASSERT_TRUE(value.toTensor().sizes().equals(expected.sizes())) << name << "." << key;
      EXPECT_LE(relative_error(value.toTensor(), expected), 1e-9)
          << name << "." << key << " on rank " << lt::rank() << " of " << lt::size();
    }
  }
}

void write(Layout::Kind kind, const std::string& path) {
  use_f64();
  Layout layout(kind, kSeed);
  for (int s = 0; s < kBefore; ++s) layout.step(s);
  layout.save(path, {.epoch = 0, .step = kBefore, .sampler = {}, .user = {}});
}

// The same layouts through checkpoint directories: CheckpointWriter::save
// of a tensor-parallel module or a Pipeline routes each slice to its
// tensor's writer (Note [Routed saves of model parts]); `async` snapshots
// and writes in the background.
void write_dir(Layout::Kind kind, const std::string& root, bool async) {
  use_f64();
  Layout layout(kind, kSeed);
  for (int s = 0; s < kBefore; ++s) layout.step(s);
  CheckpointWriter writer(root, {.keep_last = 0, .async = async});
  layout.save(writer, {.epoch = 0, .step = kBefore, .sampler = {}, .user = {}});
  layout.step(kBefore);  // training goes on while an async save writes
  writer.wait();
}

// `path` is a file, or with `dir` a checkpoint directory's root.
void resume_and_compare(Layout::Kind kind, const std::string& path, bool dir = false) {
  use_f64();
  const Reference ref = reference();
  Layout layout(kind, kOtherSeed);
  lt::TrainingProgress progress;
  ASSERT_TRUE(layout.load(path, dir, progress));
  EXPECT_EQ(progress.step, kBefore);
  expect_reference_state(layout, ref);
  for (int s = kBefore; s < kBefore + kAfter; ++s) {
    const double loss = layout.step(s);
    EXPECT_NEAR(loss, ref.losses[s], 1e-9 * std::max(1.0, ref.losses[s]))
        << "step " << s << " on rank " << lt::rank() << " of " << lt::size();
  }
}

class ModelCheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           fmt::format("lockstep-model-ckpt-{}-{}", ::getpid(), counter_++);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string path() const { return (dir_ / "checkpoint.pt").string(); }
  std::filesystem::path dir_;
  static inline int counter_ = 0;
};

TEST_F(ModelCheckpointTest, TensorParallelAtTwoResumesAtThreeAsDenseAndAsPipeline) {
  const std::string p = path();
  run_torch_workers(2, [&] { write(Layout::kTensor, p); });
  run_torch_workers(3, [&] { resume_and_compare(Layout::kTensor, p); });
  run_torch_workers(1, [&] { resume_and_compare(Layout::kDense, p); });
  run_torch_workers(2, [&] { resume_and_compare(Layout::kPipeline, p); });
}

TEST_F(ModelCheckpointTest, PipelineAtTwoResumesAsTensorParallelAndDense) {
  const std::string p = path();
  run_torch_workers(2, [&] { write(Layout::kPipeline, p); });
  run_torch_workers(2, [&] { resume_and_compare(Layout::kTensor, p); });
  run_torch_workers(1, [&] { resume_and_compare(Layout::kDense, p); });
}

TEST_F(ModelCheckpointTest, TensorParallelDirectoryAtTwoResumesAtThreeAsDenseAndAsPipeline) {
  const std::string root = (dir_ / "ckpt").string();
  run_torch_workers(2, [&] { write_dir(Layout::kTensor, root, /*async=*/false); });
  run_torch_workers(3, [&] { resume_and_compare(Layout::kTensor, root, true); });
  run_torch_workers(1, [&] { resume_and_compare(Layout::kDense, root, true); });
  run_torch_workers(2, [&] { resume_and_compare(Layout::kPipeline, root, true); });
}

TEST_F(ModelCheckpointTest, PipelineDirectoryAtTwoAsyncResumesAsTensorParallelAndDense) {
  const std::string root = (dir_ / "ckpt").string();
  run_torch_workers(2, [&] { write_dir(Layout::kPipeline, root, /*async=*/true); });
  run_torch_workers(2, [&] { resume_and_compare(Layout::kTensor, root, true); });
  run_torch_workers(1, [&] { resume_and_compare(Layout::kDense, root, true); });
}

// A pipeline stage's module, or the whole model a Pipeline was built from,
// is refused by every call that takes a module, naming the Pipeline
// overload, and nothing is written: each rank trains only its stage's
// layers, and rank 0 would write its stage's as the model (as it did before
// the Pipeline marked them). Once the Pipeline is gone, the model is plain.
TEST_F(ModelCheckpointTest, APipelineStageIsRefusedInFavourOfThePipeline) {
  const std::string p = path(), root = (dir_ / "ckpt").string();
  run_torch_workers(2, [&] {
    use_f64();
    Layout layout(Layout::kPipeline, kSeed);
    lt::TrainingProgress progress;
    const auto names_the_pipeline = ::testing::ThrowsMessage<InvalidArgument>(
        ::testing::HasSubstr("(path, pipeline, optimizer, progress)"));
    for (::torch::nn::Module* m :
         {static_cast<::torch::nn::Module*>(layout.pipe->module().ptr().get()),
          static_cast<::torch::nn::Module*>(layout.model.ptr().get())}) {
      EXPECT_THAT([&] { lt::save_checkpoint(p, *m, *layout.adam, progress); }, names_the_pipeline);
      EXPECT_THAT([&] { lt::load_checkpoint(p, *m, *layout.adam, progress); }, names_the_pipeline);
      EXPECT_THAT([&] { save_checkpoint(p, *m, *layout.adam, progress); }, names_the_pipeline);
      EXPECT_THAT([&] { parallel::load_checkpoint(p, *m, *layout.adam, progress); },
                  names_the_pipeline);
      EXPECT_THAT([&] { CheckpointWriter(root).save(*m, *layout.adam, progress); },
                  names_the_pipeline);
      EXPECT_THAT([&] { load_checkpoint_dir(root, *m, *layout.adam, progress); },
                  names_the_pipeline);
    }
    EXPECT_FALSE(std::filesystem::exists(p));
    EXPECT_EQ(newest_checkpoint_dir(root), "");
    layout.pipe.reset();
    save_checkpoint(p, *layout.model, *layout.adam, progress);
    EXPECT_EQ(std::filesystem::exists(p), lt::rank() == 0);
  });
}

// A 256 -> 512 -> 256 MLP, column- then row-parallel, after one Adam step
// (f32): large enough that holding the whole model shows in the allocations.
struct ParallelMlp {
  explicit ParallelMlp(uint64_t seed) : model(make(seed)), adam(model->parameters(), 0.01) {
    adam.zero_grad();
    model->forward(::torch::randn({4, 256})).pow(2).sum().backward();
    adam.step();
  }
  static ::torch::nn::Sequential make(uint64_t seed) {
    ::torch::manual_seed(seed);
    ColumnParallelLinear first(ColumnParallelLinearOptions(256, 512));
    RowParallelLinear second(RowParallelLinearOptions(512, 256));
    return ::torch::nn::Sequential(first, ::torch::nn::Tanh(), second);
  }
  // The whole model's parameters and their two Adam moments, in bytes.
  int64_t whole_bytes() {
    const ModelParts parts = model_parts(*model);
    int64_t whole = 0;
    for (const auto& [name, p] : parts.parameters) {
      auto shard = parts.shards.find(name);
      const int64_t numel = shard == parts.shards.end()
                                ? p.numel()
                                : p.numel() / p.size(shard->second.dim) * shard->second.full_size;
      whole += 3 * numel * static_cast<int64_t>(sizeof(float));
    }
    return whole;
  }
  ::torch::nn::Sequential model;
  ::torch::optim::Adam adam;
};

// The directory save of a tensor-parallel model never assembles it: what
// the saving thread allocates stays below the whole model and its Adam
// state (3x the parameters), where assembling them took at least that.
TEST_F(ModelCheckpointTest, TensorParallelDirectorySaveHoldsLessThanTheWholeModel) {
  const std::string root = (dir_ / "ckpt").string();
  run_torch_workers(2, [&] {
    ParallelMlp mlp(3);
    CheckpointWriter writer(root);
    lt::AllocationTracker tracker;
    writer.save(model_parts(*mlp.model), mlp.adam,
                {.epoch = 0, .step = 1, .sampler = {}, .user = {}});
    EXPECT_GT(tracker.allocations(), 0);
    EXPECT_LT(tracker.peak_bytes(), mlp.whole_bytes())
        << "rank " << lt::rank() << " of " << lt::size();
    std::printf("rank %d: save peak %lld B, whole model + Adam state %lld B\n", lt::rank(),
                static_cast<long long>(tracker.peak_bytes()),
                static_cast<long long>(mlp.whole_bytes()));
  });
  run_torch_workers(1, [&] {  // and it is the whole model
    ::torch::nn::Sequential dense(::torch::nn::Linear(256, 512), ::torch::nn::Tanh(),
                                  ::torch::nn::Linear(512, 256));
    ::torch::optim::Adam adam(dense->parameters(), 0.01);
    lt::TrainingProgress progress;
    ASSERT_TRUE(load_checkpoint_dir(root, *dense, adam, progress));
    EXPECT_EQ(progress.step, 1);
  });
}

// Its load reads only this rank's slices: at 4 ranks (a quarter each) below
// the whole model and its Adam state, which whole-model placeholders alone
// reach; and the slices and moments are the saved ones exactly.
TEST_F(ModelCheckpointTest, TensorParallelDirectoryLoadHoldsLessThanTheWholeModel) {
  const std::string root = (dir_ / "ckpt").string();
  run_torch_workers(4, [&] {
    ParallelMlp saved(3), loaded(4);
    CheckpointWriter(root).save(model_parts(*saved.model), saved.adam,
                                {.epoch = 0, .step = 1, .sampler = {}, .user = {}});
    lt::TrainingProgress progress;
    lt::AllocationTracker tracker;
    ASSERT_TRUE(load_checkpoint_dir(root, model_parts(*loaded.model), loaded.adam, progress));
    EXPECT_LT(tracker.peak_bytes(), loaded.whole_bytes()) << "rank " << lt::rank();
    std::printf("rank %d: load peak %lld B, whole model + Adam state %lld B\n", lt::rank(),
                static_cast<long long>(tracker.peak_bytes()),
                static_cast<long long>(loaded.whole_bytes()));
    EXPECT_EQ(progress.step, 1);
    const auto want = saved.model->parameters(), got = loaded.model->parameters();
    ASSERT_EQ(want.size(), got.size());
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_TRUE(::torch::equal(want[i], got[i]))
          << "parameter " << i << " on rank " << lt::rank();
      const auto& a = static_cast<const ::torch::optim::AdamParamState&>(
          *saved.adam.state().at(state_key(want[i])));
      const auto& b = static_cast<const ::torch::optim::AdamParamState&>(
          *loaded.adam.state().at(state_key(got[i])));
      EXPECT_TRUE(::torch::equal(a.exp_avg(), b.exp_avg())) << "exp_avg " << i;
      EXPECT_TRUE(::torch::equal(a.exp_avg_sq(), b.exp_avg_sq())) << "exp_avg_sq " << i;
      EXPECT_EQ(a.step(), b.step());
    }
  });
}

// A slice that does not fit its own shard is seen by its rank alone: that
// rank still takes part in the exchange, so every rank throws at once
// (rank 0 naming rank 1) instead of waiting for the deadlock timeout, and
// nothing is saved.
TEST_F(ModelCheckpointTest, ASliceThatDoesNotFitItsShardStopsEveryRankAlike) {
  const std::string root = (dir_ / "ckpt").string();
  run_torch_workers(2, [&] {
    use_f64();
    auto model = tensor_parallel_model(kSeed);
    ModelParts parts = model_parts(*model);
    if (lt::rank() == 1)  // "0.weight" is 5x6 here: one row too many, same description
      for (auto& [name, t] : parts.parameters)
        if (name == "0.weight") t = ::torch::zeros({6, 6});
    std::vector<Tensor> params;
    for (const auto& [name, t] : parts.parameters) params.push_back(t);
    ::torch::optim::Adam adam(params, 0.05);
    CheckpointWriter writer(root);
    const auto expected = lt::rank() == 1
                              ? ::testing::HasSubstr("rank 1's slice of 0.weight holds 36 elements")
                              : ::testing::HasSubstr("rank 1 could not take its share of step 2");
    EXPECT_THAT(
        [&] { writer.save(parts, adam, {.epoch = 0, .step = 2, .sampler = {}, .user = {}}); },
        ::testing::ThrowsMessage<Error>(expected));
    EXPECT_EQ(newest_checkpoint_dir(root), "");
  });
}

// A file lockstep::torch::save_checkpoint wrote for a plain model (what data
// parallelism writes) is a whole-model checkpoint too.
TEST_F(ModelCheckpointTest, PlainCheckpointResumesAsTensorParallel) {
  const std::string p = path();
  run_torch_workers(1, [&] {
    use_f64();
    Layout dense(Layout::kDense, kSeed);
    for (int s = 0; s < kBefore; ++s) dense.step(s);
    lt::save_checkpoint(p, *dense.model, *dense.adam,
                        {.epoch = 0, .step = kBefore, .sampler = {}, .user = {}});
  });
  run_torch_workers(3, [&] { resume_and_compare(Layout::kTensor, p); });
}

TEST_F(ModelCheckpointTest, ShapeMismatchNamesTheParameter) {
  const std::string p = path();
  run_torch_workers(2, [&] {
    use_f64();
    write(Layout::kTensor, p);
    auto wider = dense_model(kSeed, kHidden + 2);
    ::torch::optim::Adam adam(wider->parameters(), 0.05);
    lt::TrainingProgress progress;
    EXPECT_THAT([&] { load_checkpoint(p, model_parts(*wider), adam, progress); },
                ::testing::ThrowsMessage<Error>(::testing::HasSubstr(
                    "'0.weight' is 10x6 Double in the file but 12x6 Double in the model")));
    EXPECT_FALSE(load_checkpoint(p + ".missing", model_parts(*wider), adam, progress));
  });
}

}  // namespace
}  // namespace lockstep::parallel
