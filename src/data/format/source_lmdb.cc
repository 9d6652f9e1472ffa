// SampleSource over LMDB environments, read-only: the records of a shard are
// its entries in key order, each value a serialized tf.train.Example.
#include <lmdb.h>
#include <sys/stat.h>

#include <fmt/format.h>

#include "lockstep/base/error.h"
#include "data/format/source_formats.h"

namespace lockstep::data {
namespace {

[[noreturn]] void fail(const std::string& path, const std::string& what, int rc) {
  throw Error(fmt::format("{}: {}: {}", path, what, mdb_strerror(rc)));
}

// A read transaction that is always ended.
class ReadTxn {
 public:
  ReadTxn(MDB_env* env, const std::string& path) {
    if (int rc = mdb_txn_begin(env, nullptr, MDB_RDONLY, &txn_))
      fail(path, "cannot begin a read", rc);
  }
  ~ReadTxn() { mdb_txn_abort(txn_); }
  ReadTxn(const ReadTxn&) = delete;
  ReadTxn& operator=(const ReadTxn&) = delete;
  MDB_txn* get() const { return txn_; }

 private:
  MDB_txn* txn_ = nullptr;
};

class Cursor {
 public:
  Cursor(MDB_txn* txn, MDB_dbi dbi, const std::string& path) {
    if (int rc = mdb_cursor_open(txn, dbi, &cursor_)) fail(path, "cannot open a cursor", rc);
  }
  ~Cursor() { mdb_cursor_close(cursor_); }
  Cursor(const Cursor&) = delete;
  Cursor& operator=(const Cursor&) = delete;
  MDB_cursor* get() const { return cursor_; }

 private:
  MDB_cursor* cursor_ = nullptr;
};

struct LmdbEnv {
  std::string path;
  MDB_env* env = nullptr;
  MDB_dbi dbi = 0;
  std::string keys;              // every key, back to back, in order
  std::vector<size_t> key_ends;  // key i is keys[key_ends[i-1], key_ends[i])

  std::string_view key(uint64_t i) const {
    size_t begin = i ? key_ends[i - 1] : 0;
    return std::string_view(keys).substr(begin, key_ends[i] - begin);
  }
  ~LmdbEnv() {
    if (env) mdb_env_close(env);
  }
};

void open_env(LmdbEnv& e) {
  struct stat st {};
  if (::stat(e.path.c_str(), &st) != 0)
    throw Error(fmt::format("LMDB environment {} does not exist", e.path));
  if (int rc = mdb_env_create(&e.env)) fail(e.path, "mdb_env_create failed", rc);
  mdb_env_set_maxreaders(e.env, 1024);
  // NOLOCK: nothing writes while training reads, and the folder may be read-only.
  unsigned flags = MDB_RDONLY | MDB_NOLOCK | MDB_NOTLS | MDB_NORDAHEAD;
  if (!S_ISDIR(st.st_mode)) flags |= MDB_NOSUBDIR;
  if (int rc = mdb_env_open(e.env, e.path.c_str(), flags, 0444))
    fail(e.path, "not a readable LMDB environment (corrupt, truncated, or another format)", rc);
  ReadTxn txn(e.env, e.path);
  if (int rc = mdb_dbi_open(txn.get(), nullptr, 0, &e.dbi))
    fail(e.path, "cannot open the database", rc);
}

// One pass over the keys, so that record i can be found without a scan later.
void index_keys(LmdbEnv& e) {
  ReadTxn txn(e.env, e.path);
  Cursor cursor(txn.get(), e.dbi, e.path);
  MDB_val key, value;
  for (int rc = mdb_cursor_get(cursor.get(), &key, &value, MDB_FIRST); rc != MDB_NOTFOUND;
       rc = mdb_cursor_get(cursor.get(), &key, &value, MDB_NEXT)) {
    if (rc) fail(e.path, fmt::format("reading key {} failed", e.key_ends.size()), rc);
    e.keys.append(static_cast<const char*>(key.mv_data), key.mv_size);
    e.key_ends.push_back(e.keys.size());
  }
}

class LmdbSource final : public SampleSource {
 public:
  explicit LmdbSource(const std::vector<std::string>& paths) {
    for (const auto& path : paths) {
      auto e = std::make_unique<LmdbEnv>();
      e->path = path;
      open_env(*e);
      index_keys(*e);
      names_.push_back(path);
      records_.push_back(e->key_ends.size());
      envs_.push_back(std::move(e));
    }
  }

  SourceFormat format() const override { return SourceFormat::kLmdb; }

  SegmentData read(const Segment& s) const override {
    const LmdbEnv& e = *envs_[s.shard];
    SegmentData data;
    data.segment = s;
    if (s.count == 0) return data;
    ReadTxn txn(e.env, e.path);
    Cursor cursor(txn.get(), e.dbi, e.path);
    std::string_view first_key = e.key(s.first);
    MDB_val key{first_key.size(), const_cast<char*>(first_key.data())}, value;
    int rc = mdb_cursor_get(cursor.get(), &key, &value, MDB_SET_KEY);
    for (uint64_t i = 0; i < s.count; ++i) {
      if (rc)
        fail(e.path,
             fmt::format("record {} (key '{}') cannot be read", s.first + i,
                         printable(e.key(s.first + i))),
             rc);
      data.bytes.append(static_cast<const char*>(value.mv_data), value.mv_size);
      data.ends.push_back(data.bytes.size());
      if (i + 1 < s.count) rc = mdb_cursor_get(cursor.get(), &key, &value, MDB_NEXT);
    }
    return data;
  }

  void decode(const SegmentData& data, size_t i, const DecodeOptions& options, uint64_t seed,
              Sample* out) const override {
    decode_example_payload(data.record(i), options, seed, names_[data.segment.shard],
                           data.segment.first + i, 0, out);
  }

  Example example(const SegmentData& data, size_t i) const override {
    return parse_example_payload(data.record(i), names_[data.segment.shard], data.segment.first + i,
                                 0);
  }

 private:
  static std::string printable(std::string_view key) {
    std::string out;
    for (char c : key.substr(0, 64)) out += (c >= 32 && c < 127) ? c : '?';
    return out;
  }

  std::vector<std::unique_ptr<LmdbEnv>> envs_;
};

}  // namespace

std::unique_ptr<SampleSource> open_lmdb_source(const std::vector<std::string>& paths) {
  return std::make_unique<LmdbSource>(paths);
}

}  // namespace lockstep::data
