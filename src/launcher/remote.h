// Starting workers on other hosts. Internal.
//
// The launcher runs `REMOTE_EXEC... /path/to/lockstep remote-worker` (for
// example `ssh -o BatchMode=yes host2 /usr/bin/lockstep remote-worker` or
// `ip netns exec ns2 /usr/bin/lockstep remote-worker`) and writes a launch
// block on that command's stdin: the worker's argv, environment (secret
// included), working directory and start timeout. Nothing of the job is on a
// command line, so quoting never differs between ssh (which re-parses its
// arguments in a remote shell) and exec-style wrappers, and the secret never
// shows up in `ps`.
//
// The launcher keeps that stdin open for the life of the worker: when it
// closes (the launcher exited, was killed, or tore the job down and killed the
// ssh), the remote-worker shim stops the worker. So no worker outlives its
// job on any host.
#pragma once

#include <chrono>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace lockstep::launcher {

struct LaunchBlock {
  std::string host;  // as the launcher names it, for messages
  int rank = 0;
  std::string cwd;
  std::chrono::seconds start_timeout{120};
  std::vector<std::string> argv;
  std::vector<std::pair<std::string, std::string>> env;  // overlays the remote environment
};

std::string encode_launch_block(const LaunchBlock& block);
// How many bytes the block starting with `prefix` has in all, or 0 while the
// prefix is too short to tell. Throws lockstep::Error when it is not a block.
size_t launch_block_size(std::string_view prefix);
// Throws lockstep::Error naming what is malformed; bounded in size and counts.
LaunchBlock decode_launch_block(std::string_view bytes);

// The remote-exec command for `host`: the template's words (split like a
// shell would, with '' and "" quoting) with {host} substituted; when no word
// contains {host}, the host is appended (ssh style). Then `lockstep_path
// remote-worker`. Throws InvalidArgument for an empty template or a path that
// a remote shell would re-split.
std::vector<std::string> remote_command(std::string_view remote_exec, std::string_view host,
                                        const std::string& lockstep_path);

// The key a started remote worker sets in the rendezvous store, so the
// launcher can tell which hosts came up within --start-timeout.
std::string started_key(int rank);

// Entry point of `lockstep remote-worker` (argv[0] is "remote-worker"); what a
// remote host runs. Returns the worker's exit status (128 + signal when it was
// killed).
// Declared in lockstep/launcher/launcher.h.

}  // namespace lockstep::launcher
