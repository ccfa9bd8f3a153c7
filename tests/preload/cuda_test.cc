// CUDA interposition under the shim.
//
// There is no NVIDIA GPU and no driver (libcuda.so.1) on the machines this
// project is tested on, so:
//  - the success paths run on FAKE CUDA libraries built by the tests
//    (tests/fixtures/cuda/fake_libcuda.c, fake_libcudart.c: the real ABI,
//    "device" memory from raw mmap system calls, host bookkeeping from
//    malloc): the shared-runtime route (program -> libcudart.so.13 ->
//    libcuda.so.1 through the PLT) and the static-runtime route (dlopen of
//    libcuda.so.1, then only dlsym and cuGetProcAddress);
//  - the real runtime (/usr/local/cuda, shared and static) is checked to
//    fail exactly as it does without the shim, recording nothing; skipped
//    when the toolkit is not installed.
// And dlsym, which the shim hooks, is checked to behave exactly as without
// the shim (RTLD_NEXT from a library, RTLD_DEFAULT, handles, dlvsym, dlerror).
#include <cstdint>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/preload/proc_helpers.h"
#include "tests/support/test_support.h"

namespace retain::test {
namespace {

using proc::FirstFrame;

constexpr uint64_t kDriverBookkeeping = 4242;  // FAKE_CUDA_DRIVER_BOOKKEEPING
constexpr uint64_t kRuntimeContext = 3131;     // FAKE_CUDART_CONTEXT_BYTES
constexpr uint64_t kPitchAlignment = 512;      // FAKE_CUDA_PITCH_ALIGNMENT

struct Range {
  uint64_t begin = 0;
  uint64_t end = 0;
};

struct Outcome {
  RunResult run;
  std::vector<v1::Snapshot> snapshots;
};

Outcome RunFixture(const std::string& name, bool preload) {
  TempDir dir;
  RunOptions options;
  options.argv = {FixturePath(name)};
  options.preload = preload;
  options.env["RETAIN_DIR"] = dir.path();
  Outcome outcome;
  outcome.run = test::Run(options);
  if (preload) outcome.snapshots = proc::LoadAll(dir.path());
  return outcome;
}

// Every output line but the "range" ones (addresses of the program's own
// functions move with ASLR).
std::string ComparableOutput(const std::string& text) {
  std::istringstream in(text);
  std::string line;
  std::string out;
  while (std::getline(in, line)) {
    if (line.rfind("range ", 0) == 0) continue;
    out += line + "\n";
  }
  return out;
}

std::map<std::string, Range> Ranges(const std::string& text) {
  std::istringstream in(text);
  std::string line;
  std::map<std::string, Range> ranges;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string tag, name, begin, end;
    if (!(fields >> tag >> name >> begin >> end) || tag != "range") continue;
    ranges[name] = Range{std::stoull(begin, nullptr, 0), std::stoull(end, nullptr, 0)};
  }
  return ranges;
}

// The pointer printed by the first "call NAME rc=0 ptr=0x..." line at or
// after occurrence `nth` (0-based) of NAME.
uint64_t Pointer(const std::string& text, const std::string& name, int nth = 0) {
  std::istringstream in(text);
  std::string line;
  const std::string prefix = "call " + name + " rc=";
  while (std::getline(in, line)) {
    if (line.rfind(prefix, 0) != 0) continue;
    if (nth-- > 0) continue;
    const size_t at = line.find("ptr=");
    return at == std::string::npos ? 0 : std::stoull(line.substr(at + 4), nullptr, 16);
  }
  ADD_FAILURE() << "no line for " << name << " in:\n" << text;
  return 0;
}

bool IsCudaKind(v1::Kind kind) {
  return kind == v1::KIND_CUDA_DEVICE || kind == v1::KIND_CUDA_HOST ||
         kind == v1::KIND_CUDA_MANAGED;
}

std::vector<tool::Allocation> CudaRows(const v1::Snapshot& snapshot) {
  std::vector<tool::Allocation> rows;
  for (const tool::Allocation& row : tool::FlattenAllocations(snapshot)) {
    if (IsCudaKind(row.kind)) rows.push_back(row);
  }
  return rows;
}

struct Expected {
  std::string call;  // the "call" line's name
  int nth;           // which of them
  uint64_t size;
  v1::Kind kind;
  uint64_t flags;
  std::string function;  // where frames[0] must be
};

// Every expected record is live once, with its size, kind, flags and first
// frame in the fixture function that called; and nothing else is.
void ExpectCudaRecords(const Outcome& outcome, const std::vector<Expected>& expected) {
  ASSERT_EQ(outcome.snapshots.size(), 1u);
  const v1::Snapshot& snapshot = outcome.snapshots[0];
  const std::map<std::string, Range> ranges = Ranges(outcome.run.stdout_data);
  const std::vector<tool::Allocation> rows = CudaRows(snapshot);
  EXPECT_EQ(rows.size(), expected.size());
  for (const Expected& e : expected) {
    const uint64_t key = Pointer(outcome.run.stdout_data, e.call, e.nth);
    int found = 0;
    for (const tool::Allocation& row : rows) {
      if (row.address != key) continue;
      ++found;
      EXPECT_EQ(row.size, e.size) << e.call;
      EXPECT_EQ(row.kind, e.kind) << e.call;
      EXPECT_EQ(row.flags, e.flags) << e.call;
      const auto frame = FirstFrame(snapshot, row.stack_id);
      ASSERT_TRUE(frame.has_value()) << e.call << " has no stack";
      ASSERT_TRUE(ranges.count(e.function)) << e.function;
      const Range range = ranges.at(e.function);
      EXPECT_TRUE(*frame >= range.begin && *frame < range.end)
          << e.call << ": frame 0 at 0x" << std::hex << *frame << " is not in " << e.function
          << " [0x" << range.begin << ", 0x" << range.end << ")";
    }
    EXPECT_EQ(found, 1) << e.call << " #" << e.nth << " at 0x" << std::hex << key;
  }
}

uint64_t SumOf(const std::vector<Expected>& expected, v1::Kind kind) {
  uint64_t sum = 0;
  for (const Expected& e : expected) {
    if (e.kind == kind) sum += e.size;
  }
  return sum;
}

void ExpectTotalsMatchRows(const v1::Snapshot& snapshot, const std::vector<Expected>& expected) {
  for (v1::Kind kind : {v1::KIND_CUDA_DEVICE, v1::KIND_CUDA_HOST, v1::KIND_CUDA_MANAGED}) {
    EXPECT_EQ(LiveBytes(snapshot, kind), SumOf(expected, kind)) << tool::KindName(kind);
    EXPECT_EQ(TotalsFor(snapshot, kind).live_bytes(), SumOf(expected, kind))
        << tool::KindName(kind);
  }
}

// Host memory the fake driver and runtime took inside recorded calls is
// gpu-driver-host, never heap: every live bookkeeping block is.
void ExpectBookkeepingIsDriverHost(const v1::Snapshot& snapshot, uint64_t driver_blocks,
                                   uint64_t heap_blocks) {
  uint64_t driver = 0;
  uint64_t heap = 0;
  for (const tool::Allocation& row : proc::AllocationsOfSize(snapshot, kDriverBookkeeping)) {
    if (row.kind == v1::KIND_GPU_DRIVER_HOST) ++driver;
    if (row.kind == v1::KIND_HEAP) ++heap;
  }
  EXPECT_EQ(driver, driver_blocks);
  EXPECT_EQ(heap, heap_blocks);
}

// --- The shared-runtime route, on the fakes. -------------------------------

TEST(CudaFakeRuntime, EveryAllocationRecordedOnceWithSizeKindAndStack) {
  const Outcome plain = RunFixture("cuda_runtime_app", false);
  const Outcome shimmed = RunFixture("cuda_runtime_app", true);
  ASSERT_EQ(plain.run.exit_code, 0) << plain.run.stdout_data << plain.run.stderr_data;
  // The host's behaviour: same calls, same return codes, same pointers.
  EXPECT_EQ(shimmed.run.exit_code, 0) << shimmed.run.stderr_data;
  EXPECT_EQ(ComparableOutput(shimmed.run.stdout_data), ComparableOutput(plain.run.stdout_data));
  EXPECT_EQ(shimmed.run.stderr_data, plain.run.stderr_data);

  const std::vector<Expected> expected = {
      {"cudaMalloc", 0, 1048577, v1::KIND_CUDA_DEVICE, 0, "RuntimeDevice"},
      {"cudaMallocHost", 0, 65539, v1::KIND_CUDA_HOST, 0, "RuntimeHost"},
      {"cudaHostAlloc", 0, 100003, v1::KIND_CUDA_HOST, 2, "RuntimeHost"},
      {"cudaMallocManaged", 0, 300007, v1::KIND_CUDA_MANAGED, 0, "RuntimeManaged"},
      {"cudaMallocAsync", 0, 77773, v1::KIND_CUDA_DEVICE, 0, "RuntimeAsync"},
      // Pitched: *pitch * height, the pitch the fake returned (1000 -> 1024).
      {"cudaMallocPitch", 0, 2 * kPitchAlignment * 37, v1::KIND_CUDA_DEVICE, 0,
       "RuntimePitchAndPool"},
      {"cudaMallocFromPoolAsync", 0, 99991, v1::KIND_CUDA_DEVICE, 0, "RuntimePitchAndPool"},
      {"cuMemAlloc_v2", 0, 123457, v1::KIND_CUDA_DEVICE, 0, "DriverDirect"},
      {"cuMemHostAlloc", 0, 22222, v1::KIND_CUDA_HOST, 3, "DriverDirect"},
      {"cuMemAllocHost_v2", 0, 33333, v1::KIND_CUDA_HOST, 0, "DriverDirect"},
      {"cuMemAllocManaged", 0, 44444, v1::KIND_CUDA_MANAGED, 0, "DriverDirect"},
      {"cuMemAllocAsync", 0, 55555, v1::KIND_CUDA_DEVICE, 0, "DriverDirect"},
      {"cuMemAllocPitch_v2", 0, 4 * kPitchAlignment * 11, v1::KIND_CUDA_DEVICE, 0,
       "DriverPitchAndPool"},
      {"cuMemAllocFromPoolAsync", 0, 12121, v1::KIND_CUDA_DEVICE, 0, "DriverPitchAndPool"},
      // The physical allocation, keyed by its handle; cuMemMap adds nothing.
      {"cuMemCreate", 0, 2097152, v1::KIND_CUDA_DEVICE, 0, "DriverVirtualMemory"},
  };
  ExpectCudaRecords(shimmed, expected);
  ASSERT_EQ(shimmed.snapshots.size(), 1u);
  const v1::Snapshot& snapshot = shimmed.snapshots[0];
  ExpectTotalsMatchRows(snapshot, expected);
  // Counted once: the runtime's nested driver calls add no record, and the
  // allocated/freed counts are the program's calls (freed: cudaFree,
  // cudaFreeAsync, cuMemFree_v2, cuMemRelease, and of the pitched and pool
  // ones cudaFree, cudaFreeAsync, cudaFree; cudaFreeHost), failures none.
  EXPECT_EQ(TotalsFor(snapshot, v1::KIND_CUDA_DEVICE).allocated_count(), 9u + 4u + 3u);
  EXPECT_EQ(TotalsFor(snapshot, v1::KIND_CUDA_DEVICE).freed_count(), 4u + 3u);
  EXPECT_EQ(TotalsFor(snapshot, v1::KIND_CUDA_HOST).allocated_count(), 4u + 1u);
  EXPECT_EQ(TotalsFor(snapshot, v1::KIND_CUDA_HOST).freed_count(), 1u);
  EXPECT_EQ(TotalsFor(snapshot, v1::KIND_CUDA_MANAGED).allocated_count(), 2u);
  EXPECT_EQ(TotalsFor(snapshot, v1::KIND_CUDA_MANAGED).freed_count(), 0u);
  // The fakes' own host memory: 15 live driver blocks and the runtime's
  // context, all gpu-driver-host.
  ExpectBookkeepingIsDriverHost(snapshot, 15, 0);
  EXPECT_EQ(proc::AllocationsOfSize(snapshot, kRuntimeContext).size(), 1u);
  for (const tool::Allocation& row : proc::AllocationsOfSize(snapshot, kRuntimeContext)) {
    EXPECT_EQ(row.kind, v1::KIND_GPU_DRIVER_HOST);
  }
  EXPECT_EQ(LiveBytes(snapshot, v1::KIND_GPU_DRIVER_HOST),
            15 * kDriverBookkeeping + kRuntimeContext);
}

// --- The static-runtime route (dlsym + cuGetProcAddress), on the fake. -----

TEST(CudaFakeDriverApi, DlsymAndGetProcAddressPointersRecordEveryAllocationOnce) {
  const Outcome plain = RunFixture("cuda_driver_api_app", false);
  const Outcome shimmed = RunFixture("cuda_driver_api_app", true);
  ASSERT_EQ(plain.run.exit_code, 0) << plain.run.stdout_data << plain.run.stderr_data;
  EXPECT_EQ(shimmed.run.exit_code, 0) << shimmed.run.stderr_data;
  EXPECT_EQ(ComparableOutput(shimmed.run.stdout_data), ComparableOutput(plain.run.stdout_data));
  EXPECT_EQ(shimmed.run.stderr_data, plain.run.stderr_data);
  // Function pointer identity survives the wrapping.
  for (const char* same : {"same alloc=1", "same free=1", "same get_proc_v2=1",
                           "same dlsym_again=1", "same alloc_pitch=1"}) {
    EXPECT_NE(shimmed.run.stdout_data.find(same), std::string::npos) << same;
  }

  const std::vector<Expected> expected = {
      {"dlsym:cuMemAlloc_v2", 0, 111111, v1::KIND_CUDA_DEVICE, 0, "ThroughDlsym"},
      {"proc:cuMemAlloc", 0, 333333, v1::KIND_CUDA_DEVICE, 0, "ThroughProcAddress"},
      {"proc:cuMemHostAlloc", 0, 44444, v1::KIND_CUDA_HOST, 2, "ThroughProcAddress"},
      {"proc:cuMemAllocManaged", 0, 66666, v1::KIND_CUDA_MANAGED, 0, "ThroughProcAddress"},
      {"proc:cuMemAllocAsync", 0, 77777, v1::KIND_CUDA_DEVICE, 0, "ThroughProcAddress"},
      {"proc:cuMemAllocAsync_ptsz", 0, 88888, v1::KIND_CUDA_DEVICE, 0, "ThroughProcAddress"},
      {"proc:cuMemCreate", 0, 4194304, v1::KIND_CUDA_DEVICE, 0, "ThroughVirtualMemory"},
      // Pitched: *pitch * height (3000 -> 3072, 513 -> 1024).
      {"proc:cuMemAllocPitch", 0, 6 * kPitchAlignment * 7, v1::KIND_CUDA_DEVICE, 0,
       "ThroughPitchAndPool"},
      {"dlsym:cuMemAllocPitch_v2", 0, 2 * kPitchAlignment * 5, v1::KIND_CUDA_DEVICE, 0,
       "ThroughPitchAndPool"},
      {"proc:cuMemAllocFromPoolAsync", 0, 65432, v1::KIND_CUDA_DEVICE, 0, "ThroughPitchAndPool"},
      {"proc:cuMemAllocFromPoolAsync_ptsz", 0, 54321, v1::KIND_CUDA_DEVICE, 0,
       "ThroughPitchAndPool"},
  };
  ExpectCudaRecords(shimmed, expected);
  ASSERT_EQ(shimmed.snapshots.size(), 1u);
  const v1::Snapshot& snapshot = shimmed.snapshots[0];
  ExpectTotalsMatchRows(snapshot, expected);
  // Allocated: the 11 live ones, dlsym's freed 2222, proc's freed host 5555,
  // the freed _ptsz 9999 and 1212, the released 1 MiB handle, the freed
  // pool 7070 and pitched 10x10.
  EXPECT_EQ(TotalsFor(snapshot, v1::KIND_CUDA_DEVICE).allocated_count(), 9u + 4u + 2u);
  EXPECT_EQ(TotalsFor(snapshot, v1::KIND_CUDA_DEVICE).freed_count(), 4u + 2u);
  EXPECT_EQ(TotalsFor(snapshot, v1::KIND_CUDA_HOST).allocated_count(), 2u);
  EXPECT_EQ(TotalsFor(snapshot, v1::KIND_CUDA_HOST).freed_count(), 1u);
  // The v1 ABI (cudaVersion 2000) is handed out unwrapped: its allocation
  // is not recorded, and the driver's bookkeeping inside it is (as far as
  // the shim can tell) the program's heap.
  const uint64_t v1_pointer = Pointer(shimmed.run.stdout_data, "proc:cuMemAlloc(v1)");
  for (const tool::Allocation& row : CudaRows(snapshot)) {
    EXPECT_NE(row.size, 12345u) << "v1 allocation at 0x" << std::hex << v1_pointer;
  }
  ExpectBookkeepingIsDriverHost(snapshot, 11, 1);
}

// --- dlsym transparency. ---------------------------------------------------

TEST(CudaDlsymHook, DlsymBehavesAsWithoutTheShim) {
  const Outcome plain = RunFixture("dlsym_probe_app", false);
  const Outcome shimmed = RunFixture("dlsym_probe_app", true);
  ASSERT_EQ(plain.run.exit_code, 0) << plain.run.stderr_data;
  EXPECT_EQ(shimmed.run.exit_code, 0) << shimmed.run.stderr_data;
  EXPECT_EQ(shimmed.run.stdout_data, plain.run.stdout_data);
  EXPECT_EQ(shimmed.run.stderr_data, plain.run.stderr_data);
  // What the program must have seen (so a broken fixture cannot pass).
  const std::string& out = plain.run.stdout_data;
  for (const char* line :
       {"linked=A\n", "next_from_a=B\n", "next_from_main=A\n", "default=A\n", "handle_b=B\n",
        "pointer_next=A\n", "dlvsym_default=V\n", "dlerror_again=(null)\n",
        "cuda cudaMalloc=null error=1\n", "cuda cuMemAlloc_v2=null error=1\n"}) {
    EXPECT_NE(out.find(line), std::string::npos) << line << " in\n" << out;
  }
  // dlerror names the object that called dlsym: the caller's return
  // address reached the real dlsym unchanged.
  EXPECT_NE(out.find("missing_default=null [" + FixturePath("dlsym_probe_app") +
                     ": undefined symbol: retain_probe_missing]"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("missing_from_a=[" + FixtureLibraryPath("dlsym_probe_a") +
                     ": undefined symbol: retain_probe_missing]"),
            std::string::npos)
      << out;
}

TEST(CudaDlsymHook, TrampolineJumpsToTheRealDlsym) {
  RunOptions options;
  options.argv = {"/usr/bin/objdump", "-d", "--no-show-raw-insn", "--disassemble=dlsym",
                  ShimPath()};
  const RunResult run = test::Run(options);
  if (run.exit_code != 0) GTEST_SKIP() << "objdump not available: " << run.stderr_data;
  const std::string& text = run.stdout_data;
  const size_t start = text.find("<dlsym>:");
  ASSERT_NE(start, std::string::npos) << text;
  const std::string body = text.substr(start);
  // The only call is to the router; the function ends in an indirect jump
  // (the real dlsym entered with the caller's return address) and never
  // returns itself.
  EXPECT_NE(body.find("call"), std::string::npos);
  EXPECT_NE(body.find("<RetainDlsymRoute>"), std::string::npos) << body;
  EXPECT_EQ(body.find("call", body.find("call") + 1), std::string::npos) << body;
  EXPECT_NE(body.find("jmp    *%rax"), std::string::npos) << body;
  EXPECT_EQ(body.find("ret"), std::string::npos) << body;
}

// --- The real runtime, without a driver. -----------------------------------

void ExpectRealRuntimeUnchanged(const std::string& fixture) {
  if (!RETAIN_HAVE_CUDA_TOOLKIT) {
    GTEST_SKIP() << "the CUDA toolkit is not installed under " RETAIN_CUDA_ROOT
                 << " (not a Debian package; the fake-library tests cover the success paths)";
  }
  const Outcome plain = RunFixture(fixture, false);
  const Outcome shimmed = RunFixture(fixture, true);
  // No driver here: every allocation fails (cudaErrorInsufficientDriver).
  ASSERT_NE(plain.run.stdout_data.find("call cudaMalloc rc="), std::string::npos)
      << plain.run.stdout_data;
  ASSERT_EQ(plain.run.stdout_data.find("call cudaMalloc rc=0 "), std::string::npos)
      << "a driver is present: " << plain.run.stdout_data;
  EXPECT_EQ(shimmed.run.exit_code, plain.run.exit_code);
  EXPECT_EQ(shimmed.run.term_signal, plain.run.term_signal);
  EXPECT_EQ(shimmed.run.stdout_data, plain.run.stdout_data);
  EXPECT_EQ(shimmed.run.stderr_data, plain.run.stderr_data);
  ASSERT_EQ(shimmed.snapshots.size(), 1u);
  const v1::Snapshot& snapshot = shimmed.snapshots[0];
  EXPECT_TRUE(CudaRows(snapshot).empty());
  for (v1::Kind kind : {v1::KIND_CUDA_DEVICE, v1::KIND_CUDA_HOST, v1::KIND_CUDA_MANAGED}) {
    EXPECT_EQ(TotalsFor(snapshot, kind).allocated_count(), 0u) << tool::KindName(kind);
  }
}

TEST(CudaRealRuntime, SharedRuntimeWithoutDriverFailsAsWithoutShim) {
  ExpectRealRuntimeUnchanged("cuda_real_shared");
}

TEST(CudaRealRuntime, StaticRuntimeWithoutDriverFailsAsWithoutShim) {
  ExpectRealRuntimeUnchanged("cuda_real_static");
}

}  // namespace
}  // namespace retain::test
