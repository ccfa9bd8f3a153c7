// leaky: the demo program scripts/demo.sh runs under libretain.so.
//
// It plays a tiny server that handles 20 "requests" and keeps memory in two
// ways that look alike from the outside (RSS climbs while requests arrive)
// and mean opposite things:
//
//  - a leak: every request's 64 KiB body is appended to a request log that
//    nothing ever reads or trims (RememberRequest). Live bytes grow by
//    64 KiB per request, without bound: 20 x 64 KiB = 1.25 MiB at the end.
//  - a bounded cache: an LRU "prompt cache" of at most 4 entries of 256 KiB
//    (CachePrompt). It fills up during the first 4 requests, then evicts one
//    entry for each one it adds: live bytes stay at 1 MiB.
//
// Each request also makes temporaries (a parse buffer, a response string)
// that are freed before it ends: allocated, but never live in a snapshot.
//
// After every request it asks the shim for a snapshot labelled
// "after-request-N" (RETAIN_SNAPSHOT does nothing without the shim), so a
// trend over the series shows the leak growing in a straight line and the
// cache rising for 4 requests, then flat. At exit the shim writes one more:
// by then the cache has been destroyed with the program's static objects,
// and only the leak is left.
//
// Single-threaded. The functions that allocate are noinline so each one is
// a frame of its own in the recorded stacks.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <list>
#include <string>
#include <unordered_map>
#include <vector>

#include "retain/retain.h"

namespace {

constexpr int kRequests = 20;
constexpr int kSnapshotEvery = 1;
constexpr size_t kRequestBodyBytes = 64 * 1024;
constexpr size_t kCacheEntryBytes = 256 * 1024;
constexpr size_t kCacheCapacity = 4;
constexpr int kDistinctPrompts = 6;  // more than the cache holds: it evicts
constexpr size_t kParseBufferBytes = 16 * 1024;

// Keeps the compiler from eliding an allocation whose contents go unread.
inline void Escape(const void* p) { asm volatile("" : : "g"(p) : "memory"); }

// The leak: every request body ever seen, never freed. Raw pointers on
// purpose, as in the C-style code such leaks usually live in.
std::vector<char*> g_request_log;

// The bounded cache: least recently used entry first out.
class PromptCache {
 public:
  explicit PromptCache(size_t capacity) : capacity_(capacity) {}

  // Returns the cached state for `key`, computing and inserting it (and
  // evicting the least recently used entry when full) on a miss.
  const std::vector<uint8_t>& Get(const std::string& key) {
    if (auto it = index_.find(key); it != index_.end()) {
      entries_.splice(entries_.begin(), entries_, it->second);
      return it->second->state;
    }
    if (entries_.size() == capacity_) {
      index_.erase(entries_.back().key);
      entries_.pop_back();
      ++evictions_;
    }
    entries_.push_front(Entry{key, ComputeState(key)});
    index_[key] = entries_.begin();
    return entries_.front().state;
  }

  size_t size() const { return entries_.size(); }
  int evictions() const { return evictions_; }

 private:
  struct Entry {
    std::string key;
    std::vector<uint8_t> state;
  };

  // The allocation site the cache owns: one 256 KiB state per entry.
  __attribute__((noinline)) static std::vector<uint8_t> ComputeState(const std::string& key) {
    std::vector<uint8_t> state(kCacheEntryBytes);
    for (size_t i = 0; i < state.size(); i += 4096)
      state[i] = static_cast<uint8_t>(key[i % key.size()]);
    Escape(state.data());
    return state;
  }

  size_t capacity_;
  int evictions_ = 0;
  std::list<Entry> entries_;
  std::unordered_map<std::string, std::list<Entry>::iterator> index_;
};

PromptCache g_prompt_cache(kCacheCapacity);

// THE LEAK: copies the request body into the request log, which keeps it
// forever.
__attribute__((noinline)) void RememberRequest(int request) {
  char* body = new char[kRequestBodyBytes];
  for (size_t i = 0; i < kRequestBodyBytes; i += 4096) body[i] = static_cast<char>(request);
  Escape(body);
  g_request_log.push_back(body);
}

// Temporaries: allocated and freed within the request.
__attribute__((noinline)) void ParseRequest(int request) {
  std::vector<char> parse_buffer(kParseBufferBytes, static_cast<char>(request));
  Escape(parse_buffer.data());
  std::string response = "response to request " + std::to_string(request) +
                         std::string(1000, 'x');  // past the small-string buffer
  Escape(response.data());
}

__attribute__((noinline)) void HandleRequest(int request) {
  RememberRequest(request);
  const std::string prompt = "prompt-" + std::to_string(request % kDistinctPrompts) +
                             std::string(40, '.');  // a key long enough to allocate
  Escape(g_prompt_cache.Get(prompt).data());
  ParseRequest(request);
}

}  // namespace

int main() {
  for (int request = 1; request <= kRequests; ++request) {
    HandleRequest(request);
    if (request % kSnapshotEvery == 0) {
      const std::string label = "after-request-" + std::to_string(request);
      RETAIN_SNAPSHOT(label.c_str());
    }
  }
  std::printf("leaky: handled %d requests\n", kRequests);
  std::printf("leaky: leaked %zu x %zu KiB = %zu KiB in RememberRequest (never freed)\n",
              g_request_log.size(), kRequestBodyBytes / 1024,
              g_request_log.size() * kRequestBodyBytes / 1024);
  std::printf(
      "leaky: prompt cache holds %zu x %zu KiB = %zu KiB in ComputeState "
      "(bounded: %d evictions)\n",
      g_prompt_cache.size(), kCacheEntryBytes / 1024,
      g_prompt_cache.size() * kCacheEntryBytes / 1024, g_prompt_cache.evictions());
  return 0;
}
