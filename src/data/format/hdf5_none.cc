// The HDF5 format in a build without HDF5 (LOCKSTEP_WITH_HDF5=OFF, e.g. a GPU
// node's build with no HDF5 library, docs/gpu.md): opening or writing one
// names the missing option instead of failing to link.
#include "lockstep/base/error.h"
#include "data/format/dataset_writer.h"
#include "data/format/source_formats.h"

namespace lockstep::data {
namespace {

[[noreturn]] void no_hdf5(const char* what) {
  throw InvalidArgument(std::string("this lockstep was built without HDF5 "
                                    "(LOCKSTEP_WITH_HDF5=OFF), so it cannot ") +
                        what + "; rebuild with the HDF5 library found, or use records/LMDB data");
}

}  // namespace

std::unique_ptr<SampleSource> open_hdf5_source(const SourceSpec&) { no_hdf5("read HDF5 files"); }
std::unique_ptr<DatasetWriter> make_hdf5_writer(const ShardOutput&) { no_hdf5("write HDF5 files"); }

}  // namespace lockstep::data
