// Error types shared by every lockstep layer.
//
// Policy (docs/errors.md): every failure is an exception derived from
// lockstep::Error whose message names the operation, the offending argument or
// peer, and what to do about it. Nothing waits forever: waits end in
// TimeoutError, dead peers in PeerFailure, disagreement across ranks in
// MismatchError.
#pragma once

#include <stdexcept>
#include <string>

namespace lockstep {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A caller passed something invalid; raised before any communication.
class InvalidArgument : public Error {
 public:
  using Error::Error;
};

// Ranks disagree about an operation (count, dtype, op, root, name...).
class MismatchError : public Error {
 public:
  using Error::Error;
};

// A wait passed its deadline while every peer was still alive.
class TimeoutError : public Error {
 public:
  using Error::Error;
};

// Every rank of a process set is blocked waiting for operations that cannot
// complete (each waits for a collective some other rank never submitted):
// reported within about a second instead of at the stall timeout. The message
// names the operations and the ranks that did and did not submit them.
class DeadlockError : public TimeoutError {
 public:
  using TimeoutError::TimeoutError;
};

// A peer process died or closed its connection. rank() is the dead rank, or -1
// when the transport cannot tell which.
class PeerFailure : public Error {
 public:
  PeerFailure(int rank, const std::string& what) : Error(what), rank_(rank) {}
  int rank() const { return rank_; }

 private:
  int rank_;
};

// Another rank failed first and aborted the job; the message carries its reason.
class Aborted : public Error {
 public:
  using Error::Error;
};

}  // namespace lockstep
