// wire_encoder: see snapshot/wire_encoder.h.
#include "snapshot/wire_encoder.h"

#include <string.h>

#include "base/arena.h"

namespace retain::shim {

ProtoBuffer::~ProtoBuffer() { UnmapScratchPages(data_, capacity_); }

bool ProtoBuffer::Reserve(size_t extra) {
  if (failed_) return false;
  if (size_ + extra <= capacity_) return true;
  size_t capacity = capacity_ == 0 ? 4096 : capacity_ * 2;
  while (capacity < size_ + extra) capacity *= 2;
  auto* data = static_cast<uint8_t*>(MapScratchPages(capacity));
  if (data == nullptr) {
    failed_ = true;
    return false;
  }
  if (size_ > 0) memcpy(data, data_, size_);
  UnmapScratchPages(data_, capacity_);
  data_ = data;
  capacity_ = capacity;
  return true;
}

void ProtoBuffer::Varint(uint64_t value) {
  if (!Reserve(10)) return;
  while (value >= 0x80) {
    data_[size_++] = static_cast<uint8_t>(value | 0x80);
    value >>= 7;
  }
  data_[size_++] = static_cast<uint8_t>(value);
}

void ProtoBuffer::Tag(uint32_t field, uint32_t wire_type) {
  Varint((static_cast<uint64_t>(field) << 3) | wire_type);
}

void ProtoBuffer::Bytes(const void* data, size_t size) {
  if (size == 0 || !Reserve(size)) return;
  memcpy(data_ + size_, data, size);
  size_ += size;
}

void ProtoBuffer::UintField(uint32_t field, uint64_t value) {
  if (value == 0) return;
  Tag(field, kWireVarint);
  Varint(value);
}

void ProtoBuffer::BytesField(uint32_t field, const void* data, size_t size) {
  if (size == 0) return;
  Tag(field, kWireLengthDelimited);
  Varint(size);
  Bytes(data, size);
}

void ProtoBuffer::StringField(uint32_t field, const char* text) {
  if (text != nullptr) BytesField(field, text, strlen(text));
}

void ProtoBuffer::RepeatedStringField(uint32_t field, const char* text, size_t size) {
  Tag(field, kWireLengthDelimited);
  Varint(size);
  Bytes(text, size);
}

void ProtoBuffer::MessageField(uint32_t field, const ProtoBuffer& message) {
  if (message.failed()) failed_ = true;
  Tag(field, kWireLengthDelimited);
  Varint(message.size());
  Bytes(message.data(), message.size());
}

void ProtoBuffer::PackedField(uint32_t field, const ProtoBuffer& packed) {
  if (packed.size() == 0 && !packed.failed()) return;
  MessageField(field, packed);
}

void EncodeFooter(uint64_t length, uint32_t crc32, uint8_t (&out)[kFooterSize]) {
  constexpr uint32_t kSnapshotFooterField = 15;
  out[0] = static_cast<uint8_t>((kSnapshotFooterField << 3) | kWireLengthDelimited);
  out[1] = kFooterSize - 2;
  out[2] = static_cast<uint8_t>((1 << 3) | kWireFixed64);
  for (int i = 0; i < 8; ++i) out[3 + i] = static_cast<uint8_t>(length >> (8 * i));
  out[11] = static_cast<uint8_t>((2 << 3) | kWireFixed32);
  for (int i = 0; i < 4; ++i) out[12 + i] = static_cast<uint8_t>(crc32 >> (8 * i));
}

}  // namespace retain::shim
