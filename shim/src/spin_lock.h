// spin_lock: the shim's only lock type.
//
// A test-and-test-and-set lock that yields the CPU after a short spin. It is
// what the shim holds around table updates, which never call out of the shim
// while holding it. Never use it from a signal handler. Zero-initialised
// storage is an unlocked lock, so static instances need no constructor.
#ifndef RETAIN_SHIM_SRC_SPIN_LOCK_H_
#define RETAIN_SHIM_SRC_SPIN_LOCK_H_

#include <sched.h>

#include <atomic>

namespace retain::shim {

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

class SpinLock {
 public:
  void Lock() {
    if (__builtin_expect(!locked_.exchange(true, std::memory_order_acquire), 1)) return;
    LockSlow();
  }
  bool TryLock() {
    return !locked_.load(std::memory_order_relaxed) &&
           !locked_.exchange(true, std::memory_order_acquire);
  }
  void Unlock() { locked_.store(false, std::memory_order_release); }
  // For a fork child only: the lock was held across fork() by the forking
  // thread (see fork_handlers), so it is released without waiting.
  void ResetInChild() { locked_.store(false, std::memory_order_relaxed); }

 private:
  __attribute__((noinline)) void LockSlow() {
    for (int spins = 0;; ++spins) {
      if (!locked_.load(std::memory_order_relaxed) &&
          !locked_.exchange(true, std::memory_order_acquire)) {
        return;
      }
      if (spins >= 64) {
        sched_yield();
      } else {
        CpuRelax();
      }
    }
  }

  std::atomic<bool> locked_;
};

class SpinLockHolder {
 public:
  explicit SpinLockHolder(SpinLock& lock) : lock_(lock) { lock_.Lock(); }
  ~SpinLockHolder() { lock_.Unlock(); }
  SpinLockHolder(const SpinLockHolder&) = delete;
  SpinLockHolder& operator=(const SpinLockHolder&) = delete;

 private:
  SpinLock& lock_;
};

}  // namespace retain::shim

#endif  // RETAIN_SHIM_SRC_SPIN_LOCK_H_
