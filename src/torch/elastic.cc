#include "lockstep/torch/elastic.h"

#include <fmt/format.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "lockstep/base/error.h"
#include "lockstep/base/knobs.h"
#include "lockstep/base/log.h"
#include "lockstep/engine/elastic.h"
#include "lockstep/engine/engine.h"
#include "lockstep/torch/checkpoint.h"
#include "lockstep/torch/collectives.h"
#include "lockstep/torch/fingerprint.h"
#include "lockstep/torch/objects.h"
#include "lockstep/torch/placement.h"
#include "torch/byte_tensor.h"

namespace lockstep::torch {
namespace {

// -1: not set by init_elastic_world()/run_elastic() (the engine was started
// some other way); the generation the launcher started us into applies.
int g_generation = -1;

std::chrono::milliseconds world_timeout() {
  return std::chrono::milliseconds(static_cast<int64_t>(knob_double("LOCKSTEP_TIMEOUT") * 1000.0));
}

// Length-prefixed names and the doubles' bytes: values round-trip bitwise.
std::string encode_values(const std::map<std::string, double>& values) {
  std::string out;
  for (const auto& [name, value] : values) {
    const uint64_t length = name.size();
    out.append(reinterpret_cast<const char*>(&length), sizeof length);
    out += name;
    out.append(reinterpret_cast<const char*>(&value), sizeof value);
  }
  return out;
}

std::map<std::string, double> decode_values(const std::string& bytes) {
  std::map<std::string, double> out;
  size_t at = 0;
  auto take = [&](void* to, size_t n) {
    if (bytes.size() - at < n) throw Error("ElasticState: truncated values record");
    std::memcpy(to, bytes.data() + at, n);
    at += n;
  };
  while (at < bytes.size()) {
    uint64_t length = 0;
    take(&length, sizeof length);
    std::string name(static_cast<size_t>(std::min<uint64_t>(length, bytes.size())), '\0');
    if (name.size() != length) throw Error("ElasticState: truncated values record");
    take(name.data(), name.size());
    double value = 0;
    take(&value, sizeof value);
    out.emplace(std::move(name), value);
  }
  return out;
}

std::string read_whole_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(fmt::format("ElasticState: cannot open checkpoint {}", path));
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

void start_engine(const engine::ElasticWorld& world) {
  engine::init(world.world);
  g_generation = world.generation;
}

// Leaves the broken (or outgrown) world and joins the next generation.
void reform(ElasticState& state, const std::string& cause) {
  const int from = elastic_generation();
  log(LogLevel::kWarning, "elastic: {}; leaving generation {} for the next one", cause, from);
  lockstep::torch::shutdown();  // never hangs on a dead peer; fails what is pending
  state.reset_in_flight();      // after shutdown: no operation still reads a gradient
  start_engine(engine::wait_for_world(from + 1, world_timeout()));
  // The number of workers on this host may have changed.
  place_this_worker(local_rank(), local_size());
  state.count_reformation();
  log(LogLevel::kInfo, "elastic: joined generation {} as rank {} of {}", elastic_generation(),
      rank(), size());
}

}  // namespace

// ---- ElasticState

ElasticState::ElasticState(::torch::nn::Module& model, ::torch::optim::Optimizer& optimizer,
                           DistributedSampler* sampler, DistributedOptimizer* dist)
    : model_(model), optimizer_(optimizer), sampler_(sampler), dist_(dist) {}

std::vector<::torch::Tensor> ElasticState::state_tensors() const {
  std::vector<::torch::Tensor> out = model_.parameters();
  for (auto& buffer : model_.buffers()) out.push_back(buffer);
  return out;
}

ElasticState::Snapshot ElasticState::snapshot() const {
  Snapshot s;
  ::torch::NoGradGuard no_grad;
  for (const auto& t : state_tensors()) s.tensors.push_back(t.detach().clone());
  ::torch::serialize::OutputArchive archive;
  save_optimizer(optimizer_, archive);
  s.optimizer = archive_to_bytes(archive);
  s.epoch = epoch;
  s.step = step;
  s.values = values;
  if (sampler_) {
    s.sampler_epoch = sampler_->epoch();
    s.sampler_position = sampler_->global_position();
  }
  s.valid = true;
  return s;
}

void ElasticState::apply(const Snapshot& s) {
  auto current = state_tensors();
  if (current.size() != s.tensors.size())
    throw Error(
        fmt::format("ElasticState: the snapshot has {} parameters and buffers but the "
                    "model has {}; was the model changed after commit()?",
                    s.tensors.size(), current.size()));
  // Every shape and dtype first: a refused snapshot changes nothing.
  for (size_t i = 0; i < current.size(); ++i)
    if (!current[i].sizes().equals(s.tensors[i].sizes()) ||
        current[i].scalar_type() != s.tensors[i].scalar_type())
      throw Error(
          fmt::format("ElasticState: tensor {} of the model (parameters, then buffers) is "
                      "{} {} but the snapshot's is {} {}; the snapshot is of another "
                      "model: nothing was restored",
                      i, c10::str(current[i].sizes()), c10::toString(current[i].scalar_type()),
                      c10::str(s.tensors[i].sizes()), c10::toString(s.tensors[i].scalar_type())));
  ::torch::serialize::InputArchive archive;
  archive_from_bytes(archive, s.optimizer);
  load_optimizer(optimizer_, archive);
  ::torch::NoGradGuard no_grad;
  for (size_t i = 0; i < current.size(); ++i) current[i].copy_(s.tensors[i]);
  epoch = s.epoch;
  step = s.step;
  values = s.values;
  if (sampler_) sampler_->resume(s.sampler_epoch, s.sampler_position, rank(), size());
}

void ElasticState::commit() {
  committed_ = snapshot();
  check_parameters_after_sync();
  check_generation();
}

// Once per sync(), at the first commit after it: after sync() the ranks are
// equal by construction, so a difference now comes from the steps since, e.g.
// a learning rate set on some ranks only (issue 30.1: survivors at 0.03 and a
// joiner at 0.02 trained different models silently, since the optimizer's
// periodic check is off in elastic jobs). Commits are collective already.
void ElasticState::check_parameters_after_sync() {
  if (!fingerprint_due_) return;
  fingerprint_due_ = false;
  if (!engine::elastic_enabled() || !is_initialized() || size() == 1) return;
  std::vector<std::pair<std::string, ::torch::Tensor>> named;
  for (const auto& item : model_.named_parameters()) named.emplace_back(item.key(), item.value());
  // Not the usual advice to broadcast the parameters: sync() just did, and
  // another broadcast would hide the rank-dependent update, not fix it.
  check_parameters_agree(
      named,
      fmt::format("at the first commit of generation {} (step {}) after ElasticState::sync()",
                  generation(), step),
      Group(),
      "sync() made every rank's parameters equal, so a rank updated them differently since "
      "(a hyper-parameter such as the learning rate set on some ranks only, or gradients not "
      "averaged). Set what depends on the world, such as the learning rate, in "
      "ElasticState::on_reset(), which runs on every rank after each sync(); broadcasting the "
      "parameters again would only hide the difference");
}

void ElasticState::on_reset(std::function<void()> callback) {
  if (!callback) throw InvalidArgument("ElasticState::on_reset: the callback is empty");
  reset_callbacks_.push_back(std::move(callback));
}

// One store round trip on rank 0, one tiny broadcast: every rank learns the
// same answer at the same commit, so they all leave the world together.
void ElasticState::check_generation() const {
  if (!engine::elastic_enabled() || !is_initialized()) return;
  const int current = generation();
  // A one-element tensor, not broadcast_object: no serialisation per commit.
  auto changed = ::torch::zeros({1}, ::torch::kInt32);
  if (rank() == 0 && engine::newer_generation_published(current)) changed.fill_(1);
  broadcast_(changed, 0, "elastic.generation_check");
  if (changed.item<int32_t>() != 0) throw engine::WorldChanged(current + 1);
}

void ElasticState::restore() {
  if (!committed_.valid)
    throw Error("ElasticState::restore: nothing committed yet; call commit() or sync() first");
  reset_in_flight();
  apply(committed_);
  optimizer_.zero_grad();
}

void ElasticState::sync(int root) {
  int64_t sampler_epoch = sampler_ ? sampler_->epoch() : 0;
  int64_t sampler_position = sampler_ ? sampler_->global_position() : 0;
  if (size() > 1) {
    broadcast_parameters(model_, root);
    broadcast_optimizer_state(optimizer_, root);
    std::vector<int64_t> counters = {epoch, step, reformations_, sampler_epoch, sampler_position};
    counters = broadcast_object(counters, root, "elastic.counters");
    epoch = counters[0];
    step = counters[1];
    reformations_ = static_cast<int>(counters[2]);
    sampler_epoch = counters[3];
    sampler_position = counters[4];
    values = decode_values(broadcast_bytes(encode_values(values), root, "elastic.values"));
  }
  if (sampler_) sampler_->resume(sampler_epoch, sampler_position, rank(), size());
  for (const auto& callback : reset_callbacks_) callback();
  committed_ = snapshot();  // after the callbacks: a restore() keeps what they set
  fingerprint_due_ = true;
}

int ElasticState::generation() const { return elastic_generation(); }

void ElasticState::reset_in_flight() noexcept {
  if (dist_) dist_->reset();
}

void ElasticState::save_checkpoint(const std::string& path) const {
  if (!committed_.valid)
    throw Error(
        fmt::format("ElasticState::save_checkpoint({}): nothing committed yet; call "
                    "commit() or sync() first",
                    path));
  if (rank() != 0) return;
  ::torch::serialize::OutputArchive archive;
  archive.write("elastic_state_version", c10::IValue(int64_t{1}));
  archive.write("tensor_count", c10::IValue(static_cast<int64_t>(committed_.tensors.size())));
  for (size_t i = 0; i < committed_.tensors.size(); ++i)
    archive.write(fmt::format("tensor.{}", i), committed_.tensors[i]);
  archive.write("optimizer", detail::bytes_tensor(committed_.optimizer));
  archive.write("values", detail::bytes_tensor(encode_values(committed_.values)));
  archive.write("counters", ::torch::tensor({committed_.epoch, committed_.step,
                                             committed_.sampler_epoch, committed_.sampler_position},
                                            ::torch::kInt64));
  write_file_atomically(path, archive_to_bytes(archive));
}

bool ElasticState::load_checkpoint(const std::string& path) {
  remove_stale_temporary_files(path);  // left by a run killed mid-save
  if (!std::filesystem::exists(path)) return false;
  const std::string bytes = read_whole_file(path);
  Snapshot s;
  try {
    ::torch::serialize::InputArchive archive;
    archive_from_bytes(archive, bytes);
    c10::IValue value;
    archive.read("elastic_state_version", value);
    if (value.toInt() != 1)
      throw Error(
          fmt::format("ElasticState checkpoint {}: version {} is not 1", path, value.toInt()));
    archive.read("tensor_count", value);
    for (int64_t i = 0; i < value.toInt(); ++i) {
      ::torch::Tensor t;
      archive.read(fmt::format("tensor.{}", i), t);
      s.tensors.push_back(t);
    }
    // Fresh tensors: read() into a defined tensor keeps that tensor's dtype.
    ::torch::Tensor optimizer, user_values, counters;
    archive.read("optimizer", optimizer);
    s.optimizer = detail::tensor_bytes(optimizer);
    archive.read("values", user_values);
    s.values = decode_values(detail::tensor_bytes(user_values));
    archive.read("counters", counters);
    auto c = counters.accessor<int64_t, 1>();
    s.epoch = c[0];
    s.step = c[1];
    s.sampler_epoch = c[2];
    s.sampler_position = c[3];
    s.valid = true;
    apply(s);
  } catch (const c10::Error& e) {
    throw Error(
        fmt::format("ElasticState checkpoint {} is unreadable or does not match this "
                    "model/optimizer: {}; load a checkpoint this program wrote (its "
                    "model and optimizer as built here)",
                    path, e.what_without_backtrace()));
  }
  committed_ = std::move(s);
  optimizer_.zero_grad();
  return true;
}

// ---- the run loop

int elastic_generation() {
  if (!engine::elastic_enabled()) return 0;
  return g_generation >= 0 ? g_generation : engine::start_generation();
}

void init_elastic_world() {
  start_engine(engine::wait_for_world(engine::start_generation(), world_timeout()));
}

void run_elastic(ElasticState& state, const std::function<void(ElasticState&)>& fn) {
  if (!engine::elastic_enabled()) {
    state.sync(0);
    fn(state);
    return;
  }
  bool restore_first = false;  // the first attempt continues from the caller's state
  for (;;) {
    try {
      if (restore_first && state.has_commit()) state.restore();
      state.sync(0);
      fn(state);
      return;
    } catch (const engine::WorldChanged& e) {
      // Not e.what(): it says "(generation N)" too, next to the one we leave.
      reform(state, fmt::format("the launcher published generation {}", e.generation()));
      restore_first = false;  // commit() just snapshotted the current state
    } catch (const PeerFailure& e) {
      reform(state, fmt::format("a peer failed: {}", e.what()));
      restore_first = true;
    } catch (const Aborted& e) {
      reform(state, fmt::format("the world was aborted: {}", e.what()));
      restore_first = true;
    }
  }
}

}  // namespace lockstep::torch
