// import_redirect: see unwind/import_redirect.h.
#include "unwind/import_redirect.h"

#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>

namespace retain::shim {
namespace {

#if defined(__x86_64__)
constexpr uint32_t kJumpSlot = R_X86_64_JUMP_SLOT;
constexpr uint32_t kGlobDat = R_X86_64_GLOB_DAT;
#elif defined(__aarch64__)
constexpr uint32_t kJumpSlot = R_AARCH64_JUMP_SLOT;
constexpr uint32_t kGlobDat = R_AARCH64_GLOB_DAT;
#else
#error "import_redirect: unsupported architecture"
#endif

struct DynamicInfo {
  const ElfW(Sym) * symbols = nullptr;
  const char* strings = nullptr;
  size_t strings_size = 0;
  const ElfW(Rela) * plt_relocations = nullptr;
  size_t plt_relocations_size = 0;
  bool plt_is_rela = false;
  const ElfW(Rela) * relocations = nullptr;
  size_t relocations_size = 0;
};

// glibc rewrites the address-valued entries of a loaded object's dynamic
// section to run-time addresses on most architectures, not on all: an entry
// below the load bias is still a link-time offset.
uintptr_t RunTimeAddress(uintptr_t value, uintptr_t bias) {
  return value < bias ? value + bias : value;
}

bool ReadDynamic(const link_map* object, DynamicInfo* info) {
  const uintptr_t bias = object->l_addr;
  for (const ElfW(Dyn)* entry = object->l_ld; entry->d_tag != DT_NULL; ++entry) {
    const uintptr_t value = entry->d_un.d_ptr;
    switch (entry->d_tag) {
      case DT_SYMTAB:
        info->symbols = reinterpret_cast<const ElfW(Sym)*>(RunTimeAddress(value, bias));
        break;
      case DT_STRTAB:
        info->strings = reinterpret_cast<const char*>(RunTimeAddress(value, bias));
        break;
      case DT_STRSZ:
        info->strings_size = entry->d_un.d_val;
        break;
      case DT_JMPREL:
        info->plt_relocations = reinterpret_cast<const ElfW(Rela)*>(RunTimeAddress(value, bias));
        break;
      case DT_PLTRELSZ:
        info->plt_relocations_size = entry->d_un.d_val;
        break;
      case DT_PLTREL:
        info->plt_is_rela = entry->d_un.d_val == DT_RELA;
        break;
      case DT_RELA:
        info->relocations = reinterpret_cast<const ElfW(Rela)*>(RunTimeAddress(value, bias));
        break;
      case DT_RELASZ:
        info->relocations_size = entry->d_un.d_val;
        break;
      default:
        break;
    }
  }
  return info->symbols != nullptr && info->strings != nullptr;
}

struct RelroSearch {
  const link_map* object;
  uintptr_t begin = 0;
  uintptr_t end = 0;
};

int FindRelro(dl_phdr_info* phdr, size_t, void* argument) {
  auto* search = static_cast<RelroSearch*>(argument);
  if (phdr->dlpi_addr != search->object->l_addr) return 0;
  const char* name = phdr->dlpi_name != nullptr ? phdr->dlpi_name : "";
  const char* wanted = search->object->l_name != nullptr ? search->object->l_name : "";
  if (std::strcmp(name, wanted) != 0) return 0;
  for (int i = 0; i < phdr->dlpi_phnum; ++i) {
    if (phdr->dlpi_phdr[i].p_type != PT_GNU_RELRO) continue;
    search->begin = phdr->dlpi_addr + phdr->dlpi_phdr[i].p_vaddr;
    search->end = search->begin + phdr->dlpi_phdr[i].p_memsz;
  }
  return 1;
}

bool StoreSlot(void** slot, void* value, const RelroSearch& relro) {
  const auto address = reinterpret_cast<uintptr_t>(slot);
  if (address < relro.begin || address >= relro.end) {
    *slot = value;
    return true;
  }
  const uintptr_t page_size = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  void* page = reinterpret_cast<void*>(address & ~(page_size - 1));
  if (mprotect(page, page_size, PROT_READ | PROT_WRITE) != 0) return false;
  *slot = value;
  mprotect(page, page_size, PROT_READ);
  return true;
}

// Applies the redirects to one relocation table.
bool RedirectTable(const link_map* object, const DynamicInfo& info, const ElfW(Rela) * table,
                   size_t table_size, const RelroSearch& relro, ImportRedirect* redirects,
                   size_t count) {
  if (table == nullptr) return true;
  bool ok = true;
  for (size_t i = 0; i < table_size / sizeof(ElfW(Rela)); ++i) {
    const ElfW(Rela)& relocation = table[i];
#if defined(__LP64__)
    const uint32_t type = ELF64_R_TYPE(relocation.r_info);
    const uint32_t symbol = ELF64_R_SYM(relocation.r_info);
#else
    const uint32_t type = ELF32_R_TYPE(relocation.r_info);
    const uint32_t symbol = ELF32_R_SYM(relocation.r_info);
#endif
    if ((type != kJumpSlot && type != kGlobDat) || symbol == 0) continue;
    const size_t name_offset = info.symbols[symbol].st_name;
    if (info.strings_size != 0 && name_offset >= info.strings_size) continue;
    const char* name = info.strings + name_offset;
    for (size_t r = 0; r < count; ++r) {
      if (std::strcmp(name, redirects[r].name) != 0) continue;
      auto** slot = reinterpret_cast<void**>(object->l_addr + relocation.r_offset);
      if (redirects[r].original != nullptr && *redirects[r].original == nullptr) {
        *redirects[r].original = *slot;
      }
      if (StoreSlot(slot, redirects[r].replacement, relro)) {
        ++redirects[r].slots;
      } else {
        ok = false;
      }
    }
  }
  return ok;
}

}  // namespace

bool RedirectImports(void* handle, ImportRedirect* redirects, size_t count) {
  link_map* object = nullptr;
  if (dlinfo(handle, RTLD_DI_LINKMAP, &object) != 0 || object == nullptr) return false;
  DynamicInfo info;
  if (!ReadDynamic(object, &info)) return false;
  RelroSearch relro{object};
  dl_iterate_phdr(FindRelro, &relro);
  bool ok = true;
  if (info.plt_is_rela) {
    ok &= RedirectTable(object, info, info.plt_relocations, info.plt_relocations_size, relro,
                        redirects, count);
  }
  ok &=
      RedirectTable(object, info, info.relocations, info.relocations_size, relro, redirects, count);
  return ok;
}

}  // namespace retain::shim
