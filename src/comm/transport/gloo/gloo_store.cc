#include "comm/transport/gloo/gloo_store.h"

#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>

#include <fmt/format.h>

#include "lockstep/base/error.h"
#include "lockstep/base/knobs.h"
#ifdef LOCKSTEP_HAVE_RENDEZVOUS
#include "lockstep/rendezvous/store.h"
#endif

namespace lockstep::comm::gloo_transport {
namespace {

// Owns the underlying store and prefixes every key (Gloo's PrefixStore only
// borrows its store).
class OwningPrefixStore final : public ::gloo::rendezvous::Store {
 public:
  OwningPrefixStore(std::unique_ptr<::gloo::rendezvous::Store> base, std::string prefix)
      : base_(std::move(base)), prefixed_(prefix, *base_) {}
  void set(const std::string& key, const std::vector<char>& data) override {
    prefixed_.set(key, data);
  }
  std::vector<char> get(const std::string& key) override { return prefixed_.get(key); }
  void wait(const std::vector<std::string>& keys) override { prefixed_.wait(keys); }
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override {
    prefixed_.wait(keys, timeout);
  }

 private:
  std::unique_ptr<::gloo::rendezvous::Store> base_;
  ::gloo::rendezvous::PrefixStore prefixed_;
};

#ifdef LOCKSTEP_HAVE_RENDEZVOUS
// Gloo's Store interface over lockstep's authenticated rendezvous client.
// Gloo calls it from one thread at a time during connectFullMesh.
class RendezvousStore final : public ::gloo::rendezvous::Store {
 public:
  RendezvousStore(const WorldInfo& world, std::chrono::milliseconds timeout)
      : client_(world.rendezvous, rendezvous::decode_secret_hex(world.secret)), timeout_(timeout) {}
  void set(const std::string& key, const std::vector<char>& data) override {
    client_.set(key, std::string_view(data.data(), data.size()));
  }
  std::vector<char> get(const std::string& key) override {
    std::string v = client_.get(key, timeout_);
    return std::vector<char>(v.begin(), v.end());
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override {
    client_.wait(keys, timeout);
  }

 private:
  rendezvous::StoreClient client_;
  std::chrono::milliseconds timeout_;
};
#endif

}  // namespace

std::unique_ptr<::gloo::rendezvous::Store> make_store(const WorldInfo& world,
                                                      const std::string& tag,
                                                      std::chrono::milliseconds timeout) {
  std::string prefix = fmt::format("{}/{}", world.job_id.empty() ? "job" : world.job_id, tag);
  std::string dir = knob_string("LOCKSTEP_GLOO_FILE_STORE");
  if (!dir.empty())
    return std::make_unique<OwningPrefixStore>(std::make_unique<::gloo::rendezvous::FileStore>(dir),
                                               prefix);
#ifdef LOCKSTEP_HAVE_RENDEZVOUS
  if (!world.rendezvous.empty()) {
    if (world.secret.empty())
      throw InvalidArgument(
          "gloo backend: LOCKSTEP_RENDEZVOUS is set but LOCKSTEP_SECRET is "
          "not; start workers with `lockstep run`, which sets both");
    return std::make_unique<OwningPrefixStore>(std::make_unique<RendezvousStore>(world, timeout),
                                               prefix);
  }
#endif
  throw InvalidArgument(
      "gloo backend: no rendezvous store. Start the workers with `lockstep run` (which serves "
      "one and sets LOCKSTEP_RENDEZVOUS/LOCKSTEP_SECRET), or set LOCKSTEP_GLOO_FILE_STORE to a "
      "directory all ranks share");
}

}  // namespace lockstep::comm::gloo_transport
