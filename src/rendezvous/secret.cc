#include "rendezvous/secret.h"

#include <sys/random.h>

#include <cerrno>

#include <fmt/format.h>

#include "lockstep/base/error.h"
#include "lockstep/rendezvous/store.h"

namespace lockstep::rendezvous {

std::string random_bytes(size_t n) {
  std::string out(n, '\0');
  size_t got = 0;
  while (got < n) {
    ssize_t r = ::getrandom(out.data() + got, n - got, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) throw Error("rendezvous: getrandom() failed; the kernel has no randomness to give");
    got += static_cast<size_t>(r);
  }
  return out;
}

std::string random_secret_hex() {
  std::string raw = random_bytes(kSecretBytes);
  std::string hex;
  for (unsigned char c : raw) hex += fmt::format("{:02x}", c);
  return hex;
}

std::string decode_secret_hex(std::string_view hex) {
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  if (hex.empty() || hex.size() % 2 != 0)
    throw InvalidArgument(
        "rendezvous: the secret (LOCKSTEP_SECRET) must be a non-empty even-length hex string; "
        "start workers with `lockstep run`, which sets it");
  std::string out;
  for (size_t i = 0; i < hex.size(); i += 2) {
    int hi = nibble(hex[i]), lo = nibble(hex[i + 1]);
    if (hi < 0 || lo < 0)
      throw InvalidArgument("rendezvous: the secret (LOCKSTEP_SECRET) is not hexadecimal");
    out.push_back(static_cast<char>(hi * 16 + lo));
  }
  return out;
}

}  // namespace lockstep::rendezvous
