// higher: the header base/lower.h must not include.
