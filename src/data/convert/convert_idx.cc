#include <fmt/format.h>

#include "lockstep/base/error.h"
#include "lockstep/data/convert.h"
#include "lockstep/data/example.h"
#include "lockstep/data/idx.h"
#include "data/format/dataset_writer.h"

namespace lockstep::data {

ConvertResult convert_idx(const std::string& images_path, const std::string& labels_path,
                          const ShardOutput& out) {
  IdxArray images = read_idx(images_path);
  IdxArray labels = read_idx(labels_path);
  if (images.dims.size() != 3 || labels.dims.size() != 1)
    throw Error(
        fmt::format("{} / {}: expected N x H x W images and N labels", images_path, labels_path));
  if (images.count() != labels.count())
    throw Error(fmt::format("{} has {} images but {} has {} labels", images_path, images.count(),
                            labels_path, labels.count()));
  size_t item = images.item_size();
  Int64List shape{images.dims[1], images.dims[2]};
  std::unique_ptr<DatasetWriter> writer = make_dataset_writer(out);
  for (size_t i = 0; i < images.count(); ++i) {
    Example example;
    example
        .set_bytes("image",
                   std::string(reinterpret_cast<const char*>(&images.bytes[i * item]), item))
        .set_int64s("label", {labels.bytes[i]})
        .set_int64s("shape", shape)
        .set_int64s("index", {static_cast<int64_t>(i)})
        .set_bytes("format", "raw");
    writer->add(example);
    if (out.progress) out.progress(i + 1, images.count(), writer->bytes());
  }
  return writer->finish();
}

}  // namespace lockstep::data
