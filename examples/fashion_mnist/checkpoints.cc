#include "fashion_mnist/checkpoints.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "lockstep/base/error.h"
#include "lockstep/base/log.h"
#include "lockstep/torch/torch.h"

namespace lockstep::examples {
namespace lt = lockstep::torch;
namespace lp = lockstep::parallel;

JobCheckpoints::JobCheckpoints(const Options& options, bool elastic) : o_(options) {
  if (enabled() && sharded() && elastic)
    throw InvalidArgument(fmt::format(
        "--checkpoint-format {} is not supported in elastic jobs (lockstep run --min-np): every "
        "rank of a fixed world writes its share; use --checkpoint-format file",
        o_.checkpoint_format));
}

lp::CheckpointWriter& JobCheckpoints::writer() {
  // Two complete steps: the newest, and the one before it while the newest is written.
  const lp::CheckpointDirOptions options{.keep_last = 2, .async = o_.checkpoint_format == "async"};
  if (!writer_) writer_ = std::make_unique<lp::CheckpointWriter>(o_.checkpoint_dir, options);
  return *writer_;
}

JobCheckpoints::~JobCheckpoints() {
  try {
    join_averages();
  } catch (const std::exception& e) {
    log(LogLevel::kError, "{}: the last averages write failed: {}", o_.checkpoint_dir, e.what());
  }
}

std::string JobCheckpoints::averages_path(int64_t step) const {
  return fmt::format("{}/averages/step-{}.pt", o_.checkpoint_dir, step);
}

void JobCheckpoints::write_averages(int64_t step, const std::string& bytes) const {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(o_.checkpoint_dir) / "averages";
  fs::create_directories(dir);
  lt::write_file_atomically(averages_path(step), bytes);
  // Retention: the newest three steps (the checkpoints keep two, and one may
  // be in flight), oldest removed first.
  std::vector<std::pair<int64_t, fs::path>> steps;
  for (const auto& item : fs::directory_iterator(dir)) {
    const std::string name = item.path().filename().string();
    int64_t n = 0;
    if (std::sscanf(name.c_str(), "step-%" SCNd64 ".pt", &n) == 1 &&
        name == fmt::format("step-{}.pt", n))
      steps.emplace_back(n, item.path());
  }
  std::sort(steps.begin(), steps.end());
  std::error_code ec;
  for (size_t i = 0; i + 3 < steps.size(); ++i) fs::remove(steps[i].second, ec);
}

void JobCheckpoints::join_averages() {
  if (averages_thread_.joinable()) averages_thread_.join();
  if (averages_error_) std::rethrow_exception(std::exchange(averages_error_, nullptr));
}

std::optional<std::string> JobCheckpoints::load_averages(int64_t step) const {
  std::ifstream in(averages_path(step), std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

void JobCheckpoints::save(const ::torch::nn::Module& model,
                          const ::torch::optim::Optimizer& optimizer,
                          const lt::TrainingProgress& progress,
                          const std::function<std::string()>& make_averages) {
  if (!enabled()) return;
  const auto start = std::chrono::steady_clock::now();
  join_averages();  // at most one averages write in flight; its error ends the job here
  std::string averages = make_averages && lt::rank() == 0 ? make_averages() : std::string();
  if (sharded()) {
    writer().save(model, optimizer, progress);
  } else {
    std::filesystem::create_directories(o_.checkpoint_dir);
    lt::save_checkpoint(o_.checkpoint_dir + "/checkpoint.pt", model, optimizer, progress);
  }
  if (!averages.empty() && o_.checkpoint_format == "async") {
    averages_done_ = false;
    averages_thread_ = std::thread([this, step = progress.step, bytes = std::move(averages)] {
      try {
        write_averages(step, bytes);
      } catch (...) {
        averages_error_ = std::current_exception();
      }
      averages_done_ = true;
    });
  } else if (!averages.empty()) {
    write_averages(progress.step, averages);
  }
  const std::chrono::duration<double, std::milli> paused = std::chrono::steady_clock::now() - start;
  if (lt::rank() == 0)
    fmt::print(stderr, "checkpoint {} ({}, step {}): training paused {:.1f} ms\n",
               o_.checkpoint_dir, o_.checkpoint_format, progress.step, paused.count());
}

bool JobCheckpoints::load(::torch::nn::Module& model, ::torch::optim::Optimizer& optimizer,
                          lt::TrainingProgress& progress) {
  if (!enabled()) return false;
  if (sharded()) return lp::load_checkpoint_dir(o_.checkpoint_dir, model, optimizer, progress);
  return lt::load_checkpoint(o_.checkpoint_dir + "/checkpoint.pt", model, optimizer, progress);
}

void JobCheckpoints::poll() {
  if (writer_) writer_->poll();
  if (averages_thread_.joinable() && averages_done_) join_averages();
}

void JobCheckpoints::wait() {
  if (writer_) writer_->wait();
  join_averages();
}

std::string JobCheckpoints::where() const {
  if (!sharded()) return o_.checkpoint_dir + "/checkpoint.pt";
  const std::string newest = lp::newest_checkpoint_dir(o_.checkpoint_dir);
  return newest.empty() ? o_.checkpoint_dir : newest;
}

}  // namespace lockstep::examples
