// inference: see inference.h. Everything below TaskQueue/ResultQueue runs on
// the one inference thread.
#include "inference.h"

#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <utility>

namespace retain::examples {
namespace {

// Tells the compiler the memory at `p` escapes, so a new/delete pair around
// it is not elided (C++14 allows eliding them).
inline void Escape(const void* p) { asm volatile("" : : "r"(p) : "memory"); }

// Fills `n` bytes at `p` with a pattern derived from `seed`: real pages,
// counted in RSS.
void Fill(uint8_t* p, size_t n, uint64_t seed) {
  std::memset(p, static_cast<int>(seed & 0x7f) | 1, n);
  Escape(p);
}

uint64_t Hash(const std::string& s) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

double ToMiB(size_t bytes) { return static_cast<double>(bytes) / static_cast<double>(kMiB); }

}  // namespace

void TaskQueue::Post(Task task) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    tasks_.push_back(std::move(task));
  }
  cv_.notify_one();
}

std::optional<Task> TaskQueue::Pop() {
  std::unique_lock<std::mutex> lock(mutex_);
  cv_.wait(lock, [&] { return terminated_ || !tasks_.empty(); });
  if (tasks_.empty()) return std::nullopt;  // terminated and drained
  Task task = std::move(tasks_.front());
  tasks_.pop_front();
  return task;
}

std::optional<Task> TaskQueue::TryPop() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (tasks_.empty()) return std::nullopt;
  Task task = std::move(tasks_.front());
  tasks_.pop_front();
  return task;
}

void TaskQueue::Terminate() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    terminated_ = true;
  }
  cv_.notify_all();
}

void ResultQueue::Send(TaskResult result) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    uint64_t id = result.id;
    results_.emplace(id, std::move(result));
  }
  cv_.notify_all();
}

TaskResult ResultQueue::Wait(uint64_t id) {
  std::unique_lock<std::mutex> lock(mutex_);
  cv_.wait(lock, [&] { return results_.count(id) != 0; });
  auto it = results_.find(id);
  TaskResult result = std::move(it->second);
  results_.erase(it);
  return result;
}

uint64_t EvaluatePrompt(const std::string& prompt) {
  auto* work = new uint8_t[kWorkBufferBytes];
  Fill(work, kWorkBufferBytes, Hash(prompt));
  for (size_t i = 0; i < prompt.size(); ++i) {
    work[(i * 4099) % kWorkBufferBytes] ^= static_cast<uint8_t>(prompt[i]);
  }
  uint64_t sum = 0;
  for (size_t i = 0; i < kWorkBufferBytes; i += 4096) sum = sum * 31 + work[i];
  delete[] work;
  return sum;
}

PromptCache::PromptCache(size_t budget_bytes, size_t state_bytes, size_t bytes_per_char)
    : budget_bytes_(budget_bytes), state_bytes_(state_bytes), bytes_per_char_(bytes_per_char) {}

bool PromptCache::Lookup(const std::string& prompt) {
  auto it = index_.find(prompt);
  if (it == index_.end()) return false;
  lru_.splice(lru_.begin(), lru_, it->second);
  return true;
}

void PromptCache::Save(const std::string& prompt) {
  const size_t size = state_bytes_ + bytes_per_char_ * prompt.size();
  if (size == 0 || size > budget_bytes_) return;  // disabled, or the state exceeds the budget
  if (Lookup(prompt)) return;
  while (bytes_ + size > budget_bytes_) Evict();
  lru_.emplace_front();
  Entry& entry = lru_.front();
  entry.prompt = prompt;
  entry.state.resize(size);  // as server_prompt_cache::alloc
  bytes_ += size;
  Fill(entry.state.data(), entry.state.size(), Hash(prompt));
  index_[prompt] = lru_.begin();
}

bool PromptCache::Evict() {
  if (lru_.empty()) return false;
  index_.erase(lru_.back().prompt);
  bytes_ -= lru_.back().state.size();
  lru_.pop_back();  // frees the state
  ++evictions_;
  return true;
}

PrefixTrie::PrefixTrie(size_t node_bytes) : node_bytes_(node_bytes), root_(new Node) {}

size_t PrefixTrie::Insert(const std::string& prompt) {
  size_t created = 0;
  Node* node = root_;
  for (size_t at = 0; at < prompt.size(); at += kTrieChunkChars) {
    std::string chunk = prompt.substr(at, kTrieChunkChars);
    Node*& child = node->children[chunk];
    if (child == nullptr) {
      child = new Node;
      child->payload = new uint8_t[node_bytes_];
      Fill(child->payload, node_bytes_, at);
      ++created;
    }
    node = child;
  }
  nodes_ += created;
  return created;
}

InferenceLoop::InferenceLoop(const SimOptions& options, TaskQueue* tasks, ResultQueue* results)
    : options_(options),
      tasks_(tasks),
      results_(results),
      cache_(options.cache_bytes, options.state_bytes, options.state_bytes_per_char),
      trie_(options.leak_trie ? new PrefixTrie(options.trie_node_bytes) : nullptr) {}

void InferenceLoop::Run() {
  previous_prompts_.resize(options_.parallel);
  std::vector<Task> batch;
  std::vector<TaskResult> answers;
  while (std::optional<Task> task = tasks_->Pop()) {
    batch.clear();
    batch.push_back(std::move(*task));
    while (batch.size() < options_.parallel) {
      std::optional<Task> more = tasks_->TryPop();
      if (!more) break;
      batch.push_back(std::move(*more));
    }
    answers.clear();
    for (size_t slot = 0; slot < batch.size(); ++slot) {
      answers.push_back(Process(batch[slot], slot));
    }
    for (TaskResult& answer : answers) results_->Send(std::move(answer));
  }
}

TaskResult InferenceLoop::Process(const Task& task, size_t slot) {
  ++served_;
  // Like llama-server: before a slot takes a new prompt, the slot's previous
  // prompt's state goes to the prompt cache (unless it is there already).
  std::string& previous_prompt = previous_prompts_[slot];
  bool hit = cache_.Lookup(task.prompt);
  uint64_t evictions_before = cache_.evictions();
  if (!previous_prompt.empty() && previous_prompt != task.prompt) cache_.Save(previous_prompt);
  uint64_t checksum = EvaluatePrompt(task.prompt);
  size_t trie_created = trie_ != nullptr ? trie_->Insert(task.prompt) : 0;
  previous_prompt = task.prompt;

  TaskResult result;
  result.id = task.id;
  result.tokens = (task.prompt.size() + 3) / 4;  // ~4 characters per token
  result.cache_entries = cache_.entries();
  char content[128];
  std::snprintf(content, sizeof content, "evaluated %zu tokens (checksum %016" PRIx64 ")",
                result.tokens, checksum);
  result.content = content;

  std::fprintf(stderr,
               "llm-server-sim: request %" PRIu64
               " id=%s prompt=%zu chars%s | cache: %zu/%zu "
               "entries, %.1f MiB, %" PRIu64 " evicted",
               served_, task.request_id.empty() ? "-" : task.request_id.c_str(), task.prompt.size(),
               hit ? " (cache hit)" : "", cache_.entries(), cache_.capacity_entries(),
               ToMiB(cache_.bytes()), cache_.evictions() - evictions_before);
  if (trie_ != nullptr) {
    std::fprintf(stderr, " | trie: +%zu nodes (+%zu bytes), %zu nodes, %.1f MiB total",
                 trie_created, trie_created * options_.trie_node_bytes, trie_->nodes(),
                 ToMiB(trie_->bytes()));
  }
  std::fprintf(stderr, "\n");
  return result;
}

}  // namespace retain::examples
