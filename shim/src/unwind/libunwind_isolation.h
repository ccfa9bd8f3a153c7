// libunwind_isolation: the shim's private libunwind without file descriptors.
//
// libunwind validates memory it is unsure of (frames without unwind tables,
// signal frames, RETAIN_UNWIND=libunwind's fallbacks) by write()ing a byte
// of it into a pipe it creates at initialisation, and re-creates the pipe
// when a read from it fails. In a process under the shim that pipe would be
// the host's fds 3 and 4, seen by its children (pass_fds checks), closed by
// its closerange(), and then written to after the host reused the numbers.
//
// IsolateLibunwind rewrites the private copy's imports of pipe, pipe2, read,
// write, close and syscall (Debian's build writes with syscall(SYS_write))
// (unwind/import_redirect.h) so that its pipe is two numbers no kernel descriptor
// can have, and a "write" to it checks the address with process_vm_readv on
// the process itself instead: same answer, no fd. Every other call goes
// where it went before. Under a seccomp filter (base/syscall_filter.h) its
// validations, by that write, mincore or msync (also rewritten), answer
// "not readable" without a system call: the filter may kill the process
// for any of them.
//
// Call once, right after dlopen and before any call into libunwind (its
// first use creates the pipe). Allocates nothing.
#ifndef RETAIN_SHIM_SRC_UNWIND_LIBUNWIND_ISOLATION_H_
#define RETAIN_SHIM_SRC_UNWIND_LIBUNWIND_ISOLATION_H_

#include <cstdint>

namespace retain::shim {

// False when libunwind's imports could not be rewritten: it must not be used.
bool IsolateLibunwind(void* libunwind_handle);

// Addresses libunwind asked to validate (for ShimHealth and tests).
uint64_t LibunwindValidations();

}  // namespace retain::shim

#endif  // RETAIN_SHIM_SRC_UNWIND_LIBUNWIND_ISOLATION_H_
