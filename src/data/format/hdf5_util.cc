#include "data/format/hdf5_util.h"

#include <mutex>

#include <fmt/format.h>

#include "lockstep/base/error.h"

namespace lockstep::data::hdf5 {
namespace {

herr_t collect(unsigned n, const H5E_error2_t* err, void* out) {
  auto* text = static_cast<std::string*>(out);
  if (!err->desc || !*err->desc) return 0;
  // Walking upward from the innermost frame: keep the two most specific ones.
  if (n >= 2) return 0;
  if (!text->empty()) *text += "; ";
  *text += err->desc;
  return 0;
}

}  // namespace

void fail(const std::string& path, const std::string& what) {
  throw Error(fmt::format("{}: {}", path, what));
}

Mutex& library_mutex() {
  static Mutex mu;
  return mu;
}

void silence_errors() {
  static std::once_flag once;
  std::call_once(once, [] { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); });
  // Each thread has its own error stack settings in the thread-safe build.
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
}

std::string last_error() {
  std::string text;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, collect, &text);
  H5Eclear2(H5E_DEFAULT);
  return text.empty() ? "HDF5 gave no reason" : text;
}

}  // namespace lockstep::data::hdf5
