// go_runtime: see base/go_runtime.h.
#include "base/go_runtime.h"

#include <elf.h>
#include <link.h>
#include <string.h>

#include <atomic>
#include <cstdint>

namespace retain::shim {
namespace {

// The note the Go linker writes (cmd/link: ELF_NOTE_GOBUILDID_TAG).
constexpr uint32_t kGoBuildIdNoteType = 4;
constexpr char kGoNoteOwner[] = "Go";

std::atomic<bool> g_program_is_go;

bool SegmentHasGoNote(uintptr_t start, size_t size) {
  uintptr_t cursor = start;
  const uintptr_t end = start + size;
  while (cursor + sizeof(ElfW(Nhdr)) <= end) {
    const auto* note = reinterpret_cast<const ElfW(Nhdr)*>(cursor);
    const uintptr_t name = cursor + sizeof(ElfW(Nhdr));
    const uintptr_t desc = name + ((note->n_namesz + 3) & ~uintptr_t{3});
    const uintptr_t next = desc + ((note->n_descsz + 3) & ~uintptr_t{3});
    if (next > end || next <= cursor) return false;
    // The Go linker writes the name padded: "Go\0\0", n_namesz 4.
    if (note->n_type == kGoBuildIdNoteType &&
        (note->n_namesz == sizeof(kGoNoteOwner) || note->n_namesz == sizeof(kGoNoteOwner) + 1) &&
        memcmp(reinterpret_cast<const void*>(name), kGoNoteOwner, sizeof(kGoNoteOwner)) == 0) {
      return true;
    }
    cursor = next;
  }
  return false;
}

// dl_iterate_phdr visits the main executable first.
int VisitMainProgram(dl_phdr_info* info, size_t, void* found) {
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& header = info->dlpi_phdr[i];
    if (header.p_type != PT_NOTE) continue;
    if (SegmentHasGoNote(info->dlpi_addr + header.p_vaddr, header.p_memsz)) {
      *static_cast<bool*>(found) = true;
      break;
    }
  }
  return 1;  // the first object only
}

}  // namespace

void DetectGoProgram() {
  bool found = false;
  dl_iterate_phdr(VisitMainProgram, &found);
  g_program_is_go.store(found, std::memory_order_release);
}

bool ProgramIsGo() { return g_program_is_go.load(std::memory_order_acquire); }

}  // namespace retain::shim
