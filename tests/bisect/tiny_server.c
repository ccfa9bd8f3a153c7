/*
 * tiny_server: the small HTTP/1.1 server whose history retain-bisect's tests
 * bisect (tests/bisect/bisect_test.py builds a git repository of it, one
 * commit at a time, and compiles each commit with the system C compiler).
 *
 * The test writes this file into each commit with its marked regions kept or
 * dropped, so one source describes the whole history:
 *
 *   region "leak"    from commit 7: RememberRequest keeps a 64 KiB context
 *                    per request, forever;
 *   region "cache"   from commit 9: CacheStore keeps the last 3 bodies in
 *                    48 KiB slots (grows for 3 requests, then flat: bounded),
 *
 * a region being the lines between a line "// @begin NAME" and a line
 * "// @end NAME"; and replaces TINY_VERSION with the commit's number. Built as is (every
 * region kept) it is the newest commit.
 *
 * Serves 127.0.0.1:PORT, one connection at a time: reads a request head and
 * its Content-Length body, answers "200 OK" with "Connection: close" and
 * closes. Prints "listening on 127.0.0.1:PORT" once ready. Single-threaded.
 *
 *   tiny_server --port N [--pid-file PATH] [--crash-after N] [--never-listen]
 *
 * --crash-after N aborts on request N+1, before answering it; --never-listen
 * never opens its port (it sleeps until killed). Exit 2 on a bad command
 * line or when the port cannot be bound.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#define TINY_VERSION "0"
#define NOINLINE __attribute__((noinline, noclone))

enum { kHeadBytes = 8192 };

// @begin leak
enum { kContextBytes = 64 * 1024 };

/* Every context ever made, linked through its first bytes (so reachable). */
static void *g_contexts;

/* Keeps a context per request and never lets it go: the leak. */
static NOINLINE void RememberRequest(const char *body, size_t size) {
  char *context = malloc(kContextBytes);
  if (context == NULL) abort();
  memset(context, 0, kContextBytes);
  memcpy(context, &g_contexts, sizeof(g_contexts));
  memcpy(context + sizeof(g_contexts), body, size < 1024 ? size : 1024);
  g_contexts = context;
}
// @end leak

// @begin cache
enum { kCacheSlots = 3, kCacheSlotBytes = 48 * 1024 };

static char *g_cache[kCacheSlots];
static unsigned g_cache_next;

/* Keeps the last kCacheSlots bodies: bounded, evicts the oldest. */
static NOINLINE void CacheStore(const char *body, size_t size) {
  char *slot = malloc(kCacheSlotBytes);
  if (slot == NULL) abort();
  memset(slot, 0, kCacheSlotBytes);
  memcpy(slot, body, size < kCacheSlotBytes ? size : kCacheSlotBytes);
  free(g_cache[g_cache_next]);
  g_cache[g_cache_next] = slot;
  g_cache_next = (g_cache_next + 1) % kCacheSlots;
}
// @end cache

static int WriteAll(int fd, const char *data, size_t size) {
  while (size > 0) {
    ssize_t n = write(fd, data, size);
    if (n <= 0) return -1;
    data += n;
    size -= (size_t)n;
  }
  return 0;
}

/* Reads one request (head and body) and answers it. */
static void Serve(int fd, unsigned long number, long crash_after) {
  char *head = malloc(kHeadBytes + 1);
  if (head == NULL) abort();
  size_t got = 0;
  char *end = NULL;
  while (got < kHeadBytes) {
    ssize_t n = read(fd, head + got, kHeadBytes - got);
    if (n <= 0) break;
    got += (size_t)n;
    head[got] = '\0';
    if ((end = strstr(head, "\r\n\r\n")) != NULL) break;
  }
  if (end == NULL) {
    free(head);
    return;
  }
  size_t head_size = (size_t)(end + 4 - head);
  size_t length = 0;
  for (char *line = strstr(head, "\r\n"); line != NULL && line < end;
       line = strstr(line + 2, "\r\n")) {
    if (strncasecmp(line + 2, "content-length:", 15) == 0) length = strtoul(line + 17, NULL, 10);
  }
  char *body = malloc(length + 1);
  if (body == NULL) abort();
  size_t have = got - head_size < length ? got - head_size : length;
  memcpy(body, head + head_size, have);
  while (have < length) {
    ssize_t n = read(fd, body + have, length - have);
    if (n <= 0) break;
    have += (size_t)n;
  }
  if (crash_after >= 0 && number > (unsigned long)crash_after) abort();

  // @begin leak
  RememberRequest(body, have);
  // @end leak
  // @begin cache
  CacheStore(body, have);
  // @end cache

  char text[64];
  int text_size = snprintf(text, sizeof(text), "ok %s %lu\n", TINY_VERSION, number);
  char response[256];
  int size = snprintf(response, sizeof(response),
                      "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n"
                      "Connection: close\r\n\r\n%s",
                      text_size, text);
  WriteAll(fd, response, (size_t)size);
  free(body);
  free(head);
}

static void Usage(const char *message) {
  fprintf(stderr, "tiny_server: %s\n", message);
  exit(2);
}

int main(int argc, char **argv) {
  long port = -1, crash_after = -1;
  int never_listen = 0;
  const char *pid_file = NULL;
  for (int i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "--never-listen") == 0) {
      never_listen = 1;
    } else if (i + 1 < argc && strcmp(argv[i], "--port") == 0) {
      port = strtol(argv[++i], NULL, 10);
    } else if (i + 1 < argc && strcmp(argv[i], "--crash-after") == 0) {
      crash_after = strtol(argv[++i], NULL, 10);
    } else if (i + 1 < argc && strcmp(argv[i], "--pid-file") == 0) {
      pid_file = argv[++i];
    } else {
      Usage("usage: tiny_server --port N [--pid-file PATH] [--crash-after N] [--never-listen]");
    }
  }
  if (port < 0 || port > 65535) Usage("--port must be 0..65535");
  if (pid_file != NULL) {
    FILE *file = fopen(pid_file, "w");
    if (file == NULL) Usage("cannot write the --pid-file");
    fprintf(file, "%ld\n", (long)getpid());
    fclose(file);
  }
  if (never_listen) {
    for (;;) pause();
  }

  int listener = socket(AF_INET, SOCK_STREAM, 0);
  int on = 1;
  setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
  struct sockaddr_in address;
  memset(&address, 0, sizeof(address));
  address.sin_family = AF_INET;
  address.sin_port = htons((unsigned short)port);
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t address_size = sizeof(address);
  if (listener < 0 || bind(listener, (struct sockaddr *)&address, sizeof(address)) != 0 ||
      listen(listener, 64) != 0 ||
      getsockname(listener, (struct sockaddr *)&address, &address_size) != 0) {
    perror("tiny_server: listen");
    return 2;
  }
  printf("tiny_server %s listening on 127.0.0.1:%d\n", TINY_VERSION, ntohs(address.sin_port));
  fflush(stdout);
  for (unsigned long number = 1;; ++number) {
    int fd = accept(listener, NULL, NULL);
    if (fd < 0) continue;
    Serve(fd, number, crash_after);
    close(fd);
  }
}
