// go_runtime: see unwind/go_runtime.h.
#include "unwind/go_runtime.h"

#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "base/large_static.h"
#include "base/own_fds.h"

namespace retain::shim {
namespace go_runtime_internal {
std::atomic<int> g_module_count;
}  // namespace go_runtime_internal

namespace {

using go_runtime_internal::g_module_count;

// cmd/link's build-id note: owner "Go" (padded to 4 bytes), type 4.
constexpr uint32_t kGoBuildIdNote = 4;

RETAIN_LARGE_STATIC GoModule g_modules[kMaxGoModules];

// ---- asmcgocall's code ------------------------------------------------------
//
// The decoder matches the few instructions around asmcgocall's two C calls
// byte for byte, so a runtime whose code differs is recognised as unknown,
// never guessed at. Go 1.19.8's code (objdump):
//
//   mov  %rdi,0x30(%rsp)     48 89 7c 24 30      save g
//   mov  0x8(%rdi),%rdi      48 8b 7f 08         g.stack.hi
//   sub  %rdx,%rdi           48 29 d7            - the goroutine's SP
//   mov  %rdi,0x28(%rsp)     48 89 7c 24 28      save the depth
//   mov  %rbx,%rdi           48 89 df            the C function's argument
//   mov  %rbx,%rcx           48 89 d9            (Win64's)
//   call *%rax               ff d0
//   ...
//   movq $0x0,0x30(%rsp)     48 c7 44 24 30 00 00 00 00   no g (thread's stack)
//   mov  %rdx,0x28(%rsp)     48 89 54 24 28      save the caller's SP
//   mov  %rbx,%rdi / mov %rbx,%rcx
//   call *%rax               ff d0
//
// The runtime's current source keeps g at 8(SP) and the depth (or SP) at
// 0(SP) (`48 89 3c 24`, `48 89 14 24`), and calls
// asmcgocall_landingpad (`e8 rel32`), which on Linux only moves the argument
// and jumps to the C function (`48 89 df ff e0`): the C function returns
// straight into asmcgocall, as with `call *%rax`.

constexpr int kAny = -1;

template <size_t N>
bool Matches(const uint8_t* p, const uint8_t* end, const int (&pattern)[N]) {
  if (end - p < static_cast<ptrdiff_t>(N)) return false;
  for (size_t i = 0; i < N; ++i) {
    if (pattern[i] != kAny && p[i] != pattern[i]) return false;
  }
  return true;
}

struct CallSite {
  uint32_t g_slot;
  uint32_t depth_slot;
  uintptr_t return_address;
};

// After the two slot stores: the argument moves, then the call. Returns the
// call's return address, or 0.
uintptr_t MatchCall(const uint8_t* p, const uint8_t* begin, const uint8_t* end, uintptr_t address,
                    uintptr_t landingpad_address) {
  static constexpr int kMoveToRdi[] = {0x48, 0x89, 0xdf};
  static constexpr int kMoveToRcx[] = {0x48, 0x89, 0xd9};
  static constexpr int kCallRax[] = {0xff, 0xd0};
  static constexpr int kCallNear[] = {0xe8, kAny, kAny, kAny, kAny};
  for (int moves = 0; moves < 2; ++moves) {
    if (Matches(p, end, kMoveToRdi) || Matches(p, end, kMoveToRcx)) p += 3;
  }
  if (Matches(p, end, kCallRax)) return address + static_cast<uintptr_t>(p + 2 - begin);
  if (landingpad_address != 0 && Matches(p, end, kCallNear)) {
    int32_t displacement;
    memcpy(&displacement, p + 1, sizeof(displacement));
    const uintptr_t next = address + static_cast<uintptr_t>(p + 5 - begin);
    if (next + static_cast<intptr_t>(displacement) == landingpad_address) return next;
  }
  return 0;
}

// The depth store: `mov %<reg>,disp8(%rsp)` or `mov %<reg>,(%rsp)`, with
// `modrm8` / `modrm0` the ModRM bytes of the two forms. Returns its length
// (0: no match) and the slot.
int MatchSlotStore(const uint8_t* p, const uint8_t* end, int modrm8, int modrm0, uint32_t* slot) {
  const int with_displacement[] = {0x48, 0x89, modrm8, 0x24, kAny};
  const int without[] = {0x48, 0x89, modrm0, 0x24};
  if (Matches(p, end, with_displacement)) {
    *slot = p[4];
    return 5;
  }
  if (Matches(p, end, without)) {
    *slot = 0;
    return 4;
  }
  return 0;
}

// The call made from a goroutine: g saved, then the depth. Returns the
// number found (the decoder wants exactly one).
int FindGoroutineCall(const uint8_t* begin, const uint8_t* end, uintptr_t address,
                      uintptr_t landingpad_address, CallSite* site) {
  static constexpr int kSaveG[] = {0x48, 0x89, 0x7c, 0x24, kAny,  // mov %rdi,disp8(%rsp)
                                   0x48, 0x8b, 0x7f, 0x08,        // mov 0x8(%rdi),%rdi
                                   0x48, 0x29, 0xd7};             // sub %rdx,%rdi
  int found = 0;
  for (const uint8_t* p = begin; p < end; ++p) {
    if (!Matches(p, end, kSaveG)) continue;
    CallSite candidate{p[4], 0, 0};
    const uint8_t* q = p + sizeof(kSaveG) / sizeof(kSaveG[0]);
    const int length = MatchSlotStore(q, end, 0x7c, 0x3c, &candidate.depth_slot);
    if (length == 0) continue;
    candidate.return_address = MatchCall(q + length, begin, end, address, landingpad_address);
    if (candidate.return_address == 0) continue;
    *site = candidate;
    ++found;
  }
  return found;
}

// The call made on the thread's own stack: no g (0 stored), the caller's SP.
int FindSystemStackCall(const uint8_t* begin, const uint8_t* end, uintptr_t address,
                        uintptr_t landingpad_address, CallSite* site) {
  static constexpr int kNoG[] = {0x48, 0xc7, 0x44, 0x24, kAny, 0, 0, 0, 0};  // movq $0,disp8(%rsp)
  int found = 0;
  for (const uint8_t* p = begin; p < end; ++p) {
    if (!Matches(p, end, kNoG)) continue;
    CallSite candidate{p[4], 0, 0};
    const uint8_t* q = p + sizeof(kNoG) / sizeof(kNoG[0]);
    // mov %rdx,disp8(%rsp) / mov %rdx,(%rsp)
    const int length = MatchSlotStore(q, end, 0x54, 0x14, &candidate.depth_slot);
    if (length == 0) continue;
    candidate.return_address = MatchCall(q + length, begin, end, address, landingpad_address);
    if (candidate.return_address == 0) continue;
    *site = candidate;
    ++found;
  }
  return found;
}

// ---- The module file's symbols ------------------------------------------------

// A runtime function a walk needs, by its names: the ABI0 body first.
struct WantedFunction {
  const char* abi0_name;
  const char* plain_name;
  CodeRange GoModule::*field;  // nullptr: asmcgocall_landingpad, kept aside
};

constexpr WantedFunction kWanted[] = {
    {"runtime.asmcgocall.abi0", "runtime.asmcgocall", &GoModule::asmcgocall},
    {"runtime.cgocallback.abi0", "runtime.cgocallback", &GoModule::cgocallback},
    {"runtime.systemstack.abi0", "runtime.systemstack", &GoModule::systemstack},
    {"runtime.mcall.abi0", "runtime.mcall", &GoModule::mcall},
    {"runtime.morestack.abi0", "runtime.morestack", &GoModule::morestack},
    {"runtime.goexit.abi0", "runtime.goexit", &GoModule::goexit},
    {"runtime.mstart.abi0", "runtime.mstart", &GoModule::mstart},
    {"runtime.rt0_go.abi0", "runtime.rt0_go", &GoModule::rt0_go},
    {"runtime.asmcgocall_landingpad.abi0", "runtime.asmcgocall_landingpad", nullptr},
};
constexpr size_t kWantedCount = sizeof(kWanted) / sizeof(kWanted[0]);

struct Found {
  CodeRange abi0[kWantedCount];
  CodeRange plain[kWantedCount];
};

// Fills `found` from the ELF file mapped at [image, image + size): every
// offset and index is checked against the mapping before it is used.
bool ReadSymbols(const uint8_t* image, size_t size, uintptr_t load_bias, Found* found) {
  if (size < sizeof(Elf64_Ehdr)) return false;
  Elf64_Ehdr ehdr;
  memcpy(&ehdr, image, sizeof(ehdr));
  if (memcmp(ehdr.e_ident, ELFMAG, SELFMAG) != 0 || ehdr.e_ident[EI_CLASS] != ELFCLASS64 ||
      ehdr.e_shentsize != sizeof(Elf64_Shdr) || ehdr.e_shoff > size ||
      ehdr.e_shnum > (size - ehdr.e_shoff) / sizeof(Elf64_Shdr)) {
    return false;
  }
  auto section = [&](size_t index) {
    Elf64_Shdr shdr;
    memcpy(&shdr, image + ehdr.e_shoff + index * sizeof(Elf64_Shdr), sizeof(shdr));
    return shdr;
  };
  for (size_t i = 0; i < ehdr.e_shnum; ++i) {
    const Elf64_Shdr symtab = section(i);
    if (symtab.sh_type != SHT_SYMTAB || symtab.sh_entsize != sizeof(Elf64_Sym)) continue;
    if (symtab.sh_link >= ehdr.e_shnum) return false;
    const Elf64_Shdr strtab = section(symtab.sh_link);
    if (symtab.sh_offset > size || symtab.sh_size > size - symtab.sh_offset ||
        strtab.sh_offset > size || strtab.sh_size > size - strtab.sh_offset) {
      return false;
    }
    const char* strings = reinterpret_cast<const char*>(image + strtab.sh_offset);
    const size_t count = symtab.sh_size / sizeof(Elf64_Sym);
    for (size_t s = 0; s < count; ++s) {
      Elf64_Sym sym;
      memcpy(&sym, image + symtab.sh_offset + s * sizeof(Elf64_Sym), sizeof(sym));
      if (ELF64_ST_TYPE(sym.st_info) != STT_FUNC || sym.st_size == 0 ||
          sym.st_name >= strtab.sh_size) {
        continue;
      }
      const char* name = strings + sym.st_name;
      const size_t room = strtab.sh_size - sym.st_name;
      if (strnlen(name, room) == room) continue;  // not terminated inside the table
      if (name[0] != 'r') continue;               // every wanted name starts "runtime."
      for (size_t w = 0; w < kWantedCount; ++w) {
        CodeRange* slot = nullptr;
        if (strcmp(name, kWanted[w].abi0_name) == 0) slot = &found->abi0[w];
        if (strcmp(name, kWanted[w].plain_name) == 0) slot = &found->plain[w];
        if (slot != nullptr)
          *slot = {load_bias + sym.st_value, load_bias + sym.st_value + sym.st_size};
      }
    }
    return true;
  }
  return false;  // stripped
}

bool ReadGoModuleFile(const char* path, uintptr_t load_bias, GoModule* module) {
  const int handle = ShimOpen(path, O_RDONLY);
  if (handle < 0) return false;
  void* image = MAP_FAILED;
  size_t size = 0;
  {
    ShimFdUse use(handle);
    struct stat status;
    if (use.fd() >= 0 && syscall(SYS_fstat, use.fd(), &status) == 0 && S_ISREG(status.st_mode) &&
        status.st_size > 0) {
      size = static_cast<size_t>(status.st_size);
      // A raw system call: the shim's own mapping is not the host's.
      const long mapped = syscall(SYS_mmap, nullptr, size, PROT_READ, MAP_PRIVATE, use.fd(), 0);
      if (mapped != -1) image = reinterpret_cast<void*>(mapped);
    }
  }
  ShimFdClose(handle);
  if (image == MAP_FAILED) return false;
  Found found{};
  const bool read = ReadSymbols(static_cast<const uint8_t*>(image), size, load_bias, &found);
  syscall(SYS_munmap, image, size);
  if (!read) return false;

  CodeRange landingpad;
  for (size_t w = 0; w < kWantedCount; ++w) {
    const CodeRange chosen = found.abi0[w].begin != 0 ? found.abi0[w] : found.plain[w];
    // Code outside the module's text is no code of this module: ignored.
    if (!module->text.Contains(chosen.begin) || chosen.end > module->text.end) continue;
    if (kWanted[w].field == nullptr) {
      landingpad = chosen;
    } else {
      module->*kWanted[w].field = chosen;
    }
  }
  const CodeRange& asmcgocall = module->asmcgocall;
  if (asmcgocall.begin == asmcgocall.end) return false;
  // The code is read where it is loaded (text is readable); its size is
  // bounded: asmcgocall is a few dozen instructions.
  constexpr size_t kMaxCode = 1024;
  const size_t size_of_code = asmcgocall.end - asmcgocall.begin;
  const size_t landingpad_size = landingpad.end - landingpad.begin;
  if (size_of_code <= kMaxCode && landingpad_size <= kMaxCode) {
    DecodeAsmcgocall(
        reinterpret_cast<const uint8_t*>(asmcgocall.begin), size_of_code, asmcgocall.begin,
        landingpad_size != 0 ? reinterpret_cast<const uint8_t*>(landingpad.begin) : nullptr,
        landingpad_size, landingpad.begin, module);
  }
  return true;
}

}  // namespace

bool HasGoNote(const void* program_headers, int count, uintptr_t load_bias) {
  const auto* phdrs = static_cast<const ElfW(Phdr)*>(program_headers);
  for (int i = 0; i < count; ++i) {
    const ElfW(Phdr)& phdr = phdrs[i];
    if (phdr.p_type != PT_NOTE) continue;
    const char* p = reinterpret_cast<const char*>(load_bias + phdr.p_vaddr);
    const char* end = p + phdr.p_memsz;
    while (p + sizeof(ElfW(Nhdr)) <= end) {
      ElfW(Nhdr) note;
      memcpy(&note, p, sizeof(note));
      const size_t name_size = (note.n_namesz + 3) & ~size_t{3};
      const size_t desc_size = (note.n_descsz + 3) & ~size_t{3};
      const char* name = p + sizeof(ElfW(Nhdr));
      if (name_size > static_cast<size_t>(end - name) ||
          desc_size > static_cast<size_t>(end - name) - name_size) {
        break;
      }
      if (note.n_type == kGoBuildIdNote && (note.n_namesz == 3 || note.n_namesz == 4) &&
          memcmp(name, "Go", 3) == 0) {
        return true;
      }
      p = name + name_size + desc_size;
    }
  }
  return false;
}

namespace {

std::atomic<bool> g_program_is_go;

// dl_iterate_phdr visits the main executable first.
int VisitMainProgram(dl_phdr_info* info, size_t, void* found) {
  *static_cast<bool*>(found) = HasGoNote(info->dlpi_phdr, info->dlpi_phnum, info->dlpi_addr);
  return 1;  // the first object only
}

}  // namespace

void DetectGoProgram() {
  bool found = false;
  dl_iterate_phdr(VisitMainProgram, &found);
  g_program_is_go.store(found, std::memory_order_release);
}

bool ProgramIsGo() { return g_program_is_go.load(std::memory_order_acquire); }

bool DecodeAsmcgocall(const uint8_t* code, size_t size, uintptr_t address,
                      const uint8_t* landingpad, size_t landingpad_size,
                      uintptr_t landingpad_address, GoModule* module) {
  // A landing pad counts only when it is the Linux one: move the argument,
  // jump to the C function (no frame of its own).
  static constexpr int kTailCall[] = {0x48, 0x89, 0xdf, 0xff, 0xe0};
  uintptr_t pad = 0;
  if (landingpad != nullptr && Matches(landingpad, landingpad + landingpad_size, kTailCall)) {
    pad = landingpad_address;
  }
  const uint8_t* end = code + size;
  CallSite goroutine{};
  CallSite system{};
  if (FindGoroutineCall(code, end, address, pad, &goroutine) != 1 ||
      FindSystemStackCall(code, end, address, pad, &system) != 1) {
    return false;
  }
  // Both paths keep g (or 0) and the depth (or SP) in the same two slots.
  if (goroutine.g_slot != system.g_slot || goroutine.depth_slot != system.depth_slot ||
      goroutine.g_slot == goroutine.depth_slot || goroutine.g_slot % 8 != 0 ||
      goroutine.depth_slot % 8 != 0) {
    return false;
  }
  module->cgo_call_return = goroutine.return_address;
  module->cgo_call_return_on_system_stack = system.return_address;
  module->g_slot = goroutine.g_slot;
  module->depth_slot = goroutine.depth_slot;
  return true;
}

bool ReadGoModule(const char* path, uintptr_t load_bias, GoModule* module) {
#if defined(__x86_64__)
  const int saved_errno = errno;
  const bool read = ReadGoModuleFile(path, load_bias, module);
  errno = saved_errno;
  return read;
#else
  (void)path;
  (void)load_bias;
  (void)module;
  return false;
#endif
}

bool RegisterGoModule(const GoModule& module) {
  const int count = g_module_count.load(std::memory_order_relaxed);
  if (count >= kMaxGoModules) return false;
  g_modules[count] = module;
  g_module_count.store(count + 1, std::memory_order_release);
  return true;
}

const GoModule* FindGoModule(uintptr_t address) {
  const int count = g_module_count.load(std::memory_order_acquire);
  for (int i = 0; i < count; ++i) {
    if (g_modules[i].text.Contains(address)) return &g_modules[i];
  }
  return nullptr;
}

void ForgetGoModulesForTest() { g_module_count.store(0, std::memory_order_release); }

}  // namespace retain::shim
