// eh_frame: the unwind rule of one instruction, read from a module's
// .eh_frame_hdr and .eh_frame (DWARF call frame information, x86-64).
//
// Only what a fast stack walk needs is kept: how to find the canonical frame
// address (CFA = rsp or rbp + offset), that the return address is at CFA - 8,
// and where the caller's rbp was saved. Any other layout (a CFA expression,
// rbp kept in another register, a signal frame, an encoding this parser does
// not know) yields kFallback: the caller then unwinds with libunwind, which
// handles everything. Every byte read is checked against the section's
// readable range first, so a corrupt or truncated table gives kFallback,
// never a fault.
//
// Pure function of memory: no state, no locks, no allocation, no system
// calls, no errno changes. Safe from any thread and from hooks. The caller
// keeps the module mapped while it runs (unwind/cfi_unwinder.cc runs it inside a
// dl_iterate_phdr callback, under the loader's lock).
#ifndef RETAIN_SHIM_SRC_UNWIND_EH_FRAME_H_
#define RETAIN_SHIM_SRC_UNWIND_EH_FRAME_H_

#include <cstdint>

namespace retain::shim {

// Where the parser may read: the module's .eh_frame_hdr (PT_GNU_EH_FRAME)
// and the one readable range that must hold it, .eh_frame and every CIE and
// FDE (the PT_LOAD segment containing the header: linkers put .eh_frame_hdr
// and .eh_frame side by side in the read-only segment).
struct EhFrameSection {
  uintptr_t hdr;
  uintptr_t begin;
  uintptr_t end;
};

enum class FrameRuleKind : uint8_t {
  kFallback,   // not expressible here: unwind this stack another way
  kNoFde,      // no FDE covers the address (code without unwind information,
               // such as Go's): also unwound another way
  kOutermost,  // the return address is undefined (_start, clone): the stack ends
  kStandard,   // the rule below applies
};

enum class CfaRegister : uint8_t { kRsp, kRbp };

struct FrameRule {
  FrameRuleKind kind;
  CfaRegister cfa_register;
  bool rbp_saved;      // else the caller's rbp is this frame's rbp
  int64_t cfa_offset;  // CFA = cfa_register + cfa_offset; return address at CFA - 8
  int64_t rbp_offset;  // the caller's rbp is saved at CFA + rbp_offset (if rbp_saved)
};

// The rule in force at instruction address `pc`. For a return address pass
// the address of the call (return address - 1): a call to a noreturn
// function can be a function's last instruction, and its return address
// then belongs to the next function's FDE.
FrameRule FindFrameRule(const EhFrameSection& section, uintptr_t pc);

}  // namespace retain::shim

#endif  // RETAIN_SHIM_SRC_UNWIND_EH_FRAME_H_
