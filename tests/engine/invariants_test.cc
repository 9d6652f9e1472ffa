// The negotiation blob's paired assertions (Note [Negotiation]): a request is
// checked where it is serialized and again where a peer's bytes are decoded.
// Death tests: they run where LOCKSTEP_DCHECKs are compiled in (Debug, CI's
// sanitizer trees) and skip in NDEBUG builds.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "engine/request.h"
#include "support/dcheck_death.h"

namespace lockstep::engine::detail {
namespace {

class NegotiationBlobDeathTest : public ::testing::Test {
 protected:
  void SetUp() override {
    LOCKSTEP_DEATH_TEST_NEEDS_DCHECKS();
    request_.name = "grad";
    request_.shape = {4, 2};
  }
  Request request_;
};

TEST(NegotiationBlob, IntactBlobRoundTrips) {
  Request request;
  request.name = "grad";
  request.shape = {4, 2};
  std::vector<uint8_t> blob;
  serialize(request, blob);
  const uint8_t* p = blob.data();
  EXPECT_EQ(deserialize(p, blob.data() + blob.size()), request);
  EXPECT_EQ(p, blob.data() + blob.size());
}

TEST_F(NegotiationBlobDeathTest, DecodingACollectiveOutsideTheEnumAborts) {
  std::vector<uint8_t> blob;
  serialize(request_, blob);
  blob[4 + request_.name.size()] = 200;  // after the name's length and bytes: the collective
  EXPECT_DEATH(
      {
        const uint8_t* p = blob.data();
        deserialize(p, blob.data() + blob.size());
      },
      "negotiation blob: decoded the malformed request 'grad': collective 200");
}

TEST_F(NegotiationBlobDeathTest, AnnouncingANegativeDimensionAborts) {
  request_.shape = {4, -1};
  std::vector<uint8_t> blob;
  EXPECT_DEATH(serialize(request_, blob),
               "negotiation blob: announcing the malformed request 'grad'.*shape \\[4,-1\\]");
}

}  // namespace
}  // namespace lockstep::engine::detail
