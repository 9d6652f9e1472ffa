// lockstep-gpt: a character-level GPT trained with fully sharded data
// parallelism, DeepSpeed's / PyTorch FSDP's recipe in lockstep:
//
//   lockstep run -np 2 lockstep-gpt [--steps 300] [--batch 16] [--context 64]
//       [--d-model 64] [--layers 3] [--heads 4] [--accumulate 2] [--lr 3e-3]
//       [--clip 1.0] [--seed 1] [--logdir runs/gpt] [--bf16|--no-bf16]
//       [--checkpoint-activations] [--text /usr/share/common-licenses/GPL-3]
//
// Each block (and the embedding, whose weight is also the head) is an FSDP
// unit computed in bf16 with f32 master weights sharded across the ranks;
// AdamW on the shards, fsdp.clip_grad_norm every step, --accumulate
// micro-batches (backwards) per step, TensorBoard scalars from rank 0.
// docs/parallelism.md, "A GPT with FSDP (examples/gpt)", has a measured run.
#include <fmt/format.h>
#include <torch/torch.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cmath>
#include <memory>
#include <optional>

#include "gpt/model.h"
#include "gpt/text.h"
#include "lockstep/parallel/fully_sharded.h"
#include "lockstep/summary/event_writer.h"
#include "lockstep/summary/summary.h"
#include "lockstep/torch/torch.h"

namespace lt = lockstep::torch;
namespace lp = lockstep::parallel;
namespace F = torch::nn::functional;
using lockstep::examples::gpt::CharCorpus;
using lockstep::examples::gpt::Gpt;
using lockstep::examples::gpt::GptConfig;
using torch::Tensor;

namespace {

struct Flags {
  std::string text = "/usr/share/common-licenses/GPL-3";
  int64_t steps = 300, batch = 16, context = 64, d_model = 64, layers = 3, heads = 4;
  int accumulate = 2;
  double lr = 3e-3, clip = 1.0;
  uint64_t seed = 1;
  std::string logdir = "runs/gpt";
  bool bf16 = true, checkpoint_activations = false;
  int64_t log_every = 0, sample = 200;
};

void add_flags(CLI::App& app, Flags& f) {
  app.add_option("--text", f.text, "training text (characters are the tokens)")
      ->capture_default_str();
  app.add_option("--steps", f.steps, "optimizer steps")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--batch", f.batch, "sequences per rank per micro-batch")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--context", f.context, "sequence length")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--d-model", f.d_model, "width")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--layers", f.layers, "transformer blocks")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--heads", f.heads, "attention heads (divides --d-model)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--accumulate", f.accumulate, "micro-batches (backwards) per step")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--lr", f.lr, "AdamW peak learning rate (warm-up, then cosine to 1/10)")
      ->capture_default_str();
  app.add_option("--clip", f.clip, "max global gradient 2-norm (0: no clipping)")
      ->capture_default_str();
  app.add_option("--seed", f.seed, "model and batch seed")->capture_default_str();
  app.add_option("--logdir", f.logdir, "TensorBoard folder (rank 0 writes; empty: none)")
      ->capture_default_str();
  app.add_flag("--bf16,!--no-bf16", f.bf16, "compute in bf16 (f32 master weights)")
      ->capture_default_str();
  app.add_flag("--checkpoint-activations", f.checkpoint_activations,
               "recompute each block's activations in backward");
  app.add_option("--log-every", f.log_every, "print every N steps (0: about 10 lines)");
  app.add_option("--sample", f.sample, "characters rank 0 samples at the end")
      ->capture_default_str();
}

// Linear warm-up over the first 10% (at least one step), then a cosine from
// lr down to lr/10 at the last step.
double lr_at(const Flags& f, int64_t step) {
  const int64_t warmup = std::max<int64_t>(1, f.steps / 10);
  if (step < warmup) return f.lr * static_cast<double>(step + 1) / static_cast<double>(warmup);
  const double t = static_cast<double>(step - warmup) /
                   static_cast<double>(std::max<int64_t>(1, f.steps - warmup));
  return f.lr * (0.1 + 0.9 * 0.5 * (1 + std::cos(M_PI * t)));
}

Tensor loss_of(Gpt& gpt, const Tensor& x, const Tensor& y) {
  Tensor logits = gpt(x).to(torch::kFloat32);  // the units hand bf16 on
  return F::cross_entropy(logits.reshape({-1, logits.size(-1)}), y.reshape({-1}));
}

double global_mean(double value, const std::string& name) {
  return lt::allreduce(torch::tensor({value}, torch::kFloat64), name).item<double>();
}

struct StepResult {
  double loss = 0, grad_norm = 0;
};

// One optimizer step: k micro-batches, each loss scaled by 1/k (the mean),
// then clip and step. The loss reported is the ranks' mean.
StepResult train_step(const Flags& f, Gpt& gpt, lp::FullyShardedModel& fsdp,
                      torch::optim::AdamW& adamw, const CharCorpus& corpus, int64_t step) {
  StepResult r;
  fsdp.zero_grad();
  for (int j = 0; j < f.accumulate; ++j) {
    const uint64_t batch_seed =
        f.seed * 1000003 +
        static_cast<uint64_t>((step * f.accumulate + j) * lt::size() + lt::rank());
    auto [x, y] =
        lockstep::examples::gpt::random_windows(corpus.train, f.batch, f.context, batch_seed);
    Tensor loss = loss_of(gpt, x, y) / f.accumulate;
    loss.backward();
    r.loss += loss.item<double>();
  }
  r.grad_norm = f.clip > 0 ? fsdp.clip_grad_norm(f.clip) : fsdp.clip_grad_norm(INFINITY, 2.0);
  for (auto& group : adamw.param_groups())
    static_cast<torch::optim::AdamWOptions&>(group.options()).lr(lr_at(f, step));
  fsdp.step(adamw);
  r.loss = global_mean(r.loss, "gpt.loss");
  return r;
}

// The mean next-token loss over the validation split: each rank its share
// of the windows, summed over the ranks.
double validation_loss(Gpt& gpt, const CharCorpus& corpus, int64_t context) {
  torch::NoGradGuard no_grad;
  auto [x, y] = lockstep::examples::gpt::split_windows(corpus.val, context, lt::rank(), lt::size());
  Tensor logits = gpt(x).to(torch::kFloat32);
  Tensor sum = F::cross_entropy(logits.reshape({-1, logits.size(-1)}), y.reshape({-1}),
                                F::CrossEntropyFuncOptions().reduction(torch::kSum));
  auto t = torch::stack(
      {sum.to(torch::kFloat64), torch::tensor(static_cast<double>(y.numel()), torch::kFloat64)});
  t = lt::allreduce(t, "gpt.val", {.op = lockstep::comm::ReduceOp::kSum});
  return t[0].item<double>() / t[1].item<double>();
}

// Every rank samples (its forwards are collectives), from one seed, so the
// ranks draw the same characters; rank 0 prints them.
std::string sample(Gpt& gpt, const CharCorpus& corpus, const Flags& f, const std::string& prompt) {
  torch::NoGradGuard no_grad;
  auto g = torch::make_generator<at::CPUGeneratorImpl>(f.seed);
  std::vector<int64_t> ids = corpus.encode(prompt);
  for (int64_t i = 0; i < f.sample; ++i) {
    const auto n = static_cast<int64_t>(ids.size());
    const int64_t t = std::min(n, f.context);
    Tensor x = torch::tensor(std::vector<int64_t>(ids.end() - t, ids.end())).unsqueeze(0);
    Tensor logits = gpt(x).to(torch::kFloat32)[0][t - 1] / 0.8;  // temperature 0.8
    ids.push_back(torch::multinomial(torch::softmax(logits, -1), 1, false, g).item<int64_t>());
  }
  return corpus.decode(
      std::vector<int64_t>(ids.begin() + static_cast<int64_t>(prompt.size()), ids.end()));
}

struct Telemetry {
  std::optional<lockstep::summary::EventWriter> events;
  void write(int64_t step, const lockstep::summary::Summary& s) {
    if (events) events->write(step, s);
  }
};

void train(const Flags& f, Gpt& gpt, lp::FullyShardedModel& fsdp, const CharCorpus& corpus,
           Telemetry& tb) {
  torch::optim::AdamW adamw(fsdp.parameters(),
                            torch::optim::AdamWOptions(f.lr).betas({0.9, 0.95}).weight_decay(0.1));
  const int64_t every = f.log_every > 0 ? f.log_every : std::max<int64_t>(1, f.steps / 10);
  const double tokens_per_step =
      static_cast<double>(f.batch * f.context * f.accumulate * lt::size());
  auto since = std::chrono::steady_clock::now();
  int64_t steps_since = 0;
  for (int64_t step = 0; step < f.steps; ++step) {
    const StepResult r = train_step(f, gpt, fsdp, adamw, corpus, step);
    ++steps_since;
    tb.write(step, lockstep::summary::Summary()
                       .scalar("train/loss", r.loss)
                       .scalar("train/grad_norm", r.grad_norm)
                       .scalar("train/lr", lr_at(f, step)));
    if (lt::rank() == 0 && (step == 0 || (step + 1) % every == 0 || step + 1 == f.steps)) {
      const auto now = std::chrono::steady_clock::now();
      const double s = std::chrono::duration<double>(now - since).count();
      fmt::print("step {}/{} | loss {:.4f} | grad norm {:.3f} | lr {:.2e} | {:.0f} tokens/s\n",
                 step + 1, f.steps, r.loss, r.grad_norm, lr_at(f, step),
                 tokens_per_step * static_cast<double>(steps_since) / s);
      std::fflush(stdout);
      since = now;
      steps_since = 0;
    }
  }
}

// The model and its FullyShardedModel live here, so that they are gone
// before lt::shutdown (a unit waits for its prefetched gather before it
// returns, so nothing is in flight by then either way).
void train_and_sample(const Flags& f) {
  const CharCorpus corpus = CharCorpus::load(f.text, f.context);
  if (f.d_model % f.heads != 0)
    throw lockstep::InvalidArgument(
        fmt::format("lockstep-gpt: --heads {} does not divide --d-model {}; pick a divisor",
                    f.heads, f.d_model));
  torch::manual_seed(f.seed);  // the same model everywhere (rank 0's is broadcast anyway)
  Gpt gpt(GptConfig{.vocab = corpus.vocab_size(),
                    .context = f.context,
                    .d_model = f.d_model,
                    .layers = f.layers,
                    .heads = f.heads,
                    .checkpoint_activations = f.checkpoint_activations});
  int64_t params = 0;
  for (const auto& p : gpt->parameters()) params += p.numel();
  lp::FullyShardedOptions o;
  if (f.bf16) o.compute_dtype = torch::kBFloat16;
  lp::FullyShardedModel fsdp(gpt, o);
  Telemetry tb;
  if (lt::rank() == 0 && !f.logdir.empty()) tb.events.emplace(f.logdir);
  if (lt::rank() == 0)
    fmt::print(
        "lockstep-gpt: {} parameters ({} FSDP units + root), vocabulary {}, {} train / {} "
        "validation characters, {} ranks x {} sequences x {} micro-batches of {}, {}{}\n",
        params, fsdp.units() - 1, corpus.vocab_size(), corpus.train.size(0), corpus.val.size(0),
        lt::size(), f.batch, f.accumulate, f.context, f.bf16 ? "bf16" : "f32",
        f.checkpoint_activations ? ", activation checkpointing" : "");
  const double initial = validation_loss(gpt, corpus, f.context);
  train(f, gpt, fsdp, corpus, tb);
  const double final_loss = validation_loss(gpt, corpus, f.context);
  tb.write(f.steps, lockstep::summary::Summary().scalar("val/loss", final_loss));
  const std::string text = sample(gpt, corpus, f, "This License");
  if (lt::rank() == 0) {
    fmt::print("validation loss {:.4f} (before training {:.4f})\n", final_loss, initial);
    fmt::print("sample: This License{}\n", text);
    if (tb.events) fmt::print("TensorBoard: {}\n", tb.events->path());
  }
}

int run(const Flags& f) {
  lt::init();
  train_and_sample(f);
  lt::shutdown();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "A character-level GPT trained with FSDP (run it with: lockstep run -np 2 lockstep-gpt)"};
  Flags flags;
  add_flags(app, flags);
  CLI11_PARSE(app, argc, argv);
  try {
    return run(flags);
  } catch (const std::exception& e) {
    fmt::print(stderr, "lockstep-gpt: error: {}\n", e.what());
    return 1;
  }
}
