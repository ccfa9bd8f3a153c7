// exporter: see exporter.h.
#include "tools/lib/exporter.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace retain::tool {

std::optional<SnapshotName> ParseSnapshotName(absl::string_view name) {
  if (name.empty() || name[0] == '.' || !absl::ConsumeSuffix(&name, ".pb")) return std::nullopt;
  const size_t dot_sequence = name.rfind('.');
  if (dot_sequence == absl::string_view::npos || dot_sequence == 0) return std::nullopt;
  const size_t dot_pid = name.rfind('.', dot_sequence - 1);
  if (dot_pid == absl::string_view::npos || dot_pid == 0) return std::nullopt;
  SnapshotName parsed;
  const absl::string_view pid = name.substr(dot_pid + 1, dot_sequence - dot_pid - 1);
  const absl::string_view sequence = name.substr(dot_sequence + 1);
  auto digits = [](absl::string_view text) {
    return !text.empty() &&
           std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
  };
  if (!digits(pid) || !digits(sequence) || !absl::SimpleAtoi(pid, &parsed.pid) ||
      !absl::SimpleAtoi(sequence, &parsed.sequence) || parsed.pid == 0 || parsed.sequence == 0) {
    return std::nullopt;
  }
  parsed.exe = std::string(name.substr(0, dot_pid));
  return parsed;
}

struct Exporter::Process {
  std::string exe;
  uint32_t pid = 0;
  uint64_t last_sequence = 0;  // the newest read (or given up on, being older)
  absl::Time newest_file;      // mtime of its newest file in the directory
  std::unique_ptr<TrendBuilder> builder;
  std::shared_ptr<const v1::Snapshot> last;
  std::optional<TrendResult> trend;
};

struct Exporter::Directory {
  std::string path;
  bool up = false;
  uint64_t snapshots_read = 0;
  uint64_t read_errors = 0;
  std::string last_error;
  std::map<std::string, Process> processes;  // by "<exe>.<pid>"
  struct Failure {
    int attempts = 0;
    int64_t size = -1;
    absl::Time mtime;
  };
  std::map<std::string, Failure> failures;  // by file name
};

Exporter::Exporter(ExporterOptions options) : options_(std::move(options)) {}
Exporter::~Exporter() = default;

absl::StatusOr<std::unique_ptr<Exporter>> Exporter::Create(ExporterOptions options) {
  if (options.window < 3) {
    return absl::InvalidArgumentError(
        absl::StrCat("the window must hold at least 3 snapshots, not ", options.window));
  }
  std::unique_ptr<Exporter> exporter(new Exporter(std::move(options)));
  exporter->options_.owners.rules = exporter->options_.rules ? &*exporter->options_.rules : nullptr;
  exporter->symbolizer_ = std::make_unique<Symbolizer>(exporter->options_.symbolizer);
  absl::StatusOr<std::unique_ptr<OwnerResolver>> owners =
      OwnerResolver::Create(*exporter->symbolizer_, exporter->options_.owners);
  if (!owners.ok()) return owners.status();
  exporter->owners_ = std::move(*owners);
  for (const std::string& dir : exporter->options_.dirs) {
    auto directory = std::make_unique<Directory>();
    directory->path = dir;
    exporter->directories_.push_back(std::move(directory));
  }
  return exporter;
}

void Exporter::Scan(absl::Time now) {
  for (auto& directory : directories_) ScanDirectory(*directory, now);
}

void Exporter::ScanDirectory(Directory& directory, absl::Time now) {
  DIR* dir = opendir(directory.path.c_str());
  if (dir == nullptr) {
    // Gone (or not readable): its processes go with it.
    directory.up = false;
    directory.processes.clear();
    directory.failures.clear();
    return;
  }
  directory.up = true;
  struct Listed {
    std::string exe;
    uint32_t pid = 0;
    absl::Time newest = absl::InfinitePast();
    std::map<uint64_t, std::string> files;  // sequence -> name
  };
  std::map<std::string, Listed> listed;
  std::map<std::string, std::pair<int64_t, absl::Time>> present;  // name -> size, mtime
  while (dirent* entry = readdir(dir)) {
    std::optional<SnapshotName> name = ParseSnapshotName(entry->d_name);
    if (!name) continue;
    struct stat st;
    if (fstatat(dirfd(dir), entry->d_name, &st, 0) != 0 || !S_ISREG(st.st_mode)) continue;
    const absl::Time mtime = absl::TimeFromTimespec(st.st_mtim);
    Listed& process = listed[absl::StrCat(name->exe, ".", name->pid)];
    process.exe = name->exe;
    process.pid = name->pid;
    process.newest = std::max(process.newest, mtime);
    process.files.emplace(name->sequence, entry->d_name);
    present.emplace(entry->d_name, std::make_pair(static_cast<int64_t>(st.st_size), mtime));
  }
  closedir(dir);
  // Failures of files no longer there are forgotten.
  for (auto it = directory.failures.begin(); it != directory.failures.end();) {
    it = present.count(it->first) ? std::next(it) : directory.failures.erase(it);
  }
  // Processes none of whose files remain are gone.
  for (auto it = directory.processes.begin(); it != directory.processes.end();) {
    it = listed.count(it->first) ? std::next(it) : directory.processes.erase(it);
  }
  for (auto& [key, files] : listed) {
    Process& process = directory.processes[key];
    if (process.pid == 0) {
      process.exe = files.exe;
      process.pid = files.pid;
    }
    process.newest_file = files.newest;
    // Files whose read failed before: retried while they change, and at
    // most kReadAttempts times as they are.
    std::map<uint64_t, std::string> to_read;
    for (const auto& [sequence, name] : files.files) {
      if (sequence <= process.last_sequence) continue;
      auto failed = directory.failures.find(name);
      if (failed != directory.failures.end()) {
        const auto& [size, mtime] = present[name];
        if (failed->second.size == size && failed->second.mtime == mtime &&
            failed->second.attempts >= kReadAttempts) {
          continue;
        }
      }
      to_read.emplace(sequence, name);
    }
    // A process seen for the first time: its newest `window` snapshots.
    while (process.last_sequence == 0 && to_read.size() > options_.window) {
      to_read.erase(to_read.begin());
    }
    if (!to_read.empty()) ReadNew(directory, process, to_read);
  }
  // A process that restarted leaves its last snapshots behind: once a newer
  // process of the same executable writes here and the old one has written
  // nothing for `stale`, the old one is dropped.
  for (auto it = directory.processes.begin(); it != directory.processes.end();) {
    bool superseded = false;
    for (const auto& [key, other] : directory.processes) {
      if (&other != &it->second && other.exe == it->second.exe &&
          other.newest_file > it->second.newest_file) {
        superseded = true;
      }
    }
    if (superseded && now - it->second.newest_file > options_.stale) {
      it = directory.processes.erase(it);
    } else {
      ++it;
    }
  }
}

void Exporter::ReadNew(Directory& directory, Process& process,
                       const std::map<uint64_t, std::string>& files) {
  bool added = false;
  for (const auto& [sequence, name] : files) {
    const std::string path = absl::StrCat(directory.path, "/", name);
    struct stat st;
    const bool exists = stat(path.c_str(), &st) == 0;
    absl::StatusOr<v1::Snapshot> snapshot =
        exists ? ReadSnapshotFile(path, options_.read)
               : absl::StatusOr<v1::Snapshot>(absl::NotFoundError(path));
    if (!snapshot.ok()) {
      if (absl::IsNotFound(snapshot.status())) continue;  // deleted meanwhile (RETAIN_KEEP)
      auto& failure = directory.failures[name];
      const absl::Time mtime = absl::TimeFromTimespec(st.st_mtim);
      if (failure.size != st.st_size || failure.mtime != mtime) failure.attempts = 0;
      failure.size = st.st_size;
      failure.mtime = mtime;
      ++failure.attempts;
      ++directory.read_errors;
      directory.last_error = std::string(snapshot.status().message());
      continue;
    }
    directory.failures.erase(name);
    ++directory.snapshots_read;
    if (process.builder == nullptr) {
      process.builder = std::make_unique<TrendBuilder>(*owners_, options_.measure, false);
    }
    // One snapshot per request count: an idle server's interval snapshots
    // would otherwise fill the window with one x, and a trend needs
    // requests. At a count already in the window, the snapshot taken while
    // no request was open is kept (its rows hold exactly the requests its
    // x counts; one taken during the next request holds part of that one
    // too), else the newest.
    const v1::Header& header = snapshot->header();
    if (const v1::Header* last = process.builder->LastHeader();
        last != nullptr && header.requests_closed() == last->requests_closed() &&
        header.requests_closed() != 0) {
      auto idle = [](const v1::Header& h) { return h.requests_opened() == h.requests_closed(); };
      if (idle(*last) && !idle(header)) {
        process.last = Summary(*snapshot);  // the newest figures for the process lines
        process.last_sequence = sequence;
        continue;
      }
      process.builder->DropNewest();
    }
    absl::Status status = process.builder->Add(*snapshot, name);
    if (!status.ok()) {
      // Another process under the same pid (an exec): a new series.
      process.builder = std::make_unique<TrendBuilder>(*owners_, options_.measure, false);
      status = process.builder->Add(*snapshot, name);
    }
    if (!status.ok()) {
      ++directory.read_errors;
      directory.last_error = std::string(status.message());
      continue;
    }
    while (process.builder->size() > options_.window) process.builder->DropOldest();
    process.last = Summary(*snapshot);
    process.last_sequence = sequence;
    added = true;
  }
  if (!added) return;
  process.trend.reset();
  if (process.builder->size() >= 3) {
    absl::StatusOr<TrendResult> trend = process.builder->Finish();
    if (trend.ok()) process.trend = std::move(*trend);
  }
}

std::vector<ProcessView> Exporter::Processes() const {
  std::vector<ProcessView> views;
  for (const auto& directory : directories_) {
    for (const auto& [key, process] : directory->processes) {
      if (process.last == nullptr) continue;  // nothing read yet
      ProcessView& view = views.emplace_back();
      view.dir = directory->path;
      view.exe = process.exe;
      view.pid = process.pid;
      view.snapshots = process.builder->size();
      view.last = process.last;
      view.trend = process.trend;
    }
  }
  return views;
}

std::vector<DirectoryView> Exporter::Directories() const {
  std::vector<DirectoryView> views;
  for (const auto& directory : directories_) {
    views.push_back(DirectoryView{directory->path, directory->up, directory->snapshots_read,
                                  directory->read_errors, directory->last_error});
  }
  return views;
}

}  // namespace retain::tool
