// The planted case of ci/check_thread_safety.sh: two faults the analysis must refuse (a
// guarded member read without its mutex, a TF_REQUIRES function called without it), so that
// a check that stopped biting (a macro that expands to nothing under Clang, a flag that no
// longer reaches the compiler) fails CI instead of passing everything. Not built.
#include "util/thread_annotations.hpp"

namespace {

class Counter {
 public:
  void add() {
    tokenfeed::MutexLock lock(mutex_);
    ++count_;  // fine: held
  }
  int read_unlocked() const { return count_; }  // fault 1: reading count_ requires mutex_
  void bump() { add_locked(); }                 // fault 2: add_locked requires mutex_

 private:
  void add_locked() TF_REQUIRES(mutex_) { ++count_; }

  mutable tokenfeed::Mutex mutex_;
  int count_ TF_GUARDED_BY(mutex_) = 0;
};

}  // namespace

int planted() {
  Counter c;
  c.add();
  c.bump();
  return c.read_unlocked();
}
