#include "engine/collective_traits.h"

#include <array>

#include "lockstep/base/error.h"

namespace lockstep::engine::detail {
namespace {

// Rows in enum order (checked below); a new collective is one more row.
// The format is off for the table: it is read by its columns.
// clang-format off
constexpr auto kTraits = std::to_array<CollectiveTraits>({
    // collective                 name              data   reduce scale  root   dim0   alloc  fuse   cache  joined
    {Collective::kAllreduce,      "allreduce",      true,  true,  true,  false, false, false, true,  true,  true},
    // Allgather refuses joined ranks (Horovod does too): zero rows from a
    // joined rank would give a result shorter than the program expects.
    {Collective::kAllgather,      "allgather",      true,  false, false, false, true,  true,  false, true,  false},
    {Collective::kBroadcast,      "broadcast",      true,  false, false, true,  false, false, false, true,  true},
    {Collective::kAlltoall,       "alltoall",       true,  false, false, false, true,  true,  false, true,  false},
    {Collective::kReduceScatter,  "reduce_scatter", true,  true,  false, false, false, true,  false, true,  false},
    {Collective::kBarrier,        "barrier",        false, false, false, false, false, false, false, true,  true},
    {Collective::kJoin,           "join",           false, false, false, false, false, false, false, false, true},
    {Collective::kAddProcessSet,  "add_process_set", false, false, false, false, false, false, false, false, false},
});
// clang-format on

constexpr bool in_enum_order() {
  for (size_t i = 0; i < kTraits.size(); ++i)
    if (static_cast<size_t>(kTraits[i].collective) != i) return false;
  return true;
}
static_assert(in_enum_order(), "kTraits rows must follow enum Collective");

}  // namespace

const CollectiveTraits& traits(Collective c) {
  size_t i = static_cast<size_t>(c);
  if (i >= kTraits.size()) throw InvalidArgument("unknown engine collective");
  return kTraits[i];
}

}  // namespace lockstep::engine::detail
