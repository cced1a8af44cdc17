// Clang's thread-safety annotations, and the mutex they can check.
//
// `TF_GUARDED_BY(mutex_)` on a member, `TF_REQUIRES(mutex_)` on a function that expects the
// caller to hold it: Clang's -Wthread-safety then refuses, at compile time, an access
// without the lock (ci/check_thread_safety.sh runs it over the library in CI). Other
// compilers see nothing: every macro is empty there.
//
// The analysis only knows a lock through an annotated type, and libstdc++'s std::mutex and
// std::lock_guard are not annotated: guarded state uses `Mutex` and `MutexLock` instead,
// which are std::mutex and std::unique_lock underneath, with nothing added at run time.
//
// Thread-safety: Mutex is a std::mutex. A MutexLock belongs to the thread that made it.
#pragma once

#include <mutex>

#if defined(__clang__)
#define TF_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define TF_THREAD_ANNOTATION(x)
#endif

// A type that is a lock (Mutex), and a type that holds one for its lifetime (MutexLock).
#define TF_CAPABILITY(name) TF_THREAD_ANNOTATION(capability(name))
#define TF_SCOPED_CAPABILITY TF_THREAD_ANNOTATION(scoped_lockable)
// A member read or written only with the mutex held; a pointer whose pointee is.
#define TF_GUARDED_BY(mutex) TF_THREAD_ANNOTATION(guarded_by(mutex))
#define TF_PT_GUARDED_BY(mutex) TF_THREAD_ANNOTATION(pt_guarded_by(mutex))
// A function called with the mutexes held (REQUIRES), or not held (EXCLUDES: it takes them).
#define TF_REQUIRES(...) TF_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define TF_EXCLUDES(...) TF_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
// A function that takes, releases or tries to take a lock.
#define TF_ACQUIRE(...) TF_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define TF_RELEASE(...) TF_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define TF_TRY_ACQUIRE(...) TF_THREAD_ANNOTATION(try_acquire_capability(__VA_ARGS__))
// A function returning a reference to the mutex named (a function-local static's accessor).
#define TF_RETURN_CAPABILITY(mutex) TF_THREAD_ANNOTATION(lock_returned(mutex))
// A function the analysis skips: say why beside it.
#define TF_NO_THREAD_SAFETY_ANALYSIS TF_THREAD_ANNOTATION(no_thread_safety_analysis)

namespace tokenfeed {

// A std::mutex that Clang's analysis knows as a lock. Constant-initialised, so a
// namespace-scope Mutex is usable before any constructor of the program runs.
class TF_CAPABILITY("mutex") Mutex {
 public:
  constexpr Mutex() noexcept = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void lock() TF_ACQUIRE() { mutex_.lock(); }
  void unlock() TF_RELEASE() { mutex_.unlock(); }
  bool try_lock() TF_TRY_ACQUIRE(true) { return mutex_.try_lock(); }

 private:
  friend class MutexLock;
  std::mutex mutex_;
};

// Holds a Mutex from construction to destruction, as std::lock_guard does. native() is the
// std::unique_lock a std::condition_variable waits on: wait() releases and retakes the
// mutex, and the code around it runs with the mutex held, as the analysis assumes. Wait in
// a loop (`while (!ready) cv.wait(lock.native());`) rather than with a predicate: the
// analysis checks a lambda on its own, as if the mutex were not held.
class TF_SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mutex) TF_ACQUIRE(mutex) : lock_(mutex.mutex_) {}
  ~MutexLock() TF_RELEASE() = default;
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

  std::unique_lock<std::mutex>& native() noexcept { return lock_; }

 private:
  std::unique_lock<std::mutex> lock_;
};

}  // namespace tokenfeed
