#include "data/format/hdf5_checks.h"

#include <fmt/format.h>

#include "data/format/hdf5_util.h"
#include "lockstep/base/error.h"

// Note [HDF5 storage checks]
// libhdf5 1.10 trusts a dataset's header where a read is concerned, and the
// fuzzer (fuzz/hdf5_fuzz.cc) keeps finding what that costs:
//  - a chunk shape of 4 GiB: libhdf5 callocs a whole chunk to read one row;
//  - a chunk index giving a 32-byte chunk a stored size of 3.5 GB: it
//    mallocs a chunk's stored size to read it;
//  - a dataset never (fully) written: rows without storage read as the fill
//    value, and libhdf5 copies the dataset type's size from a fill buffer of
//    the size the fill message claims, so a fill message shorter than the
//    type reads past the end of libhdf5's own buffer (heap-buffer-overflow in
//    H5D__read, found in CI). Training on fill values is wrong anyway: a
//    label set created and never written is all zeros.
// External and virtual storage are refused too: their bytes live in other
// files a hostile header can name (any readable file would become pixels).
// So every dataset must keep all its data inside the file, every byte (or
// every chunk) its shape promises must be stored, and nothing stored may be
// larger than the file. The checks read only the header and the chunk
// index, which the metadata probe (Note [HDF5 probe]) walks first.

namespace lockstep::data::hdf5 {
namespace {

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw Error(fmt::format("{}: {}", path, what));
}

// libhdf5 allocates a whole chunk to read any row of it. Real data sets
// chunk at kilobytes to megabytes; refuse chunks past the limit.
constexpr hsize_t kMaxChunkBytes = hsize_t{256} << 20;

// A corrupt header's extents can multiply past 2^64; a product that would
// saturates, which every check below then refuses as more than the file.
hsize_t times(hsize_t a, hsize_t b) {
  hsize_t out = 0;
  return __builtin_mul_overflow(a, b, &out) ? ~hsize_t{0} : out;
}

struct Shape {
  int rank = 0;
  hsize_t dims[H5S_MAX_RANK] = {};
  hsize_t points() const {
    hsize_t n = 1;
    for (int d = 0; d < rank; ++d) n = times(n, dims[d]);
    return n;
  }
};

Shape shape_of(hid_t dataset) {
  Id space(H5Dget_space(dataset), H5Sclose);
  Shape s;
  s.rank = H5Sget_simple_extent_ndims(space.get());
  if (s.rank < 0 || s.rank > H5S_MAX_RANK) s.rank = 0;
  if (s.rank > 0) H5Sget_simple_extent_dims(space.get(), s.dims, nullptr);
  return s;
}

void check_inside_file(const std::string& path, hid_t plist, const std::string& name) {
  if (H5Pget_layout(plist) == H5D_VIRTUAL)
    fail(path, fmt::format("dataset '{}' is a virtual dataset (its data lives in other files); "
                           "lockstep reads data stored in the file itself: copy it in with "
                           "`h5repack -l {}:CONTI in.h5 out.h5`",
                           name, name));
  if (H5Pget_external_count(plist) > 0)
    fail(path, fmt::format("dataset '{}' keeps its data in external files; lockstep reads data "
                           "stored in the file itself: copy it in with `h5repack -l {}:CONTI "
                           "in.h5 out.h5`",
                           name, name));
}

void check_stored_size(const std::string& path, hid_t file, hid_t dataset,
                       const std::string& name) {
  hsize_t file_bytes = 0;
  if (H5Fget_filesize(file, &file_bytes) < 0) return;
  hsize_t stored = H5Dget_storage_size(dataset);
  if (stored > file_bytes)
    fail(path, fmt::format("dataset '{}' claims {} stored bytes in a file of {}: its chunk "
                           "index is corrupt; rewrite the file from a good copy",
                           name, stored, file_bytes));
}

// Returns the number of chunks the dataset's extent needs.
hsize_t check_chunk(const std::string& path, hid_t plist, hid_t dataset, const std::string& name,
                    const Shape& shape) {
  hsize_t chunk[H5S_MAX_RANK] = {};
  int rank = H5Pget_chunk(plist, H5S_MAX_RANK, chunk);
  Id type(H5Dget_type(dataset), H5Tclose);
  hsize_t bytes = H5Tget_size(type.get());
  for (int d = 0; d < rank && bytes <= kMaxChunkBytes; ++d) bytes *= chunk[d];
  if (rank <= 0 || rank != shape.rank || bytes == 0 || bytes > kMaxChunkBytes)
    fail(path, fmt::format("dataset '{}' has chunks of more than 256 MiB (or an unreadable "
                           "chunk shape): the file is corrupt, or rechunk it smaller (for "
                           "example `h5repack -l {}:CHUNK=64x...`)",
                           name, name));
  hsize_t needed = 1;
  for (int d = 0; d < rank; ++d) needed = times(needed, shape.dims[d] / chunk[d] + (shape.dims[d] % chunk[d] != 0));
  return needed;
}

void check_written(const std::string& path, hid_t plist, hid_t dataset, const std::string& name,
                   const Shape& shape) {
  const char* advice = "it was created but never (fully) written, or the file is truncated or "
                       "corrupt; unwritten rows would read as the fill value: write the data "
                       "set again";
  if (H5Pget_layout(plist) == H5D_CHUNKED) {
    hsize_t needed = check_chunk(path, plist, dataset, name, shape);
    Id space(H5Dget_space(dataset), H5Sclose);
    hsize_t stored = 0;
    if (H5Dget_num_chunks(dataset, space.get(), &stored) < 0 || stored < needed)
      fail(path, fmt::format("dataset '{}' stores {} of the {} chunks its shape needs: {}", name,
                             stored, needed, advice));
    return;
  }
  Id type(H5Dget_type(dataset), H5Tclose);
  hsize_t promised = times(shape.points(), H5Tget_size(type.get()));
  hsize_t stored = H5Dget_storage_size(dataset);
  if (stored < promised)
    fail(path, fmt::format("dataset '{}' promises {} bytes but the file stores {}: {}", name,
                           promised, stored, advice));
}

}  // namespace

void check_storage(const std::string& path, hid_t file, hid_t dataset, const std::string& name) {
  Id plist(H5Dget_create_plist(dataset), H5Pclose);
  check_inside_file(path, plist.get(), name);
  check_stored_size(path, file, dataset, name);
  check_written(path, plist.get(), dataset, name, shape_of(dataset));
}

}  // namespace lockstep::data::hdf5
