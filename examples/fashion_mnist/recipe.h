// The main job's recipe beyond plain data-parallel Adam, one small function
// per idea so each can be switched off by a flag and measured (the ablation
// table in docs/main-job.md): model layout and memory format, the learning-
// rate schedule, label smoothing, flip augmentation, averaged weights for
// evaluation and flip test-time augmentation.
#pragma once

#include <CLI/CLI.hpp>
#include <torch/torch.h>

#include <cstdint>
#include <string>

#include "common/fashion_cnn.h"
#include "fashion_mnist/options.h"

namespace lockstep::examples {

// --recipe fast | plain: sets the flags of that recipe (docs/main-job.md)
// that the command line did not set itself, so `--recipe fast
// --no-channels-last` is the recipe less one piece. fast is the
// time-to-accuracy recipe (the default's pieces on the narrower, unaugmented
// model), plain the default recipe before 2026-11-24. Call after parsing.
// --recipe default changes nothing (Options' defaults are that recipe).
void apply_recipe(const CLI::App& app, Options& o);

// The recipe pieces in use beyond plain data-parallel Adam, e.g.
// "pool-first, channels-last, ema 0.99"; "none" without any.
std::string describe_recipe(const Options& o);

// FashionCnn as the options ask (widths, pool-first blocks, SyncBatchNorm),
// in channels-last layout when asked. Initialised from (seed + rank); the
// job broadcasts rank 0's weights before training.
FashionCnn make_model(const Options& o, int rank);

// Conv weights (4-D parameters) to channels-last (NHWC) strides. MKL-DNN
// then keeps activations in NHWC end to end, where LibTorch's CPU
// BatchNorm, ReLU and max-pool kernels are vectorised over channels.
void to_channels_last(::torch::nn::Module& model);

// The learning rate after `t` epochs (fractional; epochs, not steps, so the
// schedule stays when an elastic job changes size): linear warm-up from the
// base lr to `peak` over --warmup-epochs (Goyal et al.), then cosine to 0 at
// `total_epochs` or constant; or one-cycle (optim::one_cycle over the
// samples of `total_epochs`, peaking after --warmup-epochs).
double lr_at(const Options& o, double peak, double total_epochs, int64_t train_size, double t);

// Random horizontal flips of a batch [N, C, H, W], each sample with
// probability p, from LibTorch's default generator (restored by checkpoints).
::torch::Tensor random_flip(const ::torch::Tensor& x, double p);

// The training loss: cross-entropy with --label-smoothing.
::torch::Tensor loss(const Options& o, const ::torch::Tensor& logits, const ::torch::Tensor& y);

// Evaluation logits: the model's, or with --tta flip the mean of the logits
// of the image and its mirror image.
::torch::Tensor eval_logits(const Options& o, FashionCnn& model, const ::torch::Tensor& x);

// The input layout the model wants (channels-last when asked).
::torch::Tensor input(const Options& o, ::torch::Tensor x);

}  // namespace lockstep::examples
