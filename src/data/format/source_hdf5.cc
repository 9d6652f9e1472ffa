// SampleSource over HDF5 files: an image dataset [N, H, W(, C)] and a label
// dataset [N] per file, read by hyperslab.
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <numeric>
#include <thread>

#include <fmt/format.h>

#include "data/format/hdf5_checks.h"
#include "data/format/hdf5_util.h"
#include "lockstep/base/error.h"
#include "data/format/source_formats.h"

namespace lockstep::data {
namespace {

using hdf5::Id;

enum class PixelType { kU8, kF32 };

struct Hdf5File {
  std::string path;
  Id file, images, labels;
  PixelType pixels = PixelType::kU8;
  std::vector<hsize_t> dims;  // of the images, dims[0] = N
  hsize_t chunk_rows = 1;     // 1 when contiguous
  size_t item_values() const {
    return std::accumulate(dims.begin() + 1, dims.end(), size_t{1}, std::multiplies<>());
  }
  size_t item_bytes() const { return item_values() * (pixels == PixelType::kU8 ? 1 : 4); }
};

using hdf5::fail;

herr_t list_dataset(hid_t, const char* name, const H5O_info_t* info, void* out) {
  if (info->type == H5O_TYPE_DATASET) static_cast<std::vector<std::string>*>(out)->push_back(name);
  return 0;
}

std::string datasets_in(hid_t file) {
  std::vector<std::string> names;
  H5Ovisit2(file, H5_INDEX_NAME, H5_ITER_NATIVE, list_dataset, &names, H5O_INFO_BASIC);
  H5Eclear2(H5E_DEFAULT);
  if (names.empty()) return "the file holds no datasets";
  std::string text = "datasets in the file:";
  for (size_t i = 0; i < names.size() && i < 10; ++i) text += " /" + names[i];
  if (names.size() > 10) text += fmt::format(" (and {} more)", names.size() - 10);
  return text;
}

Id open_dataset(const Hdf5File& f, const std::string& name, const char* role) {
  htri_t exists = H5Lexists(f.file.get(), name.c_str(), H5P_DEFAULT);
  if (exists < 0)  // not "absent": the group's own metadata is unreadable
    fail(f.path, fmt::format("cannot look up the {} dataset '{}' ({}): the file is corrupt; "
                             "rewrite it from a good copy",
                             role, name, hdf5::last_error()));
  if (exists == 0) {
    H5Eclear2(H5E_DEFAULT);
    fail(f.path, fmt::format("no {} dataset '{}' ({}); name it with --{}-dataset", role, name,
                             datasets_in(f.file.get()),
                             role == std::string("image") ? "images" : "labels"));
  }
  Id id(H5Dopen2(f.file.get(), name.c_str(), H5P_DEFAULT), H5Dclose);
  if (!id.valid())
    fail(f.path, fmt::format("cannot open dataset '{}': {}", name, hdf5::last_error()));
  return id;
}

std::vector<hsize_t> dims_of(hid_t dataset) {
  Id space(H5Dget_space(dataset), H5Sclose);
  int rank = H5Sget_simple_extent_ndims(space.get());
  std::vector<hsize_t> dims(rank > 0 ? rank : 0);
  if (rank > 0) H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
  return dims;
}

std::string type_name(hid_t type) {
  H5T_class_t cls = H5Tget_class(type);
  size_t bits = H5Tget_size(type) * 8;
  switch (cls) {
    case H5T_INTEGER:
      return fmt::format("{}int{}", H5Tget_sign(type) == H5T_SGN_NONE ? "u" : "", bits);
    case H5T_FLOAT: return fmt::format("float{}", bits);
    case H5T_STRING: return "string";
    case H5T_COMPOUND: return "compound";
    case H5T_VLEN: return "variable-length";
    default: return "another HDF5 type class";
  }
}

void check_types(Hdf5File& f, const SourceSpec& spec) {
  Id image_type(H5Dget_type(f.images.get()), H5Tclose);
  Id label_type(H5Dget_type(f.labels.get()), H5Tclose);
  H5T_class_t cls = H5Tget_class(image_type.get());
  if (cls == H5T_INTEGER && H5Tget_size(image_type.get()) == 1 &&
      H5Tget_sign(image_type.get()) == H5T_SGN_NONE)
    f.pixels = PixelType::kU8;
  else if (cls == H5T_FLOAT && H5Tget_size(image_type.get()) <= 8)
    f.pixels = PixelType::kF32;  // float64 is converted to float32 on read
  else
    fail(f.path, fmt::format("dataset '{}' has unsupported dtype {}: images must be uint8 "
                             "(scaled to [0, 1]) or float32/float64 (used as they are)",
                             spec.images_dataset, type_name(image_type.get())));
  if (H5Tget_class(label_type.get()) != H5T_INTEGER || H5Tget_size(label_type.get()) > 8)
    fail(f.path, fmt::format("dataset '{}' has unsupported dtype {}: labels must be integers "
                             "of at most 64 bits",
                             spec.labels_dataset, type_name(label_type.get())));
}

void check_shapes(Hdf5File& f, const SourceSpec& spec) {
  f.dims = dims_of(f.images.get());
  std::vector<hsize_t> label_dims = dims_of(f.labels.get());
  if (f.dims.size() != 3 && f.dims.size() != 4)
    fail(f.path, fmt::format("dataset '{}' has {} dimensions; images must be [N, H, W] or "
                             "[N, H, W, C]",
                             spec.images_dataset, f.dims.size()));
  if (f.dims.size() == 4 && f.dims[3] != 1 && f.dims[3] != 3)
    fail(f.path, fmt::format("dataset '{}' is [N, H, W, C] with C = {}; C must be 1 or 3 "
                             "(channels last)",
                             spec.images_dataset, f.dims[3]));
  if (label_dims.size() != 1)
    fail(f.path, fmt::format("dataset '{}' has {} dimensions; labels must be [N]",
                             spec.labels_dataset, label_dims.size()));
  if (label_dims[0] != f.dims[0])
    fail(f.path, fmt::format("mismatched lengths: '{}' holds {} images but '{}' holds {} labels",
                             spec.images_dataset, f.dims[0], spec.labels_dataset, label_dims[0]));
}

// A corrupt header can claim any extent; refuse what no image is before a
// read allocates it (the storage itself: Note [HDF5 storage checks]).
constexpr size_t kMaxItemBytes = size_t{256} << 20;

void check_extent(const Hdf5File& f, const SourceSpec& spec) {
  if (f.item_bytes() == 0 || f.item_bytes() > kMaxItemBytes)
    fail(f.path, fmt::format("dataset '{}' claims images of {} bytes each; more than 256 MiB "
                             "(or empty) means a corrupt file or images that need tiling",
                             spec.images_dataset, f.item_bytes()));
  hdf5::check_storage(f.path, f.file.get(), f.images.get(), spec.images_dataset);
  hdf5::check_storage(f.path, f.file.get(), f.labels.get(), spec.labels_dataset);
}

hsize_t chunk_rows_of(hid_t dataset) {
  Id plist(H5Dget_create_plist(dataset), H5Pclose);
  if (H5Pget_layout(plist.get()) != H5D_CHUNKED) return 1;
  hsize_t chunk[8] = {};
  int rank = H5Pget_chunk(plist.get(), 8, chunk);
  return rank > 0 && chunk[0] > 0 ? chunk[0] : 1;
}

Hdf5File open_file(const std::string& path, const SourceSpec& spec) {
  hdf5::silence_errors();
  Hdf5File f;
  f.path = path;
  if (H5Fis_hdf5(path.c_str()) <= 0) {
    std::string why = hdf5::last_error();
    fail(path,
         fmt::format("not a readable HDF5 file ({}); it is missing, truncated or corrupt", why));
  }
  f.file = Id(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  if (!f.file.valid())
    fail(path, fmt::format("cannot open as HDF5 ({}); the file is truncated or corrupt",
                           hdf5::last_error()));
  f.images = open_dataset(f, spec.images_dataset, "image");
  f.labels = open_dataset(f, spec.labels_dataset, "label");
  check_types(f, spec);
  check_shapes(f, spec);
  check_extent(f, spec);
  f.chunk_rows = chunk_rows_of(f.images.get());
  return f;
}

// Note [HDF5 probe]
// libhdf5 1.10 trusts the metadata of files in the pre-1.8 format (no
// checksums; h5py's default), and a corrupt symbol table or B-tree node can
// make it read through a NULL pointer: our fuzzer found H5G__stab_lookup
// doing so within a minute. So a child process walks a file's metadata first
// — superblock, groups, the two datasets, their types and shapes, and the
// whole chunk index (check_storage's H5Dget_storage_size and
// H5Dget_num_chunks visit every chunk) — and a crash
// there becomes an Error naming the file instead of killing the job. Reads
// afterwards follow the same metadata, now walked. Files in the 1.10 format
// (what `lockstep convert` writes) have checksummed metadata, so corruption
// is a clean HDF5 error there anyway. Cost: one fork per file at open.
// library_mutex() is held across the fork, so no thread of ours is inside
// libhdf5 (holding its lock) when the child starts.
constexpr auto kProbeDeadline = std::chrono::seconds(120);
constexpr int kProbeFoundAnError = 3;  // the child's open threw: the parent reports it

void probe_metadata(const std::string& path, const SourceSpec& spec) {
  MutexLock lock(hdf5::library_mutex());
  pid_t pid = ::fork();
  if (pid < 0) return;  // no probe possible: the parent's open is the check
  if (pid == 0) {
    // A crash here is the probe's finding, which the parent reports: die of
    // it quietly, without the process's crash handlers (a user's crash
    // reporter, a sanitizer's report; under the fuzzer, a "crash" artifact
    // for each file the probe refused) and without a core file.
    const struct rlimit no_core {};
    ::setrlimit(RLIMIT_CORE, &no_core);
    for (int sig : {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT}) ::signal(sig, SIG_DFL);
    int code = 0;
    try {
      open_file(path, spec);  // check_storage walks both chunk indexes
    } catch (...) {
      code = kProbeFoundAnError;
    }
    ::_exit(code);
  }
  int status = 0;
  const auto deadline = std::chrono::steady_clock::now() + kProbeDeadline;
  for (;;) {
    pid_t done = ::waitpid(pid, &status, WNOHANG);
    if (done == pid) break;
    if (done < 0 && errno != EINTR) return;
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      fail(path,
           "libhdf5 did not finish reading the file's metadata within 120 s; the file is "
           "corrupt (a cycle in its B-trees?)");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (WIFEXITED(status) && (WEXITSTATUS(status) == 0 || WEXITSTATUS(status) == kProbeFoundAnError))
    return;
  fail(path, fmt::format("libhdf5 crashed ({}) reading the file's metadata in a probe process: "
                         "the file is corrupt; rewrite it from a good copy (lockstep convert "
                         "writes checksummed HDF5)",
                         WIFSIGNALED(status) ? std::string(strsignal(WTERMSIG(status)))
                                             : fmt::format("exit status {}", WEXITSTATUS(status))));
}

// Reads rows [first, first + count) of `dataset` as `mem_type` into `out`.
bool read_rows(hid_t dataset, hid_t mem_type, const std::vector<hsize_t>& dims, hsize_t first,
               hsize_t count, void* out) {
  Id file_space(H5Dget_space(dataset), H5Sclose);
  std::vector<hsize_t> start(dims.size(), 0), extent = dims;
  start[0] = first;
  extent[0] = count;
  if (H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, start.data(), nullptr, extent.data(),
                          nullptr) < 0)
    return false;
  Id mem_space(H5Screate_simple(static_cast<int>(extent.size()), extent.data(), nullptr), H5Sclose);
  return H5Dread(dataset, mem_type, mem_space.get(), file_space.get(), H5P_DEFAULT, out) >= 0;
}

class Hdf5Source final : public SampleSource {
 public:
  explicit Hdf5Source(const SourceSpec& spec) : spec_(spec) {
    try {
      for (const auto& path : spec.paths) {
        probe_metadata(path, spec);
        MutexLock lock(hdf5::library_mutex());
        files_.push_back(open_file(path, spec));
        names_.push_back(fmt::format("{} ({})", path, spec.images_dataset));
        records_.push_back(files_.back().dims[0]);
      }
    } catch (...) {
      MutexLock lock(hdf5::library_mutex());
      files_.clear();
      throw;
    }
    for (const auto& f : files_)
      if (f.pixels != files_[0].pixels ||
          !std::equal(f.dims.begin() + 1, f.dims.end(), files_[0].dims.begin() + 1,
                      files_[0].dims.end()))
        fail(f.path, fmt::format("images differ in shape or dtype from {}: every file of one "
                                 "data set must hold the same kind of images",
                                 files_[0].path));
  }

  ~Hdf5Source() override {
    MutexLock lock(hdf5::library_mutex());
    files_.clear();
  }

  SourceFormat format() const override { return SourceFormat::kHdf5; }

  uint64_t align_block(uint64_t requested) const override {
    uint64_t rows = 1;
    for (const auto& f : files_) rows = std::max<uint64_t>(rows, f.chunk_rows);
    return (requested + rows - 1) / rows * rows;
  }

  SegmentData read(const Segment& s) const override {
    const Hdf5File& f = files_[s.shard];
    SegmentData data;
    data.segment = s;
    size_t item = f.item_bytes();
    data.bytes.resize(item * s.count);
    data.labels.resize(s.count);
    data.ends.resize(s.count);
    for (size_t i = 0; i < s.count; ++i) data.ends[i] = (i + 1) * item;
    MutexLock lock(hdf5::library_mutex());
    hdf5::silence_errors();
    if (read_rows(f.images.get(), mem_type(f), f.dims, s.first, s.count, data.bytes.data()) &&
        read_rows(f.labels.get(), H5T_NATIVE_INT64, {f.dims[0]}, s.first, s.count,
                  data.labels.data()))
      return data;
    // Find which records are unreadable (a corrupt chunk, a truncated file),
    // so that the skip policy can drop exactly those.
    data.bad.assign(s.count, "");
    for (size_t i = 0; i < s.count; ++i)
      if (!read_rows(f.images.get(), mem_type(f), f.dims, s.first + i, 1, &data.bytes[i * item]) ||
          !read_rows(f.labels.get(), H5T_NATIVE_INT64, {f.dims[0]}, s.first + i, 1,
                     &data.labels[i]))
        data.bad[i] = hdf5::last_error();
    return data;
  }

  void decode(const SegmentData& data, size_t i, const DecodeOptions& options, uint64_t seed,
              Sample* out) const override {
    check_readable(data, i);
    augment(view(data, i), options, seed, out);
    out->label = data.labels[i];
  }

  Example example(const SegmentData& data, size_t i) const override {
    check_readable(data, i);
    const Hdf5File& f = files_[data.segment.shard];
    Example e;
    std::vector<int64_t> shape(f.dims.begin() + 1, f.dims.end());
    if (shape.size() == 3 && shape[2] == 1) shape.pop_back();
    std::string_view bytes = data.record(i);
    if (f.pixels == PixelType::kU8) {
      e.set_bytes("image", std::string(bytes)).set_bytes("format", "raw");
    } else {
      FloatList values(bytes.size() / 4);
      std::memcpy(values.data(), bytes.data(), bytes.size());
      e.set_floats("image", std::move(values));
    }
    e.set_int64s("label", {data.labels[i]})
        .set_int64s("shape", std::move(shape))
        .set_int64s("index", {static_cast<int64_t>(data.segment.first + i)});
    return e;
  }

 private:
  static hid_t mem_type(const Hdf5File& f) {
    return f.pixels == PixelType::kU8 ? H5T_NATIVE_UINT8 : H5T_NATIVE_FLOAT;
  }

  void check_readable(const SegmentData& data, size_t i) const {
    if (!data.bad.empty() && !data.bad[i].empty())
      throw BadRecord(Problem::kTruncatedPayload, names_[data.segment.shard],
                      data.segment.first + i, 0, fmt::format("HDF5 read failed: {}", data.bad[i]));
  }

  PixelView view(const SegmentData& data, size_t i) const {
    const Hdf5File& f = files_[data.segment.shard];
    PixelView v;
    v.height = static_cast<int>(f.dims[1]);
    v.width = static_cast<int>(f.dims[2]);
    v.channels = f.dims.size() == 4 ? static_cast<int>(f.dims[3]) : 1;
    const char* at = data.bytes.data() + (i ? data.ends[i - 1] : 0);
    if (f.pixels == PixelType::kU8)
      v.pixels = reinterpret_cast<const uint8_t*>(at);
    else
      v.values = reinterpret_cast<const float*>(at);
    return v;
  }

  SourceSpec spec_;
  std::vector<Hdf5File> files_;
};

}  // namespace

std::unique_ptr<SampleSource> open_hdf5_source(const SourceSpec& spec) {
  return std::make_unique<Hdf5Source>(spec);
}

}  // namespace lockstep::data
