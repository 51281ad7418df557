#ifndef CS_JWT_SHIM_H
#define CS_JWT_SHIM_H
#include <jwt.h>
#include <stdlib.h>

/// libjwt 1.10 has no jwt_free_str: strings it returns are malloc'd and freed with free().
static inline void cs_jwt_free_string(char * _Nullable s) { free(s); }
#endif
