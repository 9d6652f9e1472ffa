// serialize_example / parse_example in a build without protobuf
// (LOCKSTEP_WITH_PROTOBUF=OFF: the default beside a LibTorch that exports its
// own protobuf, docs/gpu.md). tf.train.Example records cannot be written or
// read there; every other data format works.
#include <fmt/format.h>

#include "lockstep/base/error.h"
#include "lockstep/data/example.h"

namespace lockstep::data {

std::string serialize_example(const Example&) {
  throw InvalidArgument(
      "this lockstep was built without protobuf (LOCKSTEP_WITH_PROTOBUF=OFF), so it cannot write "
      "tf.train.Example records; build with protobuf (docs/gpu.md) or use HDF5/LMDB/IDX data");
}

std::optional<Example> parse_example(std::string_view, std::string* error) {
  *error =
      "this lockstep was built without protobuf (LOCKSTEP_WITH_PROTOBUF=OFF) and cannot "
      "parse tf.train.Example records (docs/gpu.md)";
  return std::nullopt;
}

}  // namespace lockstep::data
