#include "engine/submission.h"

#include <algorithm>
#include <numeric>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "engine/collective_traits.h"
#include "lockstep/base/error.h"

namespace lockstep::engine::detail {
namespace {

[[noreturn]] void fail(const Request& r, const std::string& what) {
  throw InvalidArgument(fmt::format("{} '{}': {}", collective_name(r.collective), r.name, what));
}

void check_splits(Entry& e, int set_size) {
  Request& r = e.request;
  int64_t rows = r.shape[0];
  if (r.splits.empty()) {
    if (rows % set_size != 0)
      fail(r, fmt::format("first dimension {} does not divide evenly among {} ranks; pass splits",
                          rows, set_size));
    r.splits.assign(set_size, rows / set_size);
  }
  if (static_cast<int>(r.splits.size()) != set_size)
    fail(r, fmt::format("{} splits for {} ranks", r.splits.size(), set_size));
  for (int64_t s : r.splits)
    if (s < 0) fail(r, fmt::format("negative split in [{}]", fmt::join(r.splits, ",")));
  int64_t sum = std::accumulate(r.splits.begin(), r.splits.end(), int64_t{0});
  if (sum != rows)
    fail(r, fmt::format("splits [{}] add up to {} but the first dimension is {}",
                        fmt::join(r.splits, ","), sum, rows));
}

}  // namespace

Entry make_entry(Collective collective, std::string name, const void* input, void* output,
                 Shape shape, DataType dtype) {
  Entry e;
  e.request.collective = collective;
  e.request.name = std::move(name);
  e.request.shape = std::move(shape);
  e.request.dtype = dtype;
  e.input = input;
  e.output = output;
  return e;
}

// A grouped allgather's or reduce-scatter's members, one entry each, or
// InvalidArgument when the lists differ in length.
std::vector<Entry> allocating_group(Collective collective, const char* what,
                                    const std::vector<std::string>& names,
                                    const std::vector<const void*>& inputs,
                                    const std::vector<Shape>& shapes,
                                    const std::vector<DataType>& dtypes,
                                    std::vector<Allocator>& allocates) {
  const size_t n = names.size();
  if (n == 0 || inputs.size() != n || shapes.size() != n || dtypes.size() != n ||
      allocates.size() != n)
    throw InvalidArgument(fmt::format(
        "{}: {} names, {} inputs, {} shapes, {} dtypes and {} allocators: need the same non-zero "
        "count of each",
        what, names.size(), inputs.size(), shapes.size(), dtypes.size(), allocates.size()));
  std::vector<Entry> entries;
  for (size_t i = 0; i < n; ++i) {
    entries.push_back(make_entry(collective, names[i], inputs[i], nullptr, shapes[i], dtypes[i]));
    entries.back().allocate = std::move(allocates[i]);
  }
  return entries;
}

void validate(Entry& e, int set_size) {
  Request& r = e.request;
  if (r.name.empty())
    fail(r, "the name is empty; every operation needs a name unique while pending");
  if (!comm::is_valid(r.dtype)) fail(r, fmt::format("unknown dtype {}", static_cast<int>(r.dtype)));
  if (!comm::is_valid(r.op)) fail(r, fmt::format("unknown reduce op {}", static_cast<int>(r.op)));
  for (int64_t d : r.shape)
    if (d < 0) fail(r, fmt::format("negative dimension in shape {}", format_shape(r.shape)));
  const CollectiveTraits& t = traits(r.collective);
  const bool has_elements = num_elements(r.shape) > 0;
  if (t.carries_data && has_elements && !e.input) fail(r, "input buffer is null");
  if (t.carries_data && !t.allocates_output && has_elements && !e.output)
    fail(r, "output buffer is null");
  // Host integers scale in f64 and truncate, as Horovod does; the device path
  // folds the factor into NCCL's premultiplied sum in the element type, which
  // would round 0.5 to 0 there.
  if (t.scales && !comm::is_floating(r.dtype) && r.memory != comm::MemoryKind::kHost &&
      (r.prescale != 1.0 || r.postscale != 1.0))
    fail(r, fmt::format("prescale/postscale on device memory need a floating dtype, not {}; "
                        "scale a {} tensor on the host or cast it to float first",
                        comm::dtype_name(r.dtype), comm::dtype_name(r.dtype)));
  if (t.has_root && (r.root < 0 || r.root >= set_size))
    fail(r, fmt::format("root {} is out of range [0, {}) (a root is a rank within the process "
                        "set, not a global rank)",
                        r.root, set_size));
  if (t.allocates_output) {
    if (r.shape.empty()) fail(r, "needs at least one dimension (the one split or gathered)");
    if (!e.allocate) fail(r, "needs an allocator for its output");
  }
  if (r.collective == Collective::kAlltoall) check_splits(e, set_size);
}

std::vector<int> checked_set_ranks(std::vector<int> ranks, int world_size) {
  std::sort(ranks.begin(), ranks.end());
  if (ranks.empty()) throw InvalidArgument("process set: the rank list is empty");
  if (std::adjacent_find(ranks.begin(), ranks.end()) != ranks.end())
    throw InvalidArgument(
        fmt::format("process set: rank listed twice in [{}]", fmt::join(ranks, ",")));
  if (ranks.front() < 0 || ranks.back() >= world_size)
    throw InvalidArgument(fmt::format("process set: ranks [{}] must lie in [0, {})",
                                      fmt::join(ranks, ","), world_size));
  return ranks;
}

}  // namespace lockstep::engine::detail
