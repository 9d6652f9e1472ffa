// A torch.save(state_dict) file from anywhere (a colleague, a model hub): the
// two layers of lockstep's reader that see its raw bytes before LibTorch
// does, each given every input:
//   the zip check (src/torch/zip_check.h), on the input as a file (a memfd),
//     stored-only as the reader asks and not;
//   the restricted unpickler (Note [Restricted unpickler] in
//     src/torch/state_dict_pickle.h), on the input as a data.pkl.
// Each must end in a result or lockstep::Error (any other exception, a crash
// or a sanitizer report is a finding), and what they return must keep their
// promises: stored records no larger than the file; tensors with unique
// names whose elements lie inside their storage's declared numel. Both are
// LibTorch-free but for the unpickler's ScalarType tags, which
// fuzz/torch_shim/torch/torch.h stands in for (the fuzz tree has no LibTorch).
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <set>
#include <string>
#include <string_view>

#include "lockstep/base/error.h"
#include "torch/state_dict_pickle.h"
#include "torch/zip_check.h"

namespace {

namespace detail = lockstep::torch::detail;

void check_zip(const uint8_t* data, size_t size) {
  int fd = ::memfd_create("torch-save", MFD_CLOEXEC);
  if (fd < 0) return;
  if (::write(fd, data, size) == static_cast<ssize_t>(size)) {
    const std::string path = "/proc/self/fd/" + std::to_string(fd);
    for (bool stored_only : {true, false}) {
      try {
        for (const auto& [name, bytes] : detail::checked_zip_records(path, stored_only))
          if (stored_only && bytes > size) __builtin_trap();  // the reader would allocate it
      } catch (const lockstep::Error&) {
      }
    }
  }
  ::close(fd);
}

// The last element's index lies inside the storage (as rebuild_tensor promises).
bool inside_storage(const detail::PickledTensor& t) {
  if (t.offset < 0 || t.storage_numel < 0 || t.sizes.size() != t.strides.size()) return false;
  __int128 last = t.offset;
  for (size_t d = 0; d < t.sizes.size(); ++d) {
    if (t.sizes[d] < 0 || t.strides[d] < 0) return false;
    if (t.sizes[d] == 0) return true;  // empty: no element to reach
    last += static_cast<__int128>(t.sizes[d] - 1) * t.strides[d];
  }
  return last < t.storage_numel;
}

void check_pickle(const uint8_t* data, size_t size) {
  const std::string what = "fuzz.pt";
  try {
    auto tensors = detail::unpickle_state_dict(
        std::string_view(reinterpret_cast<const char*>(data), size), what);
    std::set<std::string> names;
    for (const auto& t : tensors) {
      if (!names.insert(t.name).second || t.storage_key.empty() || t.sizes.size() > 64)
        __builtin_trap();
      if (!inside_storage(t)) __builtin_trap();
    }
  } catch (const lockstep::Error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  check_zip(data, size);
  check_pickle(data, size);
  return 0;
}
