// HDF5 output: per shard file, /images [N, H, W] or [N, H, W, C] (uint8 or
// float32) and /labels [N] int64, chunked by rows and Fletcher-32
// checksummed, with checksummed metadata (HDF5 1.10 file format), so a
// corrupt or truncated file is an error when read, not wrong data.
#include <cstring>
#include <filesystem>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "data/format/dataset_writer.h"
#include "data/format/hdf5_util.h"
#include "lockstep/base/error.h"
#include "lockstep/data/image.h"
#include "lockstep/data/record_index.h"

namespace lockstep::data {
namespace fs = std::filesystem;
namespace {

using hdf5::Id;

// One sample's pixels as HDF5 stores them.
struct Pixels {
  std::vector<hsize_t> shape;  // H, W or H, W, C
  std::string bytes;           // uint8 or float32 values
  bool is_float = false;
  int64_t label = 0;
};

[[noreturn]] void cannot(uint64_t record, const std::string& why) {
  throw Error(fmt::format("record {} cannot be written as HDF5: {}", record, why));
}

Pixels pixels_of(const Example& e, uint64_t record) {
  Pixels p;
  const Int64List* label = e.int64s("label");
  if (!label || label->size() != 1) cannot(record, "no single int64 feature 'label'");
  p.label = (*label)[0];
  const Int64List* shape = e.int64s("shape");
  if (const FloatList* values = e.floats("image")) {
    if (!shape) cannot(record, "float pixels without an int64 'shape' feature");
    p.shape.assign(shape->begin(), shape->end());
    p.bytes.assign(reinterpret_cast<const char*>(values->data()), values->size() * 4);
    p.is_float = true;
    return p;
  }
  const BytesList* image = e.bytes("image");
  if (!image || image->size() != 1) cannot(record, "no single bytes feature 'image'");
  if (sniff_image_format((*image)[0]) == ImageFormat::kUnknown) {
    if (!shape) cannot(record, "raw pixels without an int64 'shape' feature");
    p.shape.assign(shape->begin(), shape->end());
    p.bytes = (*image)[0];
    return p;
  }
  std::string error;
  std::optional<Image> decoded = decode_image((*image)[0], 0, &error);
  if (!decoded) cannot(record, error);
  p.shape = {hsize_t(decoded->height), hsize_t(decoded->width)};
  if (decoded->channels != 1) p.shape.push_back(hsize_t(decoded->channels));
  p.bytes.assign(decoded->pixels.begin(), decoded->pixels.end());
  return p;
}

[[noreturn]] void hdf5_failed(const std::string& path, const std::string& what) {
  throw Error(fmt::format("{}: {} failed: {}", path, what, hdf5::last_error()));
}

// One output file; rows are buffered and written a chunk at a time.
class Hdf5Output {
 public:
  Hdf5Output(std::string path, const Pixels& first, hsize_t chunk_rows)
      : path_(std::move(path)),
        shape_(first.shape),
        is_float_(first.is_float),
        chunk_rows_(chunk_rows) {
    Id fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
    // The 1.10 format: every metadata structure, the chunk index included,
    // carries a checksum (the 1.8 format still indexes chunks with
    // unchecksummed v1 B-trees). Readers need HDF5 >= 1.10 (2016).
    H5Pset_libver_bounds(fapl.get(), H5F_LIBVER_V110, H5F_LIBVER_LATEST);
    file_ = Id(H5Fcreate(path_.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get()), H5Fclose);
    if (!file_.valid()) hdf5_failed(path_, "creating the file");
    images_ = create("/images", shape_, is_float_ ? H5T_NATIVE_FLOAT : H5T_NATIVE_UINT8);
    labels_ = create("/labels", {}, H5T_NATIVE_INT64);
  }

  void add(const Pixels& p) {
    pixels_ += p.bytes;
    labels_buffer_.push_back(p.label);
    if (labels_buffer_.size() == chunk_rows_) flush();
  }

  void close() {
    flush();
    images_.reset();
    labels_.reset();
    if (file_.valid() && H5Fflush(file_.get(), H5F_SCOPE_GLOBAL) < 0)
      hdf5_failed(path_, "flushing");
    file_.reset();
  }

  const std::string& path() const { return path_; }
  hsize_t rows() const { return rows_ + labels_buffer_.size(); }
  const std::vector<hsize_t>& shape() const { return shape_; }
  bool is_float() const { return is_float_; }

 private:
  Id create(const char* name, const std::vector<hsize_t>& item, hid_t type) {
    std::vector<hsize_t> dims{0}, max{H5S_UNLIMITED}, chunk{chunk_rows_};
    for (hsize_t d : item) {
      dims.push_back(d);
      max.push_back(d);
      chunk.push_back(d);
    }
    Id space(H5Screate_simple(int(dims.size()), dims.data(), max.data()), H5Sclose);
    Id dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
    H5Pset_chunk(dcpl.get(), int(chunk.size()), chunk.data());
    H5Pset_fletcher32(dcpl.get());
    Id id(H5Dcreate2(file_.get(), name, type, space.get(), H5P_DEFAULT, dcpl.get(), H5P_DEFAULT),
          H5Dclose);
    if (!id.valid()) hdf5_failed(path_, fmt::format("creating dataset {}", name));
    return id;
  }

  void append(const Id& dataset, hid_t type, const std::vector<hsize_t>& item, const void* data,
              hsize_t n) {
    std::vector<hsize_t> size{rows_ + n}, start{rows_}, count{n};
    for (hsize_t d : item) {
      size.push_back(d);
      start.push_back(0);
      count.push_back(d);
    }
    if (H5Dset_extent(dataset.get(), size.data()) < 0) hdf5_failed(path_, "growing a dataset");
    Id file_space(H5Dget_space(dataset.get()), H5Sclose);
    H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, start.data(), nullptr, count.data(),
                        nullptr);
    Id mem_space(H5Screate_simple(int(count.size()), count.data(), nullptr), H5Sclose);
    if (H5Dwrite(dataset.get(), type, mem_space.get(), file_space.get(), H5P_DEFAULT, data) < 0)
      hdf5_failed(path_, "writing rows");
  }

  void flush() {
    hsize_t n = labels_buffer_.size();
    if (n == 0 || !file_.valid()) return;
    append(images_, is_float_ ? H5T_NATIVE_FLOAT : H5T_NATIVE_UINT8, shape_, pixels_.data(), n);
    append(labels_, H5T_NATIVE_INT64, {}, labels_buffer_.data(), n);
    rows_ += n;
    pixels_.clear();
    labels_buffer_.clear();
  }

  std::string path_;
  std::vector<hsize_t> shape_;
  bool is_float_;
  hsize_t chunk_rows_;
  Id file_, images_, labels_;
  hsize_t rows_ = 0;
  std::string pixels_;
  std::vector<int64_t> labels_buffer_;
};

class Hdf5Writer final : public DatasetWriter {
 public:
  ~Hdf5Writer() override {
    MutexLock lock(hdf5::library_mutex());
    files_.clear();
  }

  explicit Hdf5Writer(const ShardOutput& out) : out_(out) {
    if (out.shards == 0) throw InvalidArgument("HDF5 output needs at least 1 shard");
    fs::create_directories(out.dir);
    hdf5::silence_errors();
  }

  void add(const Example& example) override {
    Pixels p = pixels_of(example, records_);
    MutexLock lock(hdf5::library_mutex());
    if (files_.empty()) open_files(p);
    const Hdf5Output& first = *files_[0];
    if (p.shape != first.shape() || p.is_float != first.is_float())
      cannot(records_,
             fmt::format("its image is [{}] {} but the first was [{}] {}; an HDF5 "
                         "dataset holds one shape: crop/resize first or write records/lmdb",
                         fmt::join(p.shape, ", "), p.is_float ? "float" : "uint8",
                         fmt::join(first.shape(), ", "), first.is_float() ? "float" : "uint8"));
    // Round robin keeps the shard sizes within one record of each other.
    files_[records_ % files_.size()]->add(p);
    bytes_ += p.bytes.size() + sizeof(int64_t);
    ++records_;
  }

  uint64_t records() const override { return records_; }
  uint64_t bytes() const override { return bytes_; }

  ConvertResult finish() override {
    if (files_.empty())
      throw Error(fmt::format("no records to write to {}/{}.h5", out_.dir, out_.name));
    MutexLock lock(hdf5::library_mutex());
    ConvertResult result{records_, bytes_, files_[0]->path(), {}};
    for (auto& f : files_) {
      f->close();
      result.paths.push_back(f->path());
    }
    return result;
  }

 private:
  void open_files(const Pixels& first) {
    size_t item = first.bytes.size();
    // Chunks of 256 rows (at most ~4 MiB): the loader's default block.
    hsize_t rows =
        std::max<hsize_t>(1, std::min<hsize_t>(256, (4u << 20) / std::max<size_t>(1, item)));
    for (size_t k = 0; k < out_.shards; ++k) {
      std::string file = out_.shards == 1
                             ? out_.name + ".h5"
                             : fmt::format("{}-{:05d}-of-{:05d}.h5", out_.name, k, out_.shards);
      files_.push_back(
          std::make_unique<Hdf5Output>((fs::path(out_.dir) / file).string(), first, rows));
    }
  }

  ShardOutput out_;
  std::vector<std::unique_ptr<Hdf5Output>> files_;
  uint64_t records_ = 0;
  uint64_t bytes_ = 0;
};

}  // namespace

std::unique_ptr<DatasetWriter> make_hdf5_writer(const ShardOutput& out) {
  return std::make_unique<Hdf5Writer>(out);
}

}  // namespace lockstep::data
