// FullyShardedModel's errors for reads of a released parameter: the
// InvalidArgument a unit's or a layer's forward throws, and the uncaught
// LibTorch error of code outside lockstep (Note [Reads outside the units]).
#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>
#include <exception>
#include <mutex>
#include <sstream>

#include "lockstep/base/error.h"
#include "lockstep/base/terminate.h"
#include "parallel/fully_sharded_impl.h"

namespace lockstep::parallel {

namespace lt = lockstep::torch;

namespace {

// The element count of "sizes [a, b]" in a LibTorch message, -1 if none.
int64_t numel_in_message(const std::string& what) {
  const size_t at = what.find("sizes [");
  if (at == std::string::npos) return -1;
  int64_t numel = 1;
  std::istringstream in(what.substr(at + 7, what.find(']', at) - at - 7));
  for (std::string dim; std::getline(in, dim, ',');) numel *= std::stoll(dim);
  return numel;
}

}  // namespace

// What LibTorch says when a kernel or a view meets a released unit's
// parameter (its storage has no memory): a parameter read outside its unit.
std::optional<std::string> FullyShardedModel::Impl::explain_storage_error(
    const std::string& what, const std::string& where, const std::string& advice) const {
  if (what.find("for storage of size 0") == std::string::npos &&
      what.find("data is not allocated yet") == std::string::npos)
    return std::nullopt;
  const int64_t numel = numel_in_message(what);
  std::vector<std::string> released, matching;
  for (size_t p = 0; p < params.size(); ++p) {
    if (units[unit_of[p]].residence != Residence::released) continue;
    const std::string name = fmt::format("{} (unit {})", names[p], units[unit_of[p]].label);
    released.push_back(name);
    if (params[p].numel() == numel) matching.push_back(name);
  }
  if (released.empty()) return std::nullopt;
  const auto& shown = matching.empty() ? released : matching;
  std::string list;
  for (size_t i = 0; i < shown.size() && i < 4; ++i) list += (i ? ", " : "") + shown[i];
  if (shown.size() > 4) list += fmt::format(" and {} more", shown.size() - 4);
  return fmt::format(
      "FullyShardedModel: {} read a parameter outside its unit, where it holds no memory ({}{}); "
      "a unit's parameters exist only inside its forward. {} LibTorch said: {}",
      where, matching.empty() ? "released: " : "", list, advice, what.substr(0, what.find('\n')));
}

namespace {

constexpr const char* kTiedWeightsAdvice =
    "Tied weights: compute both uses inside the unit that owns the weight (one unit may run twice "
    "per forward), put the layers that share it in one unit, or keep the weight outside every "
    "unit (the root unit stays gathered).";

}  // namespace

void FullyShardedModel::Impl::explain_layer_error(const std::string& where) const {
  try {
    throw;
  } catch (const c10::Error& e) {
    if (auto message = explain_storage_error(e.what_without_backtrace(), where, kTiedWeightsAdvice))
      throw InvalidArgument(*message);
    throw;
  }
}

// Note [Reads outside the units]
// No lockstep code runs when the wrapped Sequential's own forward or the
// model's code between units reads a released parameter (LibTorch C++ has
// no forward pre-hook, and the Sequential's layers cannot be wrapped without
// changing what model[i] and at<T>(i) return), so LibTorch's c10::Error
// goes to the caller as it is. Left uncaught it would abort the process
// (SIGABRT, "out of bounds for storage of size 0"); while a model lives, a
// terminate handler (before lockstep's, installed once) recognizes it and
// ends the process as an uncaught lockstep::InvalidArgument does (the line,
// exit code 70, `lockstep run` naming the fix). Anything else goes on to the
// previous handler.
namespace {

struct WatchedModel {
  const FullyShardedModel::Impl* impl;
  int rank;  // lt::rank() at construction, for the line
};

std::mutex g_watched_mutex;
std::vector<WatchedModel> g_watched;  // guarded by g_watched_mutex
std::terminate_handler g_fsdp_next_terminate = nullptr;

std::optional<std::string> explain_uncaught(const std::string& what, int& rank) {
  std::unique_lock lock(g_watched_mutex, std::try_to_lock);  // never block a dying process
  if (!lock.owns_lock()) return std::nullopt;
  for (const WatchedModel& w : g_watched) {
    auto message =
        w.impl->modules
            ? w.impl->explain_storage_error(
                  what,
                  "code outside every FullyShardedUnit (the model's own forward between "
                  "units, or its backward)",
                  kTiedWeightsAdvice)
            : w.impl->explain_storage_error(
                  what, "code outside fsdp.forward",
                  "Run a Sequential sharded by a FullyShardedModel through fsdp.forward(x), not "
                  "its own model->forward(x) (LibTorch C++ has no forward pre-hook that could "
                  "gather the units there); to evaluate with model->forward(x), call "
                  "fsdp.gather_full() first and fsdp.release_full() after.");
    if (message) {
      rank = w.rank;
      return message;
    }
  }
  return std::nullopt;
}

[[noreturn]] void on_fsdp_uncaught() {
  if (std::exception_ptr current = std::current_exception()) {
    std::optional<std::string> message;
    int rank = -1;
    try {
      std::rethrow_exception(current);
    } catch (const c10::Error& e) {
      message = explain_uncaught(e.what_without_backtrace(), rank);
    } catch (...) {
    }
    if (message) {
      std::fflush(stdout);
      const std::string line =
          uncaught_error_line("lockstep::InvalidArgument", *message, rank) + "\n";
      [[maybe_unused]] ssize_t n = ::write(STDERR_FILENO, line.data(), line.size());
      ::_exit(kUncaughtErrorExitCode);  // as lockstep's handler ends a lockstep::Error
    }
  }
  if (g_fsdp_next_terminate) g_fsdp_next_terminate();
  std::abort();
}

}  // namespace

void FullyShardedModel::Impl::watch_uncaught() {
  static std::once_flag once;
  std::call_once(once, [] {
    install_terminate_handler();  // lockstep's, so that it is the one that comes next
    g_fsdp_next_terminate = std::set_terminate(on_fsdp_uncaught);
  });
  std::lock_guard lock(g_watched_mutex);
  g_watched.push_back({this, lt::rank()});
}

void FullyShardedModel::Impl::unwatch_uncaught() {
  std::lock_guard lock(g_watched_mutex);
  std::erase_if(g_watched, [this](const WatchedModel& w) { return w.impl == this; });
}

}  // namespace lockstep::parallel
