// health_fields_test: the ShimHealth field numbers the shim's writer uses
// (proto/health_fields.h) are proto/retain.proto's, and it names every field.
#include "proto/health_fields.h"

#include <gtest/gtest.h>

#include "retain.pb.h"

namespace retain {
namespace {

// At compile time, against the generated constants.
#define RETAIN_CHECK_HEALTH_CONSTANT(Name, field, number)                               \
  static_assert(health_field::k##Name == v1::ShimHealth::k##Name##FieldNumber, #field); \
  static_assert(health_field::k##Name == (number), #field);
RETAIN_FOR_EACH_HEALTH_FIELD(RETAIN_CHECK_HEALTH_CONSTANT)
#undef RETAIN_CHECK_HEALTH_CONSTANT

TEST(HealthFieldsTest, EveryRowIsAFieldOfShimHealthAndEveryFieldARow) {
  const google::protobuf::Descriptor* health = v1::ShimHealth::descriptor();
  int rows = 0;
#define RETAIN_CHECK_HEALTH_ROW(Name, field, field_number)       \
  ++rows;                                                        \
  ASSERT_NE(health->FindFieldByName(#field), nullptr) << #field; \
  EXPECT_EQ(health->FindFieldByName(#field)->number(), field_number) << #field;
  RETAIN_FOR_EACH_HEALTH_FIELD(RETAIN_CHECK_HEALTH_ROW)
#undef RETAIN_CHECK_HEALTH_ROW
  EXPECT_EQ(rows, health->field_count());
}

}  // namespace
}  // namespace retain
