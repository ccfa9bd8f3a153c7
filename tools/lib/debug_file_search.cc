// debug_file_search: see debug_file_search.h.
#include "tools/lib/debug_file_search.h"

#include <elfutils/libdwelf.h>
#include <sys/stat.h>

#include <cstring>

#include "absl/status/statusor.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "tools/lib/elf_file.h"
#include "tools/lib/input_file.h"
#include "tools/lib/symbolizer.h"

namespace retain::tool::symbolizer_internal {
namespace {

// Opens `path` if it is an ELF file whose build-id is `want` (any build-id
// when `want` is empty) and which carries DWARF; -1 otherwise. `main` is the
// module's own file, never accepted as its own debug file.
int OpenDebugCandidate(const std::string& path, absl::string_view want, const struct stat& main) {
  // A FIFO, a device or a huge file where a debug file is looked for is
  // skipped like a missing one (OpenRegularFile never blocks on a FIFO).
  absl::StatusOr<int> opened = OpenRegularFile(path, kMaxModuleFileBytes, "debug file");
  if (!opened.ok()) return -1;
  const int fd = *opened;
  Fd holder(fd);
  struct stat st;
  if (fstat(fd, &st) != 0) return -1;
  if (st.st_dev == main.st_dev && st.st_ino == main.st_ino) return -1;
  ElfPtr elf = OpenElf(fd);
  if (elf == nullptr) return -1;
  if (!want.empty()) {
    std::string id = ElfBuildId(elf.get());
    // A debug file without a build-id (an old debuglink) is taken on trust.
    if (!id.empty() && id != want) return -1;
  }
  if (!HasDebugInfo(elf.get())) return -1;
  return holder.release();
}

// libdwfl calls find_debuginfo a second way, for a dwz supplementary file
// (.gnu_debugaltlink), passing the alt link's path where the module's
// debuglink goes. It is that call when the name is not the main file's own
// debuglink.
bool IsAltLinkRequest(Dwfl_Module* mod, const char* debuglink_file) {
  if (debuglink_file == nullptr) return false;
  GElf_Addr bias = 0;
  Elf* main = dwfl_module_getelf(mod, &bias);
  GElf_Word crc = 0;
  const char* own = main == nullptr ? nullptr : dwelf_elf_gnu_debuglink(main, &crc);
  return own == nullptr || std::strcmp(own, debuglink_file) != 0;
}

// The dwz supplementary file: by its build-id in the debug directories,
// else at the path the link names (under the sysroot first when absolute,
// else relative to the file that links to it). Never exercised by the tests
// (no dwz here); Debian's -dbgsym packages use it.
int FindAltFile(Dwfl_Module* mod, const DebugSearch& search, const char* file_name,
                const char* alt_path, char** found_name) {
  std::string want;
  Dwarf_Addr bias = 0;
  // The DWARF is set up before libdwfl looks for its alt file.
  if (Dwarf* dwarf = dwfl_module_getdwarf(mod, &bias); dwarf != nullptr) {
    const char* name = nullptr;
    const void* id = nullptr;
    ssize_t size = dwelf_dwarf_gnu_debugaltlink(dwarf, &name, &id);
    if (size > 0) want.assign(static_cast<const char*>(id), static_cast<size_t>(size));
  }
  std::vector<std::string> candidates;
  if (want.size() >= 2) {
    std::string hex = absl::BytesToHexString(want);
    for (const std::string& dir : *search.dirs) {
      candidates.push_back(absl::StrCat(JoinPath(dir, ".build-id"), "/", hex.substr(0, 2), "/",
                                        hex.substr(2), ".debug"));
    }
  }
  if (alt_path[0] == '/') {
    if (!search.sysroot.empty()) candidates.push_back(search.sysroot + alt_path);
    candidates.push_back(alt_path);
  } else if (file_name != nullptr) {
    candidates.push_back(JoinPath(Dirname(file_name), alt_path));
  }
  struct stat none {};
  for (const std::string& candidate : candidates) {
    int fd = OpenDebugCandidate(candidate, want, none);
    if (fd >= 0) {
      *found_name = strdup(candidate.c_str());
      return fd;
    }
  }
  return -1;
}

// libdwfl's find_debuginfo callback: looks for the module's separate debug
// file like gdb does, by build-id first, then by debuglink and path, in the
// configured directories. Called only when the file itself has no DWARF (or
// no symbol table).
int FindDebugInfo(Dwfl_Module* mod, void** userdata, const char* /*modname*/, Dwarf_Addr /*base*/,
                  const char* file_name, const char* debuglink_file, GElf_Word /*debuglink_crc*/,
                  char** debuginfo_file_name) {
  auto* search = static_cast<DebugSearch*>(*userdata);
  if (search == nullptr) return -1;
  struct stat main_stat {};
  if (stat(search->file_path.c_str(), &main_stat) != 0) return -1;

  if (IsAltLinkRequest(mod, debuglink_file)) {
    return FindAltFile(mod, *search, file_name, debuglink_file, debuginfo_file_name);
  }

  const unsigned char* bits = nullptr;
  GElf_Addr vaddr = 0;
  int id_size = dwfl_module_build_id(mod, &bits, &vaddr);
  std::string build_id =
      id_size > 0 ? std::string(reinterpret_cast<const char*>(bits), id_size) : "";

  std::vector<std::string> candidates;
  if (build_id.size() >= 2) {
    std::string hex = absl::BytesToHexString(build_id);
    for (const std::string& dir : *search->dirs) {
      candidates.push_back(absl::StrCat(JoinPath(dir, ".build-id"), "/", hex.substr(0, 2), "/",
                                        hex.substr(2), ".debug"));
    }
  }
  absl::string_view module_dir = Dirname(search->module_path);
  if (debuglink_file != nullptr && *debuglink_file != '\0') {
    absl::string_view file_dir = Dirname(search->file_path);
    candidates.push_back(absl::StrCat(file_dir, "/", debuglink_file));
    candidates.push_back(absl::StrCat(file_dir, "/.debug/", debuglink_file));
    for (const std::string& dir : *search->dirs) {
      candidates.push_back(absl::StrCat(JoinPath(dir, module_dir), "/", debuglink_file));
    }
  }
  for (const std::string& dir : *search->dirs) {
    candidates.push_back(absl::StrCat(JoinPath(dir, search->module_path), ".debug"));
    candidates.push_back(JoinPath(dir, search->module_path));
  }
  for (const std::string& candidate : candidates) {
    int fd = OpenDebugCandidate(candidate, build_id, main_stat);
    if (fd >= 0) {
      *debuginfo_file_name = strdup(candidate.c_str());
      return fd;
    }
  }
  return -1;
}

}  // namespace

const Dwfl_Callbacks kDebugFileCallbacks = {
    .find_elf = dwfl_build_id_find_elf,
    .find_debuginfo = FindDebugInfo,
    .section_address = dwfl_offline_section_address,
    .debuginfo_path = nullptr,
};

}  // namespace retain::tool::symbolizer_internal
