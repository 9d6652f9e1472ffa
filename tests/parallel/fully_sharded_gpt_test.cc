// FullyShardedModel for a GPT recipe (issue 39): gradient clipping
// (clip_grad_norm, 2-norm and max norm) changes the update exactly as
// data parallelism's synchronize() + torch::nn::utils::clip_grad_norm_ on
// whole replicas and returns the same norm; k backward passes per step()
// equal backward_passes_per_step = k; a character-GPT-like toy with the
// head tied to the token embedding (one unit run twice, or the embedding in
// the root unit) trains as data parallelism does, with accumulation and
// clipping, also under HSDP; and the raw LibTorch crashes where lockstep
// knows the cause are named InvalidArguments.
#include <fmt/format.h>
#include <gmock/gmock.h>

#include <functional>
#include <limits>
#include <optional>

#include "lockstep/base/error.h"
#include "lockstep/parallel/fully_sharded.h"
#include "lockstep/parallel/mesh.h"
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
namespace F = ::torch::nn::functional;
using ::torch::Tensor;

constexpr int kSteps = 5;
constexpr double kInf = std::numeric_limits<double>::infinity();

// How a run treats gradients: k backward passes per step (the loss scaled
// by 1/k), then a clip to max_norm in norm_type unless max_norm is 0.
struct Recipe {
  int passes = 1;
  double max_norm = 0;
  double norm_type = 2;
};

// Both strategies' training step, the model's forward and loss given:
// backward `passes` times, clip, step; the norms clip returned per step.
struct Trainer {
  std::function<Tensor(int batch)> loss;  // one micro-batch's loss
  std::function<double(double, double)> clip;
  std::function<void()> zero_grad, step;

  std::vector<double> run(const Recipe& r, int steps) {
    std::vector<double> norms;
    for (int s = 0; s < steps; ++s) {
      zero_grad();
      for (int j = 0; j < r.passes; ++j) (loss(s * r.passes + j) / r.passes).backward();
      if (r.max_norm > 0) norms.push_back(clip(r.max_norm, r.norm_type));
      step();
    }
    return norms;
  }
};

// Data parallelism as the docs say to clip: synchronize() (the averaged
// gradients in .grad), torch::nn::utils::clip_grad_norm_, step().
std::vector<double> train_dp(nn::Module& model, const Recipe& r, const std::string& kind,
                             const std::function<Tensor(int)>& loss, int steps = kSteps) {
  auto opt = make_optimizer(kind, model.parameters());
  lt::DistributedOptimizerOptions o;
  o.backward_passes_per_step = r.passes;
  lt::DistributedOptimizer dist(*opt, model, o);
  Trainer t{loss,
            [&](double max_norm, double type) {
              dist.synchronize();
              return nn::utils::clip_grad_norm_(model.parameters(), max_norm, type);
            },
            [&] { dist.zero_grad(); }, [&] { dist.step(); }};
  return t.run(r, steps);
}

std::vector<double> train_fsdp(FullyShardedModel& fsdp, const Recipe& r,
                               ::torch::optim::Optimizer& opt,
                               const std::function<Tensor(int)>& loss, int steps = kSteps) {
  Trainer t{loss, [&](double max_norm, double type) { return fsdp.clip_grad_norm(max_norm, type); },
            [&] { fsdp.zero_grad(); }, [&] { fsdp.step(opt); }};
  return t.run(r, steps);
}

Tensor whole(FullyShardedModel& fsdp) {
  fsdp.gather_full();
  Tensor flat = flat_parameters(fsdp.wrapped()).clone();
  fsdp.release_full();
  return flat;
}

void expect_same_norms(const std::vector<double>& actual, const std::vector<double>& expected,
                       const Recipe& r, const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  for (size_t s = 0; s < actual.size(); ++s) {
    EXPECT_GT(expected[s], r.max_norm) << what << ": step " << s << " was not clipped";
    EXPECT_NEAR(actual[s], expected[s], 1e-6 * expected[s]) << what << ": step " << s;
  }
}

// ---- the Sequential path: an MLP on fsdp_helpers' batches

nn::Sequential make_mlp() {
  ::torch::manual_seed(3);
  return nn::Sequential(nn::Linear(8, 40), nn::Tanh(), nn::Linear(40, 24), nn::Tanh(),
                        nn::Linear(24, 4));
}

Tensor mlp_loss(const std::function<Tensor(Tensor)>& forward, int batch) {
  auto [x, y] = local_batch(batch);
  return F::mse_loss(forward(x), y);
}

// Every recipe against data parallelism: parameters to 1e-6, norms to 1e-6.
void check_mlp(const Recipe& r, const std::string& kind, FullyShardedOptions o = {}) {
  auto dense = make_mlp();
  const auto expected_norms = train_dp(*dense, r, kind, [&](int b) {
    return mlp_loss([&](Tensor x) { return dense->forward(x); }, b);
  });
  auto model = make_mlp();
  o.name = fmt::format("{}.{}{}{}{}", o.name, kind, r.passes, r.max_norm, r.norm_type);
  FullyShardedModel fsdp(model, o);
  auto opt = make_optimizer(kind, fsdp.parameters());
  const auto norms = train_fsdp(
      fsdp, r, *opt, [&](int b) { return mlp_loss([&](Tensor x) { return fsdp.forward(x); }, b); });
  const std::string what = fmt::format("{} passes={} max_norm={} norm_type={} on {} ranks", kind,
                                       r.passes, r.max_norm, r.norm_type, lt::size());
  EXPECT_LE(relative_error(whole(fsdp), flat_parameters(*dense)), 1e-6) << what;
  expect_same_norms(norms, expected_norms, r, what);
}

void check_mlp_recipes(FullyShardedOptions o) {
  for (double type : {2.0, kInf}) check_mlp({.max_norm = 0.05, .norm_type = type}, "sgd", o);
  for (int k : {2, 4}) {
    check_mlp({.passes = k}, "sgd", o);
    check_mlp({.passes = k}, "adam", o);
  }
  check_mlp({.passes = 2, .max_norm = 0.05}, "adam", o);
  o.granularity = ShardGranularity::kTensor;  // whole parameters per rank (LAMB)
  check_mlp({.passes = 2, .max_norm = 0.05}, "lamb", o);
}

// ---- a character GPT: token embedding, a position table and the final
// norm in the root, two residual MLP blocks as units, the head tied to the
// token embedding.

constexpr int64_t kVocab = 13, kContext = 6, kWidth = 16;

enum class Tie {
  kNone,     // the plain model (no units): data parallelism's
  kOneUnit,  // the embedding and the head are one module, one unit run twice
  kRoot,     // the embedding outside every unit; the head reads it in the root
};

// Looks tokens up (integer input) or projects onto the vocabulary (floating
// input) with the same weight: both uses inside one module.
struct TiedEmbeddingImpl : nn::Module {
  TiedEmbeddingImpl() : tok(register_module("tok", nn::Embedding(kVocab, kWidth))) {}
  Tensor forward(const Tensor& x) {
    return x.is_floating_point() ? F::linear(x, tok->weight) : tok->forward(x);
  }
  nn::Embedding tok;
};
class TiedEmbedding : public nn::ModuleHolder<TiedEmbeddingImpl> {  // TORCH_MODULE, spelled out
 public:
  using nn::ModuleHolder<TiedEmbeddingImpl>::ModuleHolder;
};

struct MlpBlockImpl : nn::Module {
  MlpBlockImpl()
      : fc1(register_module("fc1", nn::Linear(kWidth, 3 * kWidth))),
        fc2(register_module("fc2", nn::Linear(3 * kWidth, kWidth))) {}
  Tensor forward(const Tensor& x) { return x + fc2(::torch::tanh(fc1(x))); }
  nn::Linear fc1, fc2;
};
class MlpBlock : public nn::ModuleHolder<MlpBlockImpl> {  // TORCH_MODULE, spelled out
 public:
  using nn::ModuleHolder<MlpBlockImpl>::ModuleHolder;
};

template <typename M>
nn::AnyModule maybe_unit(bool unit, M module) {
  return unit ? nn::AnyModule(fsdp_unit(std::move(module))) : nn::AnyModule(std::move(module));
}

struct GptImpl : nn::Module {
  explicit GptImpl(Tie tie) {
    ::torch::manual_seed(11);
    tied = TiedEmbedding();
    embed = maybe_unit(tie == Tie::kOneUnit, tied);
    register_module("wte", embed.ptr());
    pos = register_parameter("wpe", ::torch::randn({kContext, kWidth}) * 0.1);
    for (int b = 0; b < 2; ++b) {
      blocks.push_back(maybe_unit(tie != Tie::kNone, MlpBlock()));
      register_module(fmt::format("h{}", b), blocks.back().ptr());
    }
    ln = register_module("ln_f", nn::LayerNorm(nn::LayerNormOptions({kWidth})));
  }
  Tensor forward(const Tensor& ids) {
    Tensor h = embed.forward(ids) + pos;
    for (auto& block : blocks) h = block.forward(h);
    return embed.forward(ln(h));  // the head: the token embedding's weight
  }
  TiedEmbedding tied{nullptr};
  nn::AnyModule embed;
  std::vector<nn::AnyModule> blocks;
  Tensor pos;
  nn::LayerNorm ln{nullptr};
};
class Gpt : public nn::ModuleHolder<GptImpl> {  // TORCH_MODULE, spelled out
 public:
  using nn::ModuleHolder<GptImpl>::ModuleHolder;
};

// This rank's sequences of micro-batch b (8 per global batch), next-token targets.
Tensor gpt_loss(Gpt& gpt, int b) {
  auto g = ::torch::make_generator<at::CPUGeneratorImpl>(900 + b);
  auto text = ::torch::randint(kVocab, {testing::kGlobalBatch, kContext + 1}, g);
  const int64_t rows = testing::kGlobalBatch / lt::size();
  text = text.narrow(0, lt::rank() * rows, rows);
  auto logits = gpt->forward(text.narrow(1, 0, kContext));
  return F::cross_entropy(logits.reshape({-1, kVocab}), text.narrow(1, 1, kContext).reshape({-1}));
}

void check_gpt(Tie tie, const Recipe& r, FullyShardedOptions o = {}) {
  Gpt dense(Tie::kNone);
  const auto expected_norms =
      train_dp(*dense, r, "adam", [&](int b) { return gpt_loss(dense, b); });
  Gpt gpt(tie);
  o.name = fmt::format("gpt{}{}{}{}", static_cast<int>(tie), r.passes, r.max_norm, o.name);
  FullyShardedModel fsdp(gpt, o);
  EXPECT_EQ(fsdp.units(), tie == Tie::kOneUnit ? 4 : 3);  // + the root
  auto opt = make_optimizer("adam", fsdp.parameters());
  const auto norms = train_fsdp(fsdp, r, *opt, [&](int b) { return gpt_loss(gpt, b); });
  const std::string what =
      fmt::format("tie {} passes={} max_norm={} {} on {} ranks", static_cast<int>(tie), r.passes,
                  r.max_norm, o.name, lt::size());
  EXPECT_LE(relative_error(whole(fsdp), flat_parameters(*dense)), 1e-6) << what;
  expect_same_norms(norms, expected_norms, r, what);
}

void check_gpt_recipes() {
  for (Tie tie : {Tie::kOneUnit, Tie::kRoot}) {
    check_gpt(tie, {});
    check_gpt(tie, {.passes = 2, .max_norm = 0.1});
  }
  check_gpt(Tie::kOneUnit, {.max_norm = 0.1, .norm_type = kInf});
}

void check_gpt_hybrid() {
  Mesh mesh({{"replicate", 2}, {"shard", 2}});
  FullyShardedOptions o{
      .group = mesh.group("shard"), .replicate = mesh.group("replicate"), .name = "hsdp"};
  check_gpt(Tie::kOneUnit, {.passes = 2, .max_norm = 0.1}, o);
  check_gpt(Tie::kRoot, {.max_norm = 0.1, .norm_type = kInf}, o);
}

// ---- named errors where LibTorch would crash or lockstep would go wrong

// A layer holding another layer's weight without registering it (a head
// tied to an embedding in another unit).
struct BorrowedHeadImpl : nn::Module {
  explicit BorrowedHeadImpl(nn::Linear from) : from(std::move(from)) {}
  Tensor forward(const Tensor& x) { return F::linear(x, from->weight.t()); }
  nn::Linear from;
};
class BorrowedHead : public nn::ModuleHolder<BorrowedHeadImpl> {  // TORCH_MODULE, spelled out
 public:
  using nn::ModuleHolder<BorrowedHeadImpl>::ModuleHolder;
};

void expect_invalid(const std::function<void()>& body, const std::vector<std::string>& texts) {
  try {  // by hand: EXPECT_THAT(Throws) runs a failing callable twice
    body();
    ADD_FAILURE() << "no InvalidArgument saying: " << texts[0];
  } catch (const InvalidArgument& e) {
    for (const auto& text : texts) EXPECT_THAT(e.what(), ::testing::HasSubstr(text));
  }
}

void check_reads_outside_the_unit_are_named() {
  ::torch::manual_seed(1);
  nn::Linear first(8, 6);
  nn::Sequential seq(first, nn::Tanh(), BorrowedHead(first));
  FullyShardedModel fsdp(seq, {.name = "borrow"});
  expect_invalid(
      [&] {
        fsdp.forward(::torch::ones({2, 8}));
      },
      {"layer 2 (in unit 2 (layers 2..2)) read a parameter outside its unit, where it "
       "holds no memory (",
       "0.weight (unit 0 (layers 0..0))", "Tied weights"});
  auto net = std::make_shared<nn::Module>();  // a unit's forward reads another unit's weight
  auto fc = net->register_module("fc", fsdp_unit(nn::Linear(8, 6)));
  nn::Linear inner(std::dynamic_pointer_cast<nn::LinearImpl>(fc->wrapped()));
  auto head = net->register_module("head", fsdp_unit(BorrowedHead(inner)));
  FullyShardedModel sharded(net, {.name = "borrow2"});
  expect_invalid(
      [&] {
        head->forward(::torch::ones({2, 6}));
      },
      {"the forward of unit 1 (head) read a parameter outside its unit",
       "fc.weight (unit 0 (fc))"});
}

// Over a module with compute_dtype = bf16, a loss on the bf16 output warns
// once, at the first backward; a loss on the output cast to f32 does not.
std::string stderr_of_two_steps(bool cast) {
  auto net = std::make_shared<nn::Module>();
  auto fc = net->register_module("fc", fsdp_unit(nn::Linear(8, 4)));
  FullyShardedModel fsdp(
      net, {.compute_dtype = ::torch::kBFloat16, .name = fmt::format("bf16loss{}", cast)});
  ::torch::optim::SGD sgd(fsdp.parameters(), 0.1);
  ::testing::internal::CaptureStderr();
  try {
    for (int s = 0; s < 2; ++s) {
      auto [x, y] = local_batch(s);
      fsdp.zero_grad();
      Tensor out = fc->forward(x);
      // by hand: LibTorch 1.13 has no bf16 mse_loss on the CPU
      (cast ? F::mse_loss(out.to(::torch::kFloat32), y) : (out - y.to(out.dtype())).pow(2).mean())
          .backward();
      fsdp.step(sgd);
    }
  } catch (...) {
    ::testing::internal::GetCapturedStderr();  // the failure shows
    throw;
  }
  return ::testing::internal::GetCapturedStderr();
}

void check_a_bf16_loss_warns_once() {
  const std::string quantized = stderr_of_two_steps(false);
  EXPECT_THAT(quantized, ::testing::HasSubstr("the loss is computed in BFloat16"));
  EXPECT_EQ(quantized.find("the loss is computed"), quantized.rfind("the loss is computed"))
      << "warned more than once: " << quantized;
  EXPECT_THAT(stderr_of_two_steps(true), ::testing::Not(::testing::HasSubstr("the loss is")));
}

void check_named_errors() {
  check_reads_outside_the_unit_are_named();
  check_a_bf16_loss_warns_once();
  auto model = make_mlp();
  FullyShardedModel fsdp(model, {.name = "errs"});
  expect_invalid([&] { lt::broadcast_parameters(*model, 0); },
                 {"broadcast_parameters: 0.weight holds no memory: it is sharded by a "
                  "FullyShardedModel"});
  ::torch::optim::SGD sgd(fsdp.parameters(), 0.1);
  fsdp.zero_grad();
  mlp_loss([&](Tensor x) { return fsdp.forward(x); }, 0).backward();
  expect_invalid([&] { fsdp.clip_grad_norm(1.0, 0.0); }, {"norm_type=0 must be > 0"});
  fsdp.clip_grad_norm(1.0);
  expect_invalid([&] { mlp_loss([&](Tensor x) { return fsdp.forward(x); }, 1).backward(); },
                 {"a backward after clip_grad_norm() and before step()"});
  fsdp.step(sgd);  // and training goes on
  fsdp.zero_grad();
  mlp_loss([&](Tensor x) { return fsdp.forward(x); }, 1).backward();
  fsdp.step(sgd);
}

// Rank 1 skips a forward (it waits in a barrier): rank 0's all-gather of
// unit 0 fails as a deadlock whose message names the unit's module and the
// rule.
void check_a_skipped_forward_names_the_rule() {
  auto model = make_mlp();
  FullyShardedModel fsdp(model, {.name = "skip"});
  try {
    if (lt::rank() == 0) {
      fsdp.forward(::torch::ones({2, 8}));
    } else {
      lt::barrier();
    }
    ADD_FAILURE() << "rank " << lt::rank() << " went on past a skipped forward";
  } catch (const DeadlockError& e) {
    if (lt::rank() == 0) {
      EXPECT_THAT(e.what(), ::testing::HasSubstr("skip.ag.0:layers0-0"));
      EXPECT_THAT(e.what(), ::testing::HasSubstr("every rank must run every forward and "
                                                 "backward of an FSDP model"));
    }
  }
}

TEST(FullyShardedGpt, ASkippedForwardIsADeadlockThatNamesTheUnitAndTheRule) {
  run_torch_workers(2, check_a_skipped_forward_names_the_rule);
}

TEST(FullyShardedGpt, OneRankClipsAndAccumulatesAsThePlainModel) {
  run_torch_workers(1, [] {
    check_mlp_recipes({.name = "one"});
    check_gpt_recipes();
  });
}

TEST(FullyShardedGpt, TwoRanksClipAndAccumulateAsDataParallelism) {
  run_torch_workers(2, [] {
    check_mlp_recipes({.layers_per_unit = 2, .name = "two"});
    check_gpt_recipes();
    check_named_errors();
  });
}

TEST(FullyShardedGpt, FourRanksAndHybridShardingClipAsDataParallelism) {
  run_torch_workers(4, [] {
    check_mlp_recipes({.prefetch = false, .name = "four"});
    check_gpt_recipes();
    check_gpt_hybrid();
  });
}

}  // namespace
}  // namespace lockstep::parallel
