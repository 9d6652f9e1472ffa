// `lockstep convert idx|images|data|index`: write a data set as record shards
// + index, HDF5 or LMDB (--format), from IDX files, an image folder or another
// data set; or index existing TFRecord files.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <filesystem>

#include <fmt/format.h>

#include "lockstep/base/error.h"
#include "lockstep/data/convert.h"
#include "lockstep/data/idx.h"
#include "lockstep/data/record_index.h"
#include "tools/convert/progress.h"

namespace {

using namespace lockstep::data;

void report(const ConvertResult& result) {
  std::printf("wrote %llu records, %.1f MB; read it from %s%s\n",
              static_cast<unsigned long long>(result.records), result.bytes / 1e6,
              result.index_path.c_str(),
              result.paths.size() > 1 ? fmt::format(" and {} more files", result.paths.size() - 1).c_str() : "");
}

ShardOutput output(const std::string& dir, const std::string& name, size_t shards,
                   const std::string& format, lockstep::cli::ProgressBar* bar) {
  return {dir, name, shards, [bar](uint64_t d, uint64_t t, uint64_t b) { bar->update(d, t, b); },
          parse_format(format)};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Write a data set as record shards (TFRecord + tf.train.Example + index), HDF5 "
               "or LMDB",
               "lockstep convert"};
  app.require_subcommand(1);
  std::string out_dir, name, format = "records";
  size_t shards = 4;
  auto add_output = [&](CLI::App* cmd) {
    cmd->add_option("--out", out_dir, "output folder")->required();
    cmd->add_option("--name", name, "output name prefix (default: split or folder name)");
    cmd->add_option("--shards", shards, "number of shards/files (records, hdf5)")
        ->default_val(4)
        ->check(CLI::PositiveNumber);
    cmd->add_option("--format", format, "records, hdf5 or lmdb")
        ->default_val("records")
        ->check(CLI::IsMember({"records", "hdf5", "lmdb"}));
  };

  auto* idx = app.add_subcommand("idx", "MNIST-style IDX files (gzip'd or not)");
  std::string images, labels, mnist_dir, split = "train";
  idx->add_option("--images", images, "IDX image file");
  idx->add_option("--labels", labels, "IDX label file");
  idx->add_option("--mnist-dir", mnist_dir, "folder with <split>-images-idx3-ubyte(.gz) etc.");
  idx->add_option("--split", split, "train or t10k (with --mnist-dir)")->default_val("train");
  add_output(idx);

  auto* folder = app.add_subcommand("images", "a folder of <class>/<image>.jpg|png");
  std::string root;
  uint64_t shuffle_seed = 0;
  folder->add_option("--root", root, "folder holding one sub-folder per class")->required();
  folder->add_option("--shuffle-seed", shuffle_seed,
                     "write records in a seeded random order (0: class by class)");
  add_output(folder);

  auto* data = app.add_subcommand("data", "another data set (records, HDF5 or LMDB) to --format");
  lockstep::data::SourceSpec in;
  data->add_option("--in", in.paths,
                   "a <name>.index.json, HDF5 file(s) or LMDB folder(s)")
      ->required();
  data->add_option("--images-dataset", in.images_dataset, "HDF5 image dataset")
      ->default_val("/images");
  data->add_option("--labels-dataset", in.labels_dataset, "HDF5 label dataset")
      ->default_val("/labels");
  add_output(data);

  auto* index = app.add_subcommand("index", "index existing TFRecord files (e.g. made by TensorFlow)");
  std::string index_out;
  std::vector<std::string> files;
  index->add_option("--out", index_out, "index file to write (<name>.index.json)")->required();
  index->add_option("files", files, "TFRecord files")->required();

  CLI11_PARSE(app, argc, argv);
  try {
    if (*idx) {
      if (!mnist_dir.empty()) {
        images = mnist_dir + "/" + split + "-images-idx3-ubyte.gz";
        labels = mnist_dir + "/" + split + "-labels-idx1-ubyte.gz";
      }
      if (images.empty() || labels.empty())
        throw lockstep::InvalidArgument("give --images and --labels, or --mnist-dir");
      lockstep::cli::ProgressBar bar("idx");
      report(convert_idx(images, labels,
                         output(out_dir, name.empty() ? split : name, shards, format, &bar)));
    } else if (*folder) {
      lockstep::cli::ProgressBar bar("images");
      std::string stem = std::filesystem::path(root).filename().string();
      uint64_t ignored = 0;
      report(convert_image_folder(
          root, output(out_dir, name.empty() ? stem : name, shards, format, &bar), shuffle_seed,
          &ignored));
      if (ignored) std::printf("ignored %llu files without a .jpg/.jpeg/.png extension\n",
                               static_cast<unsigned long long>(ignored));
    } else if (*data) {
      lockstep::cli::ProgressBar bar("data");
      std::string stem = std::filesystem::path(in.paths.front()).stem().string();
      if (auto dot = stem.find('.'); dot != std::string::npos) stem.resize(dot);  // x.index.json
      report(convert_dataset(in, output(out_dir, name.empty() ? stem : name, shards, format, &bar)));
    } else {
      RecordIndex built = build_index(files);
      built.save(index_out);
      std::printf("indexed %llu records in %zu files into %s\n",
                  static_cast<unsigned long long>(built.total_records()), files.size(),
                  index_out.c_str());
    }
  } catch (const lockstep::Error& e) {
    std::fprintf(stderr, "\nlockstep convert: %s\n", e.what());
    return 1;
  }
  return 0;
}
