package main

// #include <stdlib.h>
import "C"

// The runner's HTTP side and its one inference loop, as in Ollama's runners:
// each POST /completion becomes a sequence handed to the loop (Server.run,
// one goroutine), which owns the model state (the KV trie, the snapshot
// cache) and streams the answer back to the handler as it goes; the handler
// writes it as newline-delimited JSON. All memory a request keeps is
// allocated by the loop's goroutine, never by the one serving the
// connection.

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
)

type options struct {
	kvBytesPerToken int
	trieBytes       int
	stateBytes      int
	cacheBytes      int
	leakOrphans     bool
	streamChunks    int
	scratchBytes    int
}

type sequence struct {
	requestID string
	prompt    string
	pieces    chan string // the answer, piece by piece; closed at the end
	summary   chan summary
}

type summary struct {
	Tokens      int `json:"tokens"`
	NewNodes    int `json:"new_nodes"`
	TrieNodes   int `json:"trie_nodes"`
	Orphans     int `json:"orphans"`
	Snapshots   int `json:"snapshots"`
	SnapshotMiB int `json:"snapshot_mib"`
}

type Server struct {
	opts      options
	sequences chan *sequence
	mu        sync.Mutex // guards the model state for freeAll from a handler
	trie      *kvTrie
	snapshots *snapshotCache
	served    int
}

func newServer(opts options) *Server {
	trie := newKVTrie(opts.kvBytesPerToken, opts.trieBytes, opts.leakOrphans)
	return &Server{
		opts:      opts,
		sequences: make(chan *sequence),
		trie:      trie,
		snapshots: newSnapshotCache(trie, opts.stateBytes, opts.cacheBytes),
	}
}

// run is the inference loop: one sequence at a time, until the channel closes.
func (s *Server) run() {
	for seq := range s.sequences {
		s.process(seq)
	}
}

func (s *Server) process(seq *sequence) {
	s.mu.Lock()
	defer s.mu.Unlock()
	path, created := s.trie.insert(seq.prompt)
	evaluate(seq.prompt, s.opts.scratchBytes)
	for i := 0; i < s.opts.streamChunks; i++ {
		seq.pieces <- fmt.Sprintf("token%d ", i)
	}
	close(seq.pieces)
	s.snapshots.save(seq.prompt, path)
	s.served++
	sum := summary{
		Tokens: tokenCount(seq.prompt), NewNodes: created, TrieNodes: s.trie.nodes,
		Orphans: s.trie.orphans, Snapshots: len(s.snapshots.entries),
		SnapshotMiB: s.snapshots.bytes >> 20,
	}
	fmt.Fprintf(os.Stderr, "ollama-runner-sim: request %d id=%s prompt=%d chars | trie: +%d nodes, "+
		"%d nodes, %d orphans | snapshots: %d, %d MiB, %d evicted\n",
		s.served, seq.requestID, len(seq.prompt), created, s.trie.nodes, s.trie.orphans,
		len(s.snapshots.entries), s.snapshots.bytes>>20, s.snapshots.evictions)
	seq.summary <- sum
}

// evaluate runs the prompt through the model: a scratch buffer, written and
// freed before it returns (nothing kept).
//
//go:noinline
func evaluate(prompt string, scratchBytes int) {
	if scratchBytes == 0 {
		return
	}
	scratch := cBlock{ptr: C.malloc(C.size_t(scratchBytes)), size: scratchBytes}
	scratch.fill(byte(len(prompt)))
	scratch.release()
}

// freeAll drops the whole model state (snapshots first: they hold trie nodes).
func (s *Server) freeAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.snapshots.freeAll()
	s.trie.freeAll()
}

type completionRequest struct {
	Prompt *string `json:"prompt"`
	Stream *bool   `json:"stream"`
}

func (s *Server) handleCompletion(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(w, `{"error":"POST only"}`, http.StatusMethodNotAllowed)
		return
	}
	var req completionRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Prompt == nil {
		http.Error(w, `{"error":"body must be {\"prompt\": \"...\"}"}`, http.StatusBadRequest)
		return
	}
	stream := req.Stream == nil || *req.Stream // Ollama's runners stream by default
	seq := &sequence{requestID: r.Header.Get("X-Request-Id"), prompt: *req.Prompt,
		pieces: make(chan string), summary: make(chan summary, 1)}
	select {
	case s.sequences <- seq:
	case <-r.Context().Done():
		return
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	flusher, _ := w.(http.Flusher)
	var content strings.Builder
	encoder := json.NewEncoder(w)
	for piece := range seq.pieces {
		if stream {
			encoder.Encode(map[string]any{"content": piece, "stop": false})
			if flusher != nil {
				flusher.Flush()
			}
		} else {
			content.WriteString(piece)
		}
	}
	sum := <-seq.summary
	encoder.Encode(map[string]any{"content": content.String(), "stop": true, "summary": sum})
}

func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintln(w, `{"status":"ok"}`)
}

// POST /unload: the runner drops its model state (freeAll), as when Ollama
// unloads a model. Orphans of the leak stay: nothing references them any more.
func (s *Server) handleUnload(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(w, `{"error":"POST only"}`, http.StatusMethodNotAllowed)
		return
	}
	s.freeAll()
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintln(w, `{"status":"unloaded"}`)
}
