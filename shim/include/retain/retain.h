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
 * Tagging work by request (see "Request tags" in the README):
 *
 *   void handle(const char *request_id) {            // an HTTP worker thread
 *     retain_request_t r = RETAIN_REQUEST_BEGIN(request_id);
 *     enqueue(task, r);                               // hand the handle over
 *     ...
 *   }
 *   void inference_loop(void) {                       // another thread
 *     RETAIN_REQUEST_ADOPT(task->request);            // its allocations belong to it
 *     run(task);
 *     RETAIN_REQUEST_RELEASE();
 *     RETAIN_REQUEST_END(task->request);              // the request is over
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

/* A request tag's handle; 0 means "none" and is accepted everywhere. */
typedef unsigned int retain_request_t;

/*
 * Opens a request tag named `id` (X-Request-Id or any string; NULL or "" for
 * none, at most 127 bytes kept) and makes it the calling thread's: its
 * allocations are attributed to the request ("explicit") until
 * retain_request_end or retain_request_release. Returns the handle, 0 when
 * the shim cannot tag (not loaded, out of memory). Cost: about a
 * microsecond. With RETAIN_SNAPSHOT_EVERY=N, every Nth retain_request_end
 * writes a snapshot before returning.
 */
RETAIN_API_DECL retain_request_t retain_request_begin(const char *id);

/* Ends the request; detaches it from the calling thread if it is attached.
 * Ending twice, or ending 0, does nothing. */
RETAIN_API_DECL void retain_request_end(retain_request_t request);

/* The calling thread now works for `request` (a handle another thread got
 * from retain_request_begin): its allocations are attributed to it. */
RETAIN_API_DECL void retain_request_adopt(retain_request_t request);

/* The calling thread no longer works for a particular request. */
RETAIN_API_DECL void retain_request_release(void);

#ifdef __cplusplus
} /* extern "C" */
#endif

/* The calls above when the shim is loaded; otherwise nothing (-1 or 0). */
#define RETAIN_SNAPSHOT(label) ((retain_snapshot) != 0 ? retain_snapshot(label) : -1)
#define RETAIN_REQUEST_BEGIN(id) \
  ((retain_request_begin) != 0 ? retain_request_begin(id) : (retain_request_t)0)
#define RETAIN_REQUEST_END(request)                             \
  do {                                                          \
    if ((retain_request_end) != 0) retain_request_end(request); \
  } while (0)
#define RETAIN_REQUEST_ADOPT(request)                               \
  do {                                                              \
    if ((retain_request_adopt) != 0) retain_request_adopt(request); \
  } while (0)
#define RETAIN_REQUEST_RELEASE()                                 \
  do {                                                           \
    if ((retain_request_release) != 0) retain_request_release(); \
  } while (0)

#endif /* RETAIN_RETAIN_H_ */
