// Internal: small RAII and error helpers over the HDF5 C API, shared by the
// HDF5 source and writer. Debian's libhdf5 is built thread-safe (one global
// lock inside the library), so these may be used from any thread.
#pragma once

#include <hdf5.h>

#include <string>
#include <utility>

#include "lockstep/base/mutex.h"

namespace lockstep::data::hdf5 {

// Owns one hid_t and closes it with the matching H5?close.
class Id {
 public:
  using Closer = herr_t (*)(hid_t);
  Id() = default;
  Id(hid_t id, Closer close) : id_(id), close_(close) {}
  ~Id() { reset(); }
  Id(Id&& o) noexcept : id_(std::exchange(o.id_, H5I_INVALID_HID)), close_(o.close_) {}
  Id& operator=(Id&& o) noexcept {
    if (this != &o) {
      reset();
      id_ = std::exchange(o.id_, H5I_INVALID_HID);
      close_ = o.close_;
    }
    return *this;
  }
  Id(const Id&) = delete;
  Id& operator=(const Id&) = delete;

  hid_t get() const { return id_; }
  bool valid() const { return id_ >= 0; }
  void reset() {
    if (id_ >= 0 && close_) close_(id_);
    id_ = H5I_INVALID_HID;
  }

 private:
  hid_t id_ = H5I_INVALID_HID;
  Closer close_ = nullptr;
};

// Held around every libhdf5 call lockstep makes, so that the metadata probe
// (source_hdf5.cc, Note [HDF5 probe]) never forks while a thread of ours is
// inside the library holding its internal lock.
Mutex& library_mutex();

// Throws lockstep::Error "<path>: <what>": every HDF5 refusal names the file.
[[noreturn]] void fail(const std::string& path, const std::string& what);

// Turns off HDF5's printing of error stacks to stderr (once per process);
// errors are reported through last_error() in our own messages instead.
void silence_errors();
// The innermost descriptions on this thread's HDF5 error stack, e.g.
// "truncated file: eof = 1024, sblock->base_addr = 0, stored_eof = 4096".
std::string last_error();

}  // namespace lockstep::data::hdf5
