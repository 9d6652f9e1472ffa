#include "fashion_mnist/checkpoints.h"

#include <fmt/format.h>

#include <chrono>
#include <filesystem>

#include "lockstep/base/error.h"
#include "lockstep/torch/torch.h"

namespace lockstep::examples {
namespace lt = lockstep::torch;
namespace lp = lockstep::parallel;

JobCheckpoints::JobCheckpoints(const Options& options, bool elastic) : o_(options) {
  if (enabled() && sharded() && elastic)
    throw InvalidArgument(fmt::format(
        "--checkpoint-format {} is not supported in elastic jobs (lockstep run --min-np): every "
        "rank of a fixed world writes its share; use --checkpoint-format file", o_.checkpoint_format));
}

lp::CheckpointWriter& JobCheckpoints::writer() {
  // Two complete steps: the newest, and the one before it while the newest is written.
  const lp::CheckpointDirOptions options{.keep_last = 2, .async = o_.checkpoint_format == "async"};
  if (!writer_) writer_ = std::make_unique<lp::CheckpointWriter>(o_.checkpoint_dir, options);
  return *writer_;
}

void JobCheckpoints::save(const ::torch::nn::Module& model, const ::torch::optim::Optimizer& optimizer,
                          const lt::TrainingProgress& progress) {
  if (!enabled()) return;
  const auto start = std::chrono::steady_clock::now();
  if (sharded()) {
    writer().save(model, optimizer, progress);
  } else {
    std::filesystem::create_directories(o_.checkpoint_dir);
    lt::save_checkpoint(o_.checkpoint_dir + "/checkpoint.pt", model, optimizer, progress);
  }
  const std::chrono::duration<double, std::milli> paused = std::chrono::steady_clock::now() - start;
  if (lt::rank() == 0)
    fmt::print(stderr, "checkpoint {} ({}, step {}): training paused {:.1f} ms\n", o_.checkpoint_dir,
               o_.checkpoint_format, progress.step, paused.count());
}

bool JobCheckpoints::load(::torch::nn::Module& model, ::torch::optim::Optimizer& optimizer,
                          lt::TrainingProgress& progress) {
  if (!enabled()) return false;
  if (sharded()) return lp::load_checkpoint_dir(o_.checkpoint_dir, model, optimizer, progress);
  return lt::load_checkpoint(o_.checkpoint_dir + "/checkpoint.pt", model, optimizer, progress);
}

void JobCheckpoints::poll() {
  if (writer_) writer_->poll();
}

void JobCheckpoints::wait() {
  if (writer_) writer_->wait();
}

std::string JobCheckpoints::where() const {
  if (!sharded()) return o_.checkpoint_dir + "/checkpoint.pt";
  const std::string newest = lp::newest_checkpoint_dir(o_.checkpoint_dir);
  return newest.empty() ? o_.checkpoint_dir : newest;
}

}  // namespace lockstep::examples
