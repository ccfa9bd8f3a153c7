// spin_lock: the shim's only lock type.
//
// A test-and-test-and-set lock that yields the CPU after a short spin. It is
// what the shim holds around table updates, which never call out of the shim
// while holding it. Never use it from a signal handler. Zero-initialised
// storage is an unlocked lock, so static instances need no constructor.
#ifndef RETAIN_SHIM_SRC_BASE_SPIN_LOCK_H_
#define RETAIN_SHIM_SRC_BASE_SPIN_LOCK_H_

#include <sched.h>

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
    if (__builtin_expect(!__atomic_exchange_n(&locked_, 1, __ATOMIC_ACQUIRE), 1)) return;
    LockSlow();
  }
  bool TryLock() {
    return !__atomic_load_n(&locked_, __ATOMIC_RELAXED) &&
           !__atomic_exchange_n(&locked_, 1, __ATOMIC_ACQUIRE);
  }
  void Unlock() { __atomic_store_n(&locked_, 0, __ATOMIC_RELEASE); }
  // For a fork child only: the lock was held across fork() by the forking
  // thread (see hooks/init.cc), so it is released without waiting.
  void ResetInChild() { __atomic_store_n(&locked_, 0, __ATOMIC_RELAXED); }

 private:
  __attribute__((noinline)) void LockSlow() {
    for (int spins = 0;; ++spins) {
      if (TryLock()) {
        return;
      }
      if (spins >= 64) {
        sched_yield();
      } else {
        CpuRelax();
      }
    }
  }

  // A plain int with atomic builtins rather than std::atomic: GCC emits a
  // dynamic initialiser for arrays of structs holding std::atomic members,
  // and hooks can run before this library's initialisers do.
  int locked_;
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

#endif  // RETAIN_SHIM_SRC_BASE_SPIN_LOCK_H_
