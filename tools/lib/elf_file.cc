// elf_file: see elf_file.h.
#include "tools/lib/elf_file.h"

#include <elfutils/libdwelf.h>

#include <cstring>

#include "absl/strings/str_cat.h"

namespace retain::tool::symbolizer_internal {

ElfPtr OpenElf(int fd) {
  elf_version(EV_CURRENT);
  ElfPtr elf(elf_begin(fd, ELF_C_READ_MMAP, nullptr));
  if (elf != nullptr && elf_kind(elf.get()) != ELF_K_ELF) elf.reset();
  return elf;
}

std::string ElfBuildId(Elf* elf) {
  const void* bits = nullptr;
  ssize_t size = dwelf_elf_gnu_build_id(elf, &bits);
  if (size <= 0 || bits == nullptr) return "";
  return std::string(static_cast<const char*>(bits), static_cast<size_t>(size));
}

bool HasDebugInfo(Elf* elf) {
  size_t strndx = 0;
  if (elf_getshdrstrndx(elf, &strndx) != 0) return false;
  for (Elf_Scn* scn = elf_nextscn(elf, nullptr); scn != nullptr; scn = elf_nextscn(elf, scn)) {
    GElf_Shdr shdr;
    if (gelf_getshdr(scn, &shdr) == nullptr || shdr.sh_type == SHT_NOBITS) continue;
    const char* name = elf_strptr(elf, strndx, shdr.sh_name);
    if (name != nullptr &&
        (std::strcmp(name, ".debug_info") == 0 || std::strcmp(name, ".zdebug_info") == 0)) {
      return true;
    }
  }
  return false;
}

absl::string_view Basename(absl::string_view path) {
  size_t slash = path.rfind('/');
  return slash == absl::string_view::npos ? path : path.substr(slash + 1);
}

absl::string_view Dirname(absl::string_view path) {
  size_t slash = path.rfind('/');
  if (slash == absl::string_view::npos) return "";
  return path.substr(0, slash);
}

std::string JoinPath(absl::string_view dir, absl::string_view path) {
  while (!dir.empty() && dir.back() == '/') dir.remove_suffix(1);
  if (!path.empty() && path.front() == '/') return absl::StrCat(dir, path);
  return absl::StrCat(dir, "/", path);
}

}  // namespace retain::tool::symbolizer_internal
