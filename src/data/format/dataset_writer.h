// Internal: writes a data set in one of the three formats (source.h) from
// tf.train.Example values, for the converters. Single-threaded.
#pragma once

#include <memory>

#include "lockstep/data/convert.h"
#include "lockstep/data/example.h"

namespace lockstep::data {

class DatasetWriter {
 public:
  virtual ~DatasetWriter() = default;
  // Appends one sample ("image" raw/PNG/JPEG bytes or floats, "label",
  // "shape" for raw pixels). Throws Error naming the record for what the
  // format cannot hold (e.g. HDF5 images of another shape than the first).
  virtual void add(const Example& example) = 0;
  virtual uint64_t records() const = 0;
  virtual uint64_t bytes() const = 0;
  // Flushes and closes; returns what was written.
  virtual ConvertResult finish() = 0;
};

// out.format picks the writer; out.dir is created.
std::unique_ptr<DatasetWriter> make_dataset_writer(const ShardOutput& out);
std::unique_ptr<DatasetWriter> make_hdf5_writer(const ShardOutput& out);
std::unique_ptr<DatasetWriter> make_lmdb_writer(const ShardOutput& out);

}  // namespace lockstep::data
