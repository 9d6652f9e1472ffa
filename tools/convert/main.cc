// `lockstep convert idx|images|data|index`: write a data set as record shards
// + index, HDF5 or LMDB (--format), from IDX files, an image folder or another
// data set; or index existing TFRecord files. `lockstep convert checkpoint`
// (model weights) runs the sibling lockstep-convert-checkpoint, which links
// LibTorch (tools/convert/checkpoint.cc).
#include <CLI/CLI.hpp>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "lockstep/base/error.h"
#include "lockstep/base/executable.h"
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
              result.paths.size() > 1
                  ? fmt::format(" and {} more files", result.paths.size() - 1).c_str()
                  : "");
}

ShardOutput output(const std::string& dir, const std::string& name, size_t shards,
                   const std::string& format, lockstep::cli::ProgressBar* bar) {
  return {dir, name, shards, [bar](uint64_t d, uint64_t t, uint64_t b) { bar->update(d, t, b); },
          parse_format(format)};
}

// What the four subcommands take (CLI11 writes into it).
struct Options {
  std::string out_dir, name, format = "records";
  size_t shards = 4;
  std::string images, labels, mnist_dir, split = "train";  // idx
  std::string root;                                        // images
  uint64_t shuffle_seed = 0;
  SourceSpec in;          // data
  std::string index_out;  // index
  std::vector<std::string> files;
  CLI::App *idx = nullptr, *folder = nullptr, *data = nullptr, *index = nullptr;
};

void add_output(CLI::App* cmd, Options& o) {
  cmd->add_option("--out", o.out_dir, "output folder")->required();
  cmd->add_option("--name", o.name, "output name prefix (default: split or folder name)");
  cmd->add_option("--shards", o.shards, "number of shards/files (records, hdf5)")
      ->default_val(4)
      ->check(CLI::PositiveNumber);
  cmd->add_option("--format", o.format, "records, hdf5 or lmdb")
      ->default_val("records")
      ->check(CLI::IsMember({"records", "hdf5", "lmdb"}));
}

void add_subcommands(CLI::App& app, Options& o) {
  o.idx = app.add_subcommand("idx", "MNIST-style IDX files (gzip'd or not)");
  o.idx->add_option("--images", o.images, "IDX image file");
  o.idx->add_option("--labels", o.labels, "IDX label file");
  o.idx->add_option("--mnist-dir", o.mnist_dir, "folder with <split>-images-idx3-ubyte(.gz) etc.");
  o.idx->add_option("--split", o.split, "train or t10k (with --mnist-dir)")->default_val("train");
  add_output(o.idx, o);

  o.folder = app.add_subcommand("images", "a folder of <class>/<image>.jpg|png");
  o.folder->add_option("--root", o.root, "folder holding one sub-folder per class")->required();
  o.folder->add_option("--shuffle-seed", o.shuffle_seed,
                       "write records in a seeded random order (0: class by class)");
  add_output(o.folder, o);

  o.data = app.add_subcommand("data", "another data set (records, HDF5 or LMDB) to --format");
  o.data->add_option("--in", o.in.paths, "a <name>.index.json, HDF5 file(s) or LMDB folder(s)")
      ->required();
  o.data->add_option("--images-dataset", o.in.images_dataset, "HDF5 image dataset")
      ->default_val("/images");
  o.data->add_option("--labels-dataset", o.in.labels_dataset, "HDF5 label dataset")
      ->default_val("/labels");
  add_output(o.data, o);

  o.index = app.add_subcommand("index", "index existing TFRecord files (e.g. made by TensorFlow)");
  o.index->add_option("--out", o.index_out, "index file to write (<name>.index.json)")->required();
  o.index->add_option("files", o.files, "TFRecord files")->required();
}

void convert_idx_files(Options& o) {
  if (!o.mnist_dir.empty()) {
    o.images = o.mnist_dir + "/" + o.split + "-images-idx3-ubyte.gz";
    o.labels = o.mnist_dir + "/" + o.split + "-labels-idx1-ubyte.gz";
  }
  if (o.images.empty() || o.labels.empty())
    throw lockstep::InvalidArgument("give --images and --labels, or --mnist-dir");
  lockstep::cli::ProgressBar bar("idx");
  const std::string name = o.name.empty() ? o.split : o.name;
  report(convert_idx(o.images, o.labels, output(o.out_dir, name, o.shards, o.format, &bar)));
}

void convert_folder(const Options& o) {
  lockstep::cli::ProgressBar bar("images");
  std::string stem = std::filesystem::path(o.root).filename().string();
  uint64_t ignored = 0;
  const std::string name = o.name.empty() ? stem : o.name;
  report(convert_image_folder(o.root, output(o.out_dir, name, o.shards, o.format, &bar),
                              o.shuffle_seed, &ignored));
  if (ignored)
    std::printf("ignored %llu files without a .jpg/.jpeg/.png extension\n",
                static_cast<unsigned long long>(ignored));
}

void convert_data(const Options& o) {
  lockstep::cli::ProgressBar bar("data");
  std::string stem = std::filesystem::path(o.in.paths.front()).stem().string();
  if (auto dot = stem.find('.'); dot != std::string::npos) stem.resize(dot);  // x.index.json
  const std::string name = o.name.empty() ? stem : o.name;
  report(convert_dataset(o.in, output(o.out_dir, name, o.shards, o.format, &bar)));
}

void index_files(const Options& o) {
  RecordIndex built = build_index(o.files);
  built.save(o.index_out);
  std::printf("indexed %llu records in %zu files into %s\n",
              static_cast<unsigned long long>(built.total_records()), o.files.size(),
              o.index_out.c_str());
}

// `checkpoint ARGS...` -> lockstep-convert-checkpoint ARGS... beside this binary.
int exec_checkpoint_converter(int argc, char** argv) {
  std::string path = lockstep::executable_dir() + "/lockstep-convert-checkpoint";
  std::vector<char*> args{path.data()};
  for (int i = 2; i < argc; ++i) args.push_back(argv[i]);
  args.push_back(nullptr);
  execv(path.c_str(), args.data());
  std::fprintf(stderr,
               "lockstep convert: cannot run %s: %s (is it installed beside "
               "lockstep-convert?)\n",
               path.c_str(), std::strerror(errno));
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 2 && std::strcmp(argv[1], "checkpoint") == 0)
    return exec_checkpoint_converter(argc, argv);
  CLI::App app{
      "Write a data set as record shards (TFRecord + tf.train.Example + index), HDF5 "
      "or LMDB",
      "lockstep convert"};
  app.footer(
      "lockstep convert checkpoint IN OUT: model weights between a lockstep checkpoint, "
      "torch.save and safetensors (lockstep convert checkpoint --help)");
  app.require_subcommand(1);
  Options o;
  add_subcommands(app, o);
  CLI11_PARSE(app, argc, argv);
  try {
    if (*o.idx)
      convert_idx_files(o);
    else if (*o.folder)
      convert_folder(o);
    else if (*o.data)
      convert_data(o);
    else
      index_files(o);
  } catch (const lockstep::Error& e) {
    std::fprintf(stderr, "\nlockstep convert: %s\n", e.what());
    return 1;
  }
  return 0;
}
