// Mutex and MutexLock: std::mutex and std::unique_lock carrying clang's
// thread-safety annotations, so that a member declared
//
//   Mutex mu_;
//   int count_ LOCKSTEP_GUARDED_BY(mu_);
//
// is checked at compile time (clang's -Wthread-safety, an error in lockstep's
// own clang builds: CMake's lockstep_warnings) to be touched only with mu_
// held, and a helper marked LOCKSTEP_REQUIRES(mu_) to be called only so. On
// other compilers the macros expand to nothing and the classes cost what
// std::mutex and std::unique_lock cost.
//
// Condition variables: wait through the lock, in a loop written at the call
// site (`while (!ready_) lock.wait(cv_);`), so the analysis sees the guarded
// reads under the lock; a predicate lambda would be a separate function to it.
//
// Thread-safety: Mutex is a mutex. A MutexLock belongs to the thread that made
// it (as std::unique_lock does).
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>

#if defined(__clang__)
#define LOCKSTEP_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define LOCKSTEP_THREAD_ANNOTATION(x)
#endif

#define LOCKSTEP_CAPABILITY(name) LOCKSTEP_THREAD_ANNOTATION(capability(name))
#define LOCKSTEP_SCOPED_CAPABILITY LOCKSTEP_THREAD_ANNOTATION(scoped_lockable)
#define LOCKSTEP_GUARDED_BY(mu) LOCKSTEP_THREAD_ANNOTATION(guarded_by(mu))
#define LOCKSTEP_PT_GUARDED_BY(mu) LOCKSTEP_THREAD_ANNOTATION(pt_guarded_by(mu))
#define LOCKSTEP_REQUIRES(...) LOCKSTEP_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define LOCKSTEP_ACQUIRE(...) LOCKSTEP_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define LOCKSTEP_RELEASE(...) LOCKSTEP_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define LOCKSTEP_TRY_ACQUIRE(...) LOCKSTEP_THREAD_ANNOTATION(try_acquire_capability(__VA_ARGS__))
#define LOCKSTEP_EXCLUDES(...) LOCKSTEP_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
#define LOCKSTEP_RETURN_CAPABILITY(mu) LOCKSTEP_THREAD_ANNOTATION(lock_returned(mu))
#define LOCKSTEP_NO_THREAD_SAFETY_ANALYSIS LOCKSTEP_THREAD_ANNOTATION(no_thread_safety_analysis)

namespace lockstep {

class LOCKSTEP_CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void lock() LOCKSTEP_ACQUIRE() { mu_.lock(); }
  void unlock() LOCKSTEP_RELEASE() { mu_.unlock(); }
  bool try_lock() LOCKSTEP_TRY_ACQUIRE(true) { return mu_.try_lock(); }

 private:
  friend class MutexLock;
  std::mutex mu_;
};

// Holds `mu` from construction to destruction (or unlock()); waits on a
// std::condition_variable with the mutex released while asleep.
class LOCKSTEP_SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mu) LOCKSTEP_ACQUIRE(mu) : lock_(mu.mu_) {}
  ~MutexLock() LOCKSTEP_RELEASE() = default;
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

  // Early release and re-acquisition (e.g. to run a callback unlocked).
  void unlock() LOCKSTEP_RELEASE() { lock_.unlock(); }
  void lock() LOCKSTEP_ACQUIRE() { lock_.lock(); }

  void wait(std::condition_variable& cv) { cv.wait(lock_); }
  // False when the deadline passed (the caller re-checks its condition).
  template <class Clock, class Duration>
  bool wait_until(std::condition_variable& cv, std::chrono::time_point<Clock, Duration> deadline) {
    return cv.wait_until(lock_, deadline) == std::cv_status::no_timeout;
  }
  template <class Rep, class Period>
  bool wait_for(std::condition_variable& cv, std::chrono::duration<Rep, Period> timeout) {
    return cv.wait_for(lock_, timeout) == std::cv_status::no_timeout;
  }

 private:
  std::unique_lock<std::mutex> lock_;
};

}  // namespace lockstep
