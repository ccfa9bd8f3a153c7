package main

// #include <stdlib.h>
import "C"

// The state snapshot cache: after each request the runner saves the model's
// state for its prompt (a recurrent state, or a copy of the KV cache), so a
// later request with the same prefix resumes from it. Bounded by bytes with
// LRU eviction: by design it fills up to its budget and stays there (a
// plateau, not a leak). Each snapshot holds the trie nodes of its prompt
// (kvcache.go) until it is evicted.

type stateSnapshot struct {
	prompt   string
	path     []*kvNode
	state    cBlock
	lastUsed uint64
}

type snapshotCache struct {
	trie       *kvTrie
	stateBytes int
	budget     int
	entries    map[string]*stateSnapshot
	clock      uint64
	bytes      int
	evictions  int
}

func newSnapshotCache(trie *kvTrie, stateBytes, budget int) *snapshotCache {
	return &snapshotCache{trie: trie, stateBytes: stateBytes, budget: budget,
		entries: map[string]*stateSnapshot{}}
}

// save keeps the state after `prompt` (whose trie nodes are `path`),
// evicting the least recently used snapshots to stay within the budget. A
// prompt already saved is only touched. The owner of the cache's memory.
//
//go:noinline
func (c *snapshotCache) save(prompt string, path []*kvNode) {
	c.clock++
	if entry, ok := c.entries[prompt]; ok {
		entry.lastUsed = c.clock
		return
	}
	if c.stateBytes > c.budget {
		return // the cache is off (or too small for one state)
	}
	for c.bytes+c.stateBytes > c.budget {
		c.evictOldest()
	}
	entry := &stateSnapshot{prompt: prompt, path: path, lastUsed: c.clock}
	entry.state = cBlock{ptr: C.malloc(C.size_t(c.stateBytes)), size: c.stateBytes}
	entry.state.fill(1)
	c.trie.hold(path)
	c.entries[prompt] = entry
	c.bytes += c.stateBytes
}

func (c *snapshotCache) evictOldest() {
	var oldest *stateSnapshot
	for _, entry := range c.entries {
		if oldest == nil || entry.lastUsed < oldest.lastUsed {
			oldest = entry
		}
	}
	c.drop(oldest)
	c.evictions++
}

func (c *snapshotCache) drop(entry *stateSnapshot) {
	delete(c.entries, entry.prompt)
	c.trie.release(entry.prompt, entry.path)
	entry.state.release()
	c.bytes -= entry.state.size
}

// freeAll drops every snapshot (the runner unloading its model).
func (c *snapshotCache) freeAll() {
	for _, entry := range c.entries {
		c.drop(entry)
	}
}
