#include "launcher/remote.h"

#include <charconv>

#include <fmt/format.h>

#include "lockstep/base/error.h"

namespace lockstep::launcher {
namespace {

constexpr std::string_view kMagic = "lockstep-launch 1\n";
constexpr size_t kMaxBlockBytes = 4 << 20;
constexpr size_t kMaxRecords = 1 << 16;

void put(std::string& out, std::string_view kind, std::string_view value) {
  out += fmt::format("{} {}\n", kind, value.size());
  out += value;
  out += '\n';
}

// Reads "KIND LEN\nBYTES\n" records.
class Reader {
 public:
  explicit Reader(std::string_view bytes) : rest_(bytes) {}
  bool next(std::string_view& kind, std::string_view& value) {
    auto nl = rest_.find('\n');
    auto space = rest_.find(' ');
    if (nl == std::string_view::npos || space == std::string_view::npos || space > nl)
      throw Error("lockstep remote-worker: truncated launch block (record header)");
    kind = rest_.substr(0, space);
    size_t length = 0;
    auto [end, ec] = std::from_chars(rest_.data() + space + 1, rest_.data() + nl, length);
    if (ec != std::errc() || end != rest_.data() + nl || length > kMaxBlockBytes)
      throw Error(
          fmt::format("lockstep remote-worker: bad length in launch block record '{}'", kind));
    if (rest_.size() < nl + 1 + length + 1 || rest_[nl + 1 + length] != '\n')
      throw Error(fmt::format("lockstep remote-worker: truncated launch block record '{}'", kind));
    value = rest_.substr(nl + 1, length);
    rest_.remove_prefix(nl + 1 + length + 1);
    return kind != "end";
  }

 private:
  std::string_view rest_;
};

int to_int(std::string_view kind, std::string_view text) {
  int v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size())
    throw Error(
        fmt::format("lockstep remote-worker: launch block field '{}' is not an integer", kind));
  return v;
}

// Shell-style split: whitespace separates words; '...' and "..." quote.
std::vector<std::string> split_words(std::string_view text) {
  std::vector<std::string> words;
  std::string word;
  bool in_word = false;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (c == '\'' || c == '"') {
      auto close = text.find(c, i + 1);
      if (close == std::string_view::npos)
        throw InvalidArgument(fmt::format("--remote-exec '{}': unbalanced {}", text, c));
      word.append(text.substr(i + 1, close - i - 1));
      in_word = true;
      i = close;
    } else if (c == ' ' || c == '\t') {
      if (in_word) words.push_back(std::move(word));
      word.clear();
      in_word = false;
    } else {
      word += c;
      in_word = true;
    }
  }
  if (in_word) words.push_back(std::move(word));
  return words;
}

}  // namespace

std::string encode_launch_block(const LaunchBlock& block) {
  std::string out;
  put(out, "host", block.host);
  put(out, "rank", std::to_string(block.rank));
  put(out, "cwd", block.cwd);
  put(out, "start-timeout", std::to_string(block.start_timeout.count()));
  for (const auto& a : block.argv) put(out, "arg", a);
  for (const auto& [name, value] : block.env) put(out, "env", name + "=" + value);
  put(out, "end", "");
  return fmt::format("{}{}\n{}", kMagic, out.size(), out);
}

size_t launch_block_size(std::string_view prefix) {
  if (!kMagic.starts_with(prefix.substr(0, kMagic.size())))
    throw Error(
        "lockstep remote-worker: stdin does not start with a launch block; this command "
        "is started by 'lockstep run', not by hand");
  auto nl = prefix.find('\n', kMagic.size());
  if (prefix.size() < kMagic.size() || nl == std::string_view::npos) return 0;
  size_t body = 0;
  auto [end, ec] = std::from_chars(prefix.data() + kMagic.size(), prefix.data() + nl, body);
  if (ec != std::errc() || end != prefix.data() + nl || body > kMaxBlockBytes)
    throw Error("lockstep remote-worker: bad launch block length");
  return nl + 1 + body;
}

LaunchBlock decode_launch_block(std::string_view bytes) {
  size_t total = launch_block_size(bytes);
  if (total == 0 || total != bytes.size())
    throw Error("lockstep remote-worker: truncated launch block");
  Reader reader(bytes.substr(bytes.find('\n', kMagic.size()) + 1));
  LaunchBlock block;
  std::string_view kind, value;
  size_t records = 0;
  while (reader.next(kind, value)) {
    if (++records > kMaxRecords)
      throw Error("lockstep remote-worker: too many launch block records");
    if (kind == "host")
      block.host = value;
    else if (kind == "rank")
      block.rank = to_int(kind, value);
    else if (kind == "cwd")
      block.cwd = value;
    else if (kind == "start-timeout")
      block.start_timeout = std::chrono::seconds(to_int(kind, value));
    else if (kind == "arg")
      block.argv.emplace_back(value);
    else if (kind == "env") {
      auto eq = value.find('=');
      if (eq == 0 || eq == std::string_view::npos)
        throw Error("lockstep remote-worker: launch block env record is not NAME=VALUE");
      block.env.emplace_back(value.substr(0, eq), value.substr(eq + 1));
    } else {
      throw Error(
          fmt::format("lockstep remote-worker: unknown launch block record '{}' (is the "
                      "lockstep on this host the same version as the launcher's?)",
                      kind));
    }
  }
  if (block.argv.empty()) throw Error("lockstep remote-worker: launch block has no program");
  return block;
}

std::vector<std::string> remote_command(std::string_view remote_exec, std::string_view host,
                                        const std::string& lockstep_path) {
  std::vector<std::string> words = split_words(remote_exec);
  if (words.empty())
    throw InvalidArgument(
        "--remote-exec is empty; e.g. 'ssh -o BatchMode=yes' or "
        "'ip netns exec {host}'");
  bool substituted = false;
  for (auto& w : words)
    for (size_t at; (at = w.find("{host}")) != std::string::npos; substituted = true)
      w.replace(at, 6, host);
  if (!substituted) words.emplace_back(host);
  if (lockstep_path.find_first_of(" \t\n'\"\\$`;&|<>*?()[]{}!~#") != std::string::npos)
    throw InvalidArgument(fmt::format(
        "the lockstep binary's path '{}' has characters a remote shell would interpret; install "
        "lockstep under a plain path to run on several hosts",
        lockstep_path));
  words.push_back(lockstep_path);
  words.emplace_back("remote-worker");
  return words;
}

std::string started_key(int rank) { return fmt::format("lockstep/launch/started/{}", rank); }

}  // namespace lockstep::launcher
