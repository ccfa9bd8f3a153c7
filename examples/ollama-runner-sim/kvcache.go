package main

// #include <stdlib.h>
import "C"

// The KV cache of a runner as a trie of prompt chunks, as Ollama's runners
// share cached prefixes between requests. Each node holds the KV entries of
// one chunk of tokens (kvBytesPerToken per token) in C memory. The trie is
// bounded by bytes: beyond its budget the least recently used leaves are
// evicted. A state snapshot (snapshots.go) references the nodes of the prompt
// it was taken after, so an evicted node that a snapshot still references is
// unlinked from the trie (an orphan) and freed when the last snapshot
// referencing it lets go.
//
// The leak (--leak-orphans): a snapshot lets go of its nodes by looking its
// prompt up in the trie instead of through the nodes it holds, so an orphan
// is never found, its reference is never dropped and its KV buffer stays
// for good: the orphaned trie nodes that keep their KV buffers alive.

const (
	charsPerToken = 4
	chunkTokens   = 16 // tokens per trie node
	chunkChars    = chunkTokens * charsPerToken
)

type kvNode struct {
	chunk    string
	parent   *kvNode
	children map[string]*kvNode
	kv       cBlock
	refs     int    // snapshots that hold this node
	lastUsed uint64 // the trie's clock when a prompt last went through it
	orphan   bool   // evicted from the trie while referenced
}

type kvTrie struct {
	root            *kvNode
	kvBytesPerToken int
	budget          int // bytes of KV the trie keeps
	leakOrphans     bool
	clock           uint64
	bytes           int // KV bytes of the nodes in the trie
	nodes           int
	orphanBytes     int // KV bytes of orphans, as far as the trie knows
	orphans         int
	evictions       int
}

func newKVTrie(kvBytesPerToken, budget int, leakOrphans bool) *kvTrie {
	return &kvTrie{
		root:            &kvNode{children: map[string]*kvNode{}},
		kvBytesPerToken: kvBytesPerToken,
		budget:          budget,
		leakOrphans:     leakOrphans,
	}
}

// tokenCount is the number of tokens of a piece of prompt.
func tokenCount(text string) int { return (len(text) + charsPerToken - 1) / charsPerToken }

// chunks splits a prompt into the trie's chunks (the last one may be short).
func chunks(prompt string) []string {
	var out []string
	for len(prompt) > chunkChars {
		out = append(out, prompt[:chunkChars])
		prompt = prompt[chunkChars:]
	}
	if prompt != "" {
		out = append(out, prompt)
	}
	return out
}

// newKVNode computes a chunk's KV entries: a C buffer of kvBytesPerToken per
// token, written. The owner of the trie's memory.
//
//go:noinline
func newKVNode(parent *kvNode, chunk string, kvBytesPerToken int) *kvNode {
	size := tokenCount(chunk) * kvBytesPerToken
	node := &kvNode{chunk: chunk, parent: parent, children: map[string]*kvNode{}}
	node.kv = cBlock{ptr: C.malloc(C.size_t(size)), size: size}
	node.kv.fill(byte(len(chunk)))
	return node
}

// insert walks the prompt's chunks from the root, reusing the cached prefix
// and computing the rest; returns the prompt's nodes in order and how many
// were new. Then evicts down to the budget.
func (t *kvTrie) insert(prompt string) (path []*kvNode, created int) {
	t.clock++
	node := t.root
	for _, chunk := range chunks(prompt) {
		child, ok := node.children[chunk]
		if !ok {
			child = newKVNode(node, chunk, t.kvBytesPerToken)
			node.children[chunk] = child
			t.bytes += child.kv.size
			t.nodes++
			created++
		}
		child.lastUsed = t.clock
		path = append(path, child)
		node = child
	}
	t.evictToBudget()
	return path, created
}

// evictToBudget evicts least recently used leaves (never the prompt just
// inserted, whose nodes carry the current clock) until the trie fits.
func (t *kvTrie) evictToBudget() {
	for t.bytes > t.budget {
		victim := t.lruLeaf(t.root, nil)
		if victim == nil {
			return
		}
		t.evict(victim)
	}
}

func (t *kvTrie) lruLeaf(node, best *kvNode) *kvNode {
	for _, child := range node.children {
		if len(child.children) == 0 {
			if child.lastUsed < t.clock && (best == nil || child.lastUsed < best.lastUsed) {
				best = child
			}
			continue
		}
		best = t.lruLeaf(child, best)
	}
	return best
}

func (t *kvTrie) evict(node *kvNode) {
	delete(node.parent.children, node.chunk)
	t.bytes -= node.kv.size
	t.nodes--
	t.evictions++
	if node.refs > 0 {
		node.orphan = true
		t.orphans++
		t.orphanBytes += node.kv.size
		return
	}
	node.kv.release()
}

// hold and release are a snapshot's references to its prompt's nodes.
func (t *kvTrie) hold(path []*kvNode) {
	for _, node := range path {
		node.refs++
	}
}

func (t *kvTrie) release(prompt string, path []*kvNode) {
	if t.leakOrphans {
		// The bug: look the prompt up again. Nodes evicted meanwhile are
		// not in the trie any more, so they keep this reference forever.
		path = t.lookup(prompt)
	}
	for _, node := range path {
		node.refs--
		if node.refs == 0 && node.orphan {
			t.orphans--
			t.orphanBytes -= node.kv.size
			node.kv.release()
		}
	}
}

// lookup returns the nodes of the prompt's longest cached prefix.
func (t *kvTrie) lookup(prompt string) []*kvNode {
	var path []*kvNode
	node := t.root
	for _, chunk := range chunks(prompt) {
		child, ok := node.children[chunk]
		if !ok {
			break
		}
		path = append(path, child)
		node = child
	}
	return path
}

// freeAll drops every node in the trie, as a runner does when it unloads its
// model. Snapshots must have let go first (Server.freeAll); orphans the trie
// no longer knows of are not its to free.
func (t *kvTrie) freeAll() {
	var drop func(node *kvNode)
	drop = func(node *kvNode) {
		for _, child := range node.children {
			drop(child)
			child.kv.release()
		}
	}
	drop(t.root)
	t.root = &kvNode{children: map[string]*kvNode{}}
	t.bytes = 0
	t.nodes = 0
}
