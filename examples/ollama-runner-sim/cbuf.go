package main

// C memory for the KV cache and the state snapshots, as an Ollama runner's
// ggml or MLX backend holds it: allocated through cgo, written (so it is
// resident, not only reserved), freed explicitly. The allocating calls are
// made by the Go functions that own the memory (newKVNode, saveSnapshot),
// so retain names those functions, not these helpers.

// #include <stdlib.h>
// #include <string.h>
//
// // Writes every page of a fresh block, as a backend computing into it does.
// static void fill_block(void* block, size_t size, int value) { memset(block, value, size); }
import "C"

import "unsafe"

// cBlock is one C allocation.
type cBlock struct {
	ptr  unsafe.Pointer
	size int
}

// fill writes every byte of the block.
func (b cBlock) fill(value byte) { C.fill_block(b.ptr, C.size_t(b.size), C.int(value)) }

// release frees the block; a zero block is a no-op.
func (b *cBlock) release() {
	if b.ptr != nil {
		C.free(b.ptr)
		b.ptr = nil
	}
}
