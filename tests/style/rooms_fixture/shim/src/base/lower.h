// lower: a base header that reaches up into hooks/, which check_rooms must refuse.
#include "hooks/higher.h"
