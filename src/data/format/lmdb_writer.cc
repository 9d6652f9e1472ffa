// LMDB output: one environment <dir>/<name>.lmdb, keys "%010d" record numbers
// (so byte order is record order), values serialized tf.train.Examples.
#include <lmdb.h>

#include <filesystem>

#include <fmt/format.h>

#include "data/format/dataset_writer.h"
#include "lockstep/base/error.h"

namespace lockstep::data {
namespace fs = std::filesystem;
namespace {

constexpr size_t kBatch = 1024;  // records per write transaction

class LmdbWriter final : public DatasetWriter {
 public:
  explicit LmdbWriter(const ShardOutput& out)
      : path_((fs::path(out.dir) / (out.name + ".lmdb")).string()) {
    fs::create_directories(path_);
    // A stale data.mdb would mix old records into the new set.
    fs::remove(fs::path(path_) / "data.mdb");
    fs::remove(fs::path(path_) / "lock.mdb");
    check(mdb_env_create(&env_), "mdb_env_create");
    check(mdb_env_set_mapsize(env_, map_size_), "setting the map size");
    check(mdb_env_open(env_, path_.c_str(), MDB_NOSYNC, 0644), "opening the environment");
  }
  ~LmdbWriter() override {
    if (env_) mdb_env_close(env_);
  }

  void add(const Example& example) override {
    std::string key = fmt::format("{:010d}", records_);
    std::string value = serialize_example(example);
    bytes_ += key.size() + value.size();
    pending_.emplace_back(std::move(key), std::move(value));
    ++records_;
    if (pending_.size() == kBatch) commit();
  }

  uint64_t records() const override { return records_; }
  uint64_t bytes() const override { return bytes_; }

  ConvertResult finish() override {
    commit();
    check(mdb_env_sync(env_, 1), "syncing to disk");
    mdb_env_close(env_);
    env_ = nullptr;
    return {records_, bytes_, path_, {path_}};
  }

 private:
  void check(int rc, const char* what) {
    if (rc) throw Error(fmt::format("{}: {} failed: {}", path_, what, mdb_strerror(rc)));
  }

  // Writes the pending batch; when the map is full, doubles it and retries
  // the whole batch (the failed transaction wrote nothing).
  void commit() {
    while (!pending_.empty()) {
      int rc = write_pending();
      if (rc == 0) {
        pending_.clear();
      } else if (rc == MDB_MAP_FULL) {
        map_size_ *= 2;
        check(mdb_env_set_mapsize(env_, map_size_), "growing the map");
      } else {
        check(rc, "writing records");
      }
    }
  }

  int write_pending() {
    MDB_txn* txn = nullptr;
    if (int rc = mdb_txn_begin(env_, nullptr, 0, &txn)) return rc;
    MDB_dbi dbi;
    int rc = mdb_dbi_open(txn, nullptr, 0, &dbi);
    for (size_t i = 0; rc == 0 && i < pending_.size(); ++i) {
      auto& [key, value] = pending_[i];
      MDB_val k{key.size(), key.data()}, v{value.size(), value.data()};
      rc = mdb_put(txn, dbi, &k, &v, MDB_APPEND);
    }
    if (rc) {
      mdb_txn_abort(txn);
      return rc;
    }
    return mdb_txn_commit(txn);
  }

  std::string path_;
  MDB_env* env_ = nullptr;
  size_t map_size_ = size_t{256} << 20;
  std::vector<std::pair<std::string, std::string>> pending_;
  uint64_t records_ = 0;
  uint64_t bytes_ = 0;
};

}  // namespace

std::unique_ptr<DatasetWriter> make_lmdb_writer(const ShardOutput& out) {
  return std::make_unique<LmdbWriter>(out);
}

}  // namespace lockstep::data
