// file_output: the snapshot file as it is written (snapshot/writer.h): the
// top-level message buffer streamed to the temporary file in large pieces,
// with the length and CRC-32 of every byte written, and the footer
// (Snapshot.footer, snapshot/crc32.h) that ends the file. The temporary
// name, the rename into place and the failure record are the writer's
// (snapshot/writer.cc).
//
// Thread and signal contract: one Output per snapshot, used by the writer's
// thread alone with the writer's mutex held; writes through base/files.h
// (own_fds' lock), so never from a signal handler or a hook. Buffers are
// arena pages, never the host heap.
#ifndef RETAIN_SHIM_SRC_SNAPSHOT_FILE_OUTPUT_H_
#define RETAIN_SHIM_SRC_SNAPSHOT_FILE_OUTPUT_H_

#include <cstddef>
#include <cstdint>

#include "base/files.h"
#include "snapshot/crc32.h"
#include "snapshot/wire_encoder.h"

namespace retain::shim {

inline constexpr size_t kFlushBytes = size_t{1} << 20;

// Streams the top-level buffer to the file in large pieces, keeping the
// length and CRC-32 of everything written for the footer.
class Output {
 public:
  explicit Output(int file) : file_(file) {}
  ProtoBuffer& buffer() { return buffer_; }
  bool MaybeFlush() { return buffer_.size() < kFlushBytes || Flush(); }
  bool Flush() {
    if (buffer_.failed()) return false;
    if (!WriteAllToShimFile(file_, buffer_.data(), buffer_.size())) return false;
    crc_ = Crc32Update(crc_, buffer_.data(), buffer_.size());
    length_ += buffer_.size();
    buffer_.Clear();
    return true;
  }
  // Flushes, then ends the file with the footer (Header.ends_with_footer).
  bool Finish() {
    if (!Flush()) return false;
    uint8_t footer[kFooterSize];
    EncodeFooter(length_, crc_, footer);
    return WriteAllToShimFile(file_, footer, sizeof(footer));
  }

 private:
  int file_;  // a own_fds handle
  ProtoBuffer buffer_;
  uint64_t length_ = 0;
  uint32_t crc_ = kCrc32Initial;
};

}  // namespace retain::shim

#endif  // RETAIN_SHIM_SRC_SNAPSHOT_FILE_OUTPUT_H_
