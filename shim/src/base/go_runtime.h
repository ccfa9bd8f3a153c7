// go_runtime: whether the program is a Go program (built with cgo, so it
// loads libc and takes LD_PRELOAD), read once at start.
//
// A Go executable carries the Go toolchain's build-id note (owner "Go",
// type 4, section .note.go.buildid) in a PT_NOTE segment, so the loaded
// image says it without opening a file. Only the main executable is looked
// at: a Go library loaded into a C program (-buildmode=c-shared) leaves the
// asynchronous signals to the program, as the Go runtime documents.
//
// Async-signal-safe after DetectGoProgram(); never allocates.
#ifndef RETAIN_SHIM_SRC_BASE_GO_RUNTIME_H_
#define RETAIN_SHIM_SRC_BASE_GO_RUNTIME_H_

namespace retain::shim {

// Looks for the note in the main executable. Call once from the shim's
// initialisation (it walks the loaded objects with dl_iterate_phdr).
void DetectGoProgram();

// True when the main executable is a Go program.
bool ProgramIsGo();

}  // namespace retain::shim

#endif  // RETAIN_SHIM_SRC_BASE_GO_RUNTIME_H_
