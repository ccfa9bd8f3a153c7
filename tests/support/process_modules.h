// process_modules: this process's loaded objects as the shim records them
// (Snapshot.modules: path, load bias, executable segments, build-id), for
// the symbolizer's test and bench, which symbolize their own addresses.
#ifndef RETAIN_TESTS_SUPPORT_PROCESS_MODULES_H_
#define RETAIN_TESTS_SUPPORT_PROCESS_MODULES_H_

#include <elf.h>
#include <link.h>

#include <cstring>
#include <filesystem>
#include <string>

#include "retain.pb.h"

namespace retain::test {

// dl_iterate_phdr callback: appends the object to the v1::Snapshot* `data`.
inline int AddProcessModule(dl_phdr_info* info, size_t, void* data) {
  auto* snapshot = static_cast<v1::Snapshot*>(data);
  std::string path = info->dlpi_name == nullptr ? "" : info->dlpi_name;
  if (path.empty()) path = std::filesystem::read_symlink("/proc/self/exe").string();
  v1::Module* module = snapshot->add_modules();
  module->set_id(static_cast<uint32_t>(snapshot->modules_size()));
  module->set_path(path);
  module->set_load_bias(info->dlpi_addr);
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& phdr = info->dlpi_phdr[i];
    if (phdr.p_type == PT_LOAD && (phdr.p_flags & PF_X) != 0) {
      v1::Segment* segment = module->add_executable_segments();
      segment->set_start(info->dlpi_addr + phdr.p_vaddr);
      segment->set_end(info->dlpi_addr + phdr.p_vaddr + phdr.p_memsz);
      segment->set_file_offset(phdr.p_offset);
    }
    if (phdr.p_type != PT_NOTE) continue;
    const char* p = reinterpret_cast<const char*>(info->dlpi_addr + phdr.p_vaddr);
    const char* end = p + phdr.p_memsz;
    while (p + sizeof(ElfW(Nhdr)) <= end) {
      const auto* note = reinterpret_cast<const ElfW(Nhdr)*>(p);
      const char* name = p + sizeof(ElfW(Nhdr));
      const char* desc = name + ((note->n_namesz + 3) & ~3u);
      if (note->n_type == NT_GNU_BUILD_ID && note->n_namesz == 4 && memcmp(name, "GNU", 4) == 0) {
        module->set_build_id(std::string(desc, note->n_descsz));
      }
      p = desc + ((note->n_descsz + 3) & ~3u);
    }
  }
  return 0;
}

// Appends every loaded object of this process to `snapshot`.
inline void AddProcessModules(v1::Snapshot* snapshot) {
  dl_iterate_phdr(AddProcessModule, snapshot);
}

}  // namespace retain::test

#endif  // RETAIN_TESTS_SUPPORT_PROCESS_MODULES_H_
