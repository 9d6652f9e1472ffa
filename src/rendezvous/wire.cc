#include "rendezvous/wire.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>

#include <cstring>

#include "lockstep/base/check.h"
#include "lockstep/base/error.h"

namespace lockstep::rendezvous::wire {
namespace {

void append_be(std::string& out, uint64_t v, int bytes) {
  for (int i = bytes - 1; i >= 0; --i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

uint64_t load_be(const char* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

}  // namespace

std::string make_hello(std::string_view nonce) {
  std::string out(kMagic);
  out.push_back(static_cast<char>(kVersion));
  out.append(3, '\0');
  out.append(nonce);
  return out;
}

std::optional<std::string> parse_hello(std::string_view hello) {
  if (hello.size() != kHelloBytes || hello.substr(0, 4) != kMagic ||
      static_cast<uint8_t>(hello[4]) != kVersion)
    return std::nullopt;
  return std::string(hello.substr(8));
}

std::string mac(std::string_view secret, std::string_view nonce, Direction direction,
                uint64_t sequence, std::string_view body) {
  std::string header(nonce);
  header.push_back(static_cast<char>(direction));
  append_be(header, sequence, 8);
  append_be(header, body.size(), 4);
  // Incremental so a 64 MiB body is not copied just to be hashed.
  EVP_MAC* algorithm = EVP_MAC_fetch(nullptr, "HMAC", nullptr);
  EVP_MAC_CTX* ctx = algorithm ? EVP_MAC_CTX_new(algorithm) : nullptr;
  char digest_name[] = "SHA256";
  OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string("digest", digest_name, 0),
                         OSSL_PARAM_construct_end()};
  unsigned char out[EVP_MAX_MD_SIZE];
  size_t out_length = 0;
  bool ok =
      ctx &&
      EVP_MAC_init(ctx, reinterpret_cast<const unsigned char*>(secret.data()), secret.size(),
                   params) == 1 &&
      EVP_MAC_update(ctx, reinterpret_cast<const unsigned char*>(header.data()), header.size()) ==
          1 &&
      EVP_MAC_update(ctx, reinterpret_cast<const unsigned char*>(body.data()), body.size()) == 1 &&
      EVP_MAC_final(ctx, out, &out_length, sizeof out) == 1 && out_length == kMacBytes;
  EVP_MAC_CTX_free(ctx);
  EVP_MAC_free(algorithm);
  if (!ok) throw Error("rendezvous: OpenSSL HMAC-SHA256 failed; check the libcrypto installation");
  return std::string(reinterpret_cast<const char*>(out), kMacBytes);
}

std::string frame(std::string_view secret, std::string_view nonce, Direction direction,
                  uint64_t sequence, std::string_view body) {
  // Paired with the reader's limit (process_input, client.cc), which refuses
  // a longer body as hostile: lockstep itself never writes one.
  LOCKSTEP_DCHECK_LE(body.size(), kMaxBodyBytes, "rendezvous frame: body over the wire limit");
  std::string out;
  out.reserve(kLengthBytes + body.size() + kMacBytes);
  append_be(out, body.size(), 4);
  out.append(body);
  out.append(mac(secret, nonce, direction, sequence, body));
  LOCKSTEP_DCHECK_EQ(out.size(), kLengthBytes + body.size() + kMacBytes);
  return out;
}

bool mac_matches(std::string_view expected, std::string_view received) {
  return expected.size() == received.size() &&
         CRYPTO_memcmp(expected.data(), received.data(), expected.size()) == 0;
}

uint32_t load_u32(const char* p) { return static_cast<uint32_t>(load_be(p, 4)); }

Writer& Writer::u8(uint8_t v) {
  append_be(out_, v, 1);
  return *this;
}
Writer& Writer::u32(uint32_t v) {
  append_be(out_, v, 4);
  return *this;
}
Writer& Writer::u64(uint64_t v) {
  append_be(out_, v, 8);
  return *this;
}
Writer& Writer::bytes(std::string_view v) {
  append_be(out_, v.size(), 4);
  out_.append(v);
  return *this;
}

bool Reader::take(size_t n, std::string_view& out) {
  if (failed_ || in_.size() < n) {
    failed_ = true;
    return false;
  }
  out = in_.substr(0, n);
  in_.remove_prefix(n);
  return true;
}

uint8_t Reader::u8() {
  std::string_view s;
  return take(1, s) ? static_cast<uint8_t>(s[0]) : 0;
}
uint32_t Reader::u32() {
  std::string_view s;
  return take(4, s) ? static_cast<uint32_t>(load_be(s.data(), 4)) : 0;
}
uint64_t Reader::u64() {
  std::string_view s;
  return take(8, s) ? load_be(s.data(), 8) : 0;
}
std::string_view Reader::bytes(size_t max_length) {
  uint32_t n = u32();
  std::string_view s;
  if (n > max_length) {
    failed_ = true;
    return {};
  }
  take(n, s);
  return s;
}

}  // namespace lockstep::rendezvous::wire
