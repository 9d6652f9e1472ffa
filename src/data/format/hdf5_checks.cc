#include "data/format/hdf5_checks.h"

#include <fmt/format.h>

#include "data/format/hdf5_util.h"

// Note [HDF5 storage checks]
// libhdf5 1.10 trusts a dataset's header where a read is concerned, and the
// fuzzer (fuzz/hdf5_fuzz.cc) keeps finding what that costs:
//  - a chunk shape of 4 GiB: libhdf5 callocs a whole chunk to read one row;
//  - a chunk index giving a 32-byte chunk a stored size of 3.5 GB: it
//    mallocs a chunk's stored size to read it; and one giving a chunk of an
//    unfiltered dataset fewer bytes than a chunk holds: it copies a whole
//    chunk out of the smaller buffer;
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

struct ChunkGrid {
  int rank = 0;
  hsize_t dims[H5S_MAX_RANK] = {};  // of one chunk
  hsize_t bytes = 0;                // of one chunk, unfiltered
  hsize_t count = 1;                // chunks the dataset's extent needs
};

ChunkGrid check_chunk(const std::string& path, hid_t plist, hid_t dataset, const std::string& name,
                      const Shape& shape) {
  ChunkGrid g;
  g.rank = H5Pget_chunk(plist, H5S_MAX_RANK, g.dims);
  Id type(H5Dget_type(dataset), H5Tclose);
  g.bytes = H5Tget_size(type.get());
  for (int d = 0; d < g.rank && g.bytes <= kMaxChunkBytes; ++d) g.bytes *= g.dims[d];
  if (g.rank <= 0 || g.rank != shape.rank || g.bytes == 0 || g.bytes > kMaxChunkBytes)
    fail(path, fmt::format("dataset '{}' has chunks of more than 256 MiB (or an unreadable "
                           "chunk shape): the file is corrupt, or rechunk it smaller (for "
                           "example `h5repack -l {}:CHUNK=64x...`)",
                           name, name));
  for (int d = 0; d < g.rank; ++d)
    g.count = times(g.count, shape.dims[d] / g.dims[d] + (shape.dims[d] % g.dims[d] != 0));
  return g;
}

// Every chunk of the grid must be stored and, without filters, hold exactly
// one chunk's bytes: libhdf5 reads a chunk's stored size and then copies a
// whole chunk out of it (the fuzzer's fourth find: a 9-byte chunk of int64
// labels, copied as 32). Looked up chunk by chunk (O(log n) each), after
// H5Dget_num_chunks bounded the grid by what the file holds.
void check_chunks_written(const std::string& path, hid_t plist, hid_t dataset,
                          const std::string& name, const Shape& shape, const char* advice) {
  const ChunkGrid g = check_chunk(path, plist, dataset, name, shape);
  Id space(H5Dget_space(dataset), H5Sclose);
  hsize_t stored = 0;
  if (H5Dget_num_chunks(dataset, space.get(), &stored) < 0 || stored < g.count)
    fail(path, fmt::format("dataset '{}' stores {} of the {} chunks its shape needs: {}", name,
                           stored, g.count, advice));
  const bool filtered = H5Pget_nfilters(plist) > 0;  // compressed chunks have any size
  hsize_t at[H5S_MAX_RANK] = {};                     // the chunk's first element
  for (hsize_t i = 0; i < g.count; ++i) {
    // The index entry's own size, which the read trusts (H5Dget_chunk_storage_size
    // reports a whole chunk for every stored chunk of an unfiltered dataset).
    unsigned filter_mask = 0;
    haddr_t address = HADDR_UNDEF;
    hsize_t bytes = 0;
    if (H5Dget_chunk_info_by_coord(dataset, at, &filter_mask, &address, &bytes) < 0 ||
        address == HADDR_UNDEF || bytes == 0)
      fail(path, fmt::format("dataset '{}' has no stored chunk at element {} ({} chunks "
                             "listed): {}",
                             name, at[0], stored, advice));
    if (!filtered && bytes != g.bytes)
      fail(path, fmt::format("dataset '{}' stores {} bytes for the chunk at element {}, where "
                             "an uncompressed chunk holds {}: its chunk index is corrupt; "
                             "rewrite the file from a good copy",
                             name, bytes, at[0], g.bytes));
    for (int d = g.rank - 1; d >= 0; --d) {  // the next chunk, last dimension fastest
      at[d] += g.dims[d];
      if (at[d] < shape.dims[d]) break;
      at[d] = 0;
    }
  }
}

void check_written(const std::string& path, hid_t plist, hid_t dataset, const std::string& name,
                   const Shape& shape) {
  const char* advice =
      "it was created but never (fully) written, or the file is truncated or "
      "corrupt; unwritten rows would read as the fill value: write the data "
      "set again";
  if (H5Pget_layout(plist) == H5D_CHUNKED)
    return check_chunks_written(path, plist, dataset, name, shape, advice);
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
