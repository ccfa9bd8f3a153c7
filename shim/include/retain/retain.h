/*
 * retain.h: the calls a program can make into libretain.so.
 *
 * Example:
 *
 *   #include <retain/retain.h>
 *
 *   void after_warmup(void) {
 *     if (retain_snapshot("warm")) {   // NULL when libretain.so is not loaded
 *       ...
 *     }
 *     RETAIN_SNAPSHOT("warm");         // same call, a no-op without the shim
 *   }
 *
 * Every function is declared weak: a program compiled with this header and
 * not linked against libretain.so still links and runs. Where the shim is
 * not preloaded the function's address is NULL; the RETAIN_* macros check it
 * for you. Functions are thread-safe unless stated otherwise.
 */
#ifndef RETAIN_RETAIN_H_
#define RETAIN_RETAIN_H_

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__) || defined(__clang__)
#define RETAIN_API_DECL __attribute__((weak, visibility("default")))
#else
#define RETAIN_API_DECL
#endif

/*
 * Writes a snapshot of every live allocation now, synchronously, to
 * $RETAIN_DIR/<exe>.<pid>.<seq>.pb with trigger API and the given label
 * (NULL or "" for none; at most 127 bytes are kept). Blocks the calling
 * thread for as long as the write takes (about 1 s per million live
 * allocations); other threads keep running and allocating.
 *
 * Returns 0 when the snapshot was written, -1 when it could not be (errno
 * is left as it was; RETAIN_LOG=1 says why on stderr).
 * Not async-signal-safe: do not call it from a signal handler (send
 * RETAIN_SIGNAL to the process instead).
 */
RETAIN_API_DECL int retain_snapshot(const char *label);

#ifdef __cplusplus
} /* extern "C" */
#endif

/* Calls retain_snapshot(label) when the shim is loaded; otherwise nothing. */
#define RETAIN_SNAPSHOT(label) ((retain_snapshot) != 0 ? retain_snapshot(label) : -1)

#endif /* RETAIN_RETAIN_H_ */
