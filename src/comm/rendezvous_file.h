// The private file through which a job's rank 0 hands the others its
// rendezvous store's address and secret when the launcher gave them no
// secret (plain srun: slurm_world.h; torchrun's variables: torchrun_world.h).
// Internal to comm.
//
// Format: three lines, kRendezvousFileMagic, "host:port", the hex secret.
// Written under a temporary name with O_EXCL, mode 0600, fsync'ed and renamed
// into place, so a reader sees either no file or a whole one; a reader
// refuses a file that is not its user's or that anyone else may read or
// write, so the secret never passes through a file another user could see.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#ifdef LOCKSTEP_HAVE_RENDEZVOUS
#include "lockstep/rendezvous/store.h"
#endif

namespace lockstep::comm {

inline constexpr std::string_view kRendezvousFileMagic = "lockstep-rendezvous 1";

struct RendezvousFile {
  std::string address;  // host:port of the store
  std::string secret;   // hex, as in LOCKSTEP_SECRET
};

// Writes `note` to `path` as described above. `who` prefixes errors
// ("srun rendezvous"). Throws lockstep::Error naming the path and the fix.
void write_rendezvous_file(const std::string& path, const RendezvousFile& note,
                           std::string_view who);

// The note in `path`; nullopt while the file does not exist. Throws
// lockstep::Error when the file is not this user's, is readable or writable
// by others, or is not a rendezvous file.
std::optional<RendezvousFile> read_rendezvous_file(const std::string& path, std::string_view who);

#ifdef LOCKSTEP_HAVE_RENDEZVOUS
// Keeps rank 0's store serving, and its file (if `file` is not empty), until
// the process exits: the others may use the store until then (gloo). At exit
// the file is removed. Call once per process.
void keep_serving(std::unique_ptr<rendezvous::StoreServer> server, std::string file);
#endif

}  // namespace lockstep::comm
