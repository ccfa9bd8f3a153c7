// inference: the model side of llm-server-sim, a look-alike of llama.cpp's
// llama-server for retain's request-tagging demo and end-to-end tests.
//
// Three owners of memory, each behind a noinline function with a name that
// retain-diff prints, so a snapshot diff can say who kept the bytes:
//   EvaluatePrompt      a per-request working buffer, freed before it returns
//                       (transient: never retained between two snapshots);
//   PromptCache::Save   the previous prompt's state, a fixed-size entry, kept
//                       in an LRU cache bounded by a byte budget; entries leave
//                       through PromptCache::Evict (bounded: a plateau);
//   PrefixTrie::Insert  one node per 16-character chunk of the prompt, never
//                       freed, not even at exit (the Ollama orphaned-trie bug:
//                       a leak, linear in requests).
//
// Threads: HTTP worker threads call TaskQueue::Post and ResultQueue::Wait;
// exactly one thread runs InferenceLoop::Run, and only it touches the model
// (EvaluatePrompt, PromptCache, PrefixTrie are not thread-safe). This mirrors
// llama-server's server_queue / server_response pair.
#ifndef RETAIN_EXAMPLES_LLM_SERVER_SIM_INFERENCE_H_
#define RETAIN_EXAMPLES_LLM_SERVER_SIM_INFERENCE_H_

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace retain::examples {

inline constexpr size_t kMiB = size_t{1} << 20;
inline constexpr size_t kKiB = size_t{1} << 10;
// Bytes of EvaluatePrompt's working buffer (allocated and freed per request).
inline constexpr size_t kWorkBufferBytes = 2 * kMiB;
// Characters of prompt per trie node.
inline constexpr size_t kTrieChunkChars = 16;

struct SimOptions {
  size_t state_bytes = 8 * kMiB;        // --state-mib: one prompt-cache entry
  size_t state_bytes_per_char = 0;      // --state-kib-per-char: more per prompt character
  size_t cache_bytes = 32 * kMiB;       // --cache-mib: cache budget; 0 = off
  bool leak_trie = false;               // --leak-trie
  size_t trie_node_bytes = 256 * kKiB;  // --trie-node-kib: payload per node
  size_t parallel = 1;                  // --parallel: slots, each with its own prompt
};

// One /completion request, as the HTTP thread hands it over.
struct Task {
  uint64_t id = 0;
  std::string request_id;  // X-Request-Id, or empty
  std::string prompt;
};

// What the inference loop answers.
struct TaskResult {
  uint64_t id = 0;
  std::string content;
  size_t tokens = 0;
  size_t cache_entries = 0;
};

// Tasks from the HTTP threads to the inference loop (llama-server's
// server_queue). Thread-safe.
class TaskQueue {
 public:
  void Post(Task task);
  // Blocks until a task arrives or Terminate() was called (then nullopt).
  std::optional<Task> Pop();
  // A task if one waits now, else nullopt (never blocks).
  std::optional<Task> TryPop();
  void Terminate();

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Task> tasks_;
  bool terminated_ = false;
};

// Results from the inference loop back to the waiting HTTP thread
// (llama-server's server_response). Thread-safe.
class ResultQueue {
 public:
  void Send(TaskResult result);
  // Blocks until the result for `id` arrives.
  TaskResult Wait(uint64_t id);

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  std::unordered_map<uint64_t, TaskResult> results_;
};

// An LRU cache of prompt states under a byte budget. A state is
// state_bytes plus bytes_per_char per prompt character (llama-server's grow
// with the prompt's tokens); a state larger than the budget (any, with a
// budget of 0) is not stored.
class PromptCache {
 public:
  PromptCache(size_t budget_bytes, size_t state_bytes, size_t bytes_per_char = 0);
  // Stores `prompt`'s state (written) unless it is cached already (then it
  // becomes most recently used); evicts the least recently used entries
  // first to stay within the budget.
  __attribute__((noinline)) void Save(const std::string& prompt);
  // Frees the least recently used entry. Returns false when empty.
  __attribute__((noinline)) bool Evict();
  // True and most-recently-used if `prompt` has an entry.
  bool Lookup(const std::string& prompt);
  size_t entries() const { return lru_.size(); }
  uint64_t evictions() const { return evictions_; }
  size_t bytes() const { return bytes_; }
  // Entries of the smallest state (an empty prompt's) the budget holds.
  size_t capacity_entries() const { return state_bytes_ == 0 ? 0 : budget_bytes_ / state_bytes_; }

 private:
  struct Entry {
    std::string prompt;
    std::vector<uint8_t> state;  // like llama-server's server_prompt_cache
  };
  size_t budget_bytes_;
  size_t state_bytes_;
  size_t bytes_per_char_;
  size_t bytes_ = 0;      // of the states stored
  std::list<Entry> lru_;  // front = most recently used
  std::map<std::string, std::list<Entry>::iterator> index_;
  uint64_t evictions_ = 0;
};

// A prefix trie over 16-character chunks of prompts whose nodes are never
// freed, neither on eviction nor at exit: the leak this demo exists to show.
class PrefixTrie {
 public:
  explicit PrefixTrie(size_t node_bytes);
  ~PrefixTrie() = default;  // deliberately leaks every node (see above)
  // Walks `prompt` chunk by chunk, creating the missing nodes (each with a
  // node_bytes payload, written). Returns the number of nodes created.
  __attribute__((noinline)) size_t Insert(const std::string& prompt);
  size_t nodes() const { return nodes_; }
  size_t bytes() const { return nodes_ * node_bytes_; }

 private:
  struct Node {
    std::map<std::string, Node*> children;
    uint8_t* payload = nullptr;  // node_bytes_, never freed
  };
  size_t node_bytes_;
  Node* root_;
  size_t nodes_ = 0;
};

// The single inference thread's body: pops tasks until the queue is
// terminated, answers each through `results`. With --parallel N it has N
// slots, as llama-server: it takes up to N waiting tasks at once, one a slot,
// and works on them together (a batch) before answering any; each slot
// remembers its own previous prompt, whose state goes to the prompt cache
// when the slot takes a new one.
class InferenceLoop {
 public:
  InferenceLoop(const SimOptions& options, TaskQueue* tasks, ResultQueue* results);
  void Run();

 private:
  TaskResult Process(const Task& task, size_t slot);

  SimOptions options_;
  TaskQueue* tasks_;
  ResultQueue* results_;
  PromptCache cache_;
  PrefixTrie* trie_;                           // never deleted: its nodes are the leak
  std::vector<std::string> previous_prompts_;  // per slot
  uint64_t served_ = 0;
};

// Allocates a kWorkBufferBytes working buffer, writes the prompt through it
// and frees it before returning. Returns a checksum so that the work (and the
// allocation) cannot be optimised away.
__attribute__((noinline)) uint64_t EvaluatePrompt(const std::string& prompt);

}  // namespace retain::examples

#endif  // RETAIN_EXAMPLES_LLM_SERVER_SIM_INFERENCE_H_
