#ifndef CS_SQLITE_SHIM_H
#define CS_SQLITE_SHIM_H
#include <sqlite3.h>

/// SQLITE_TRANSIENT is a macro casting -1 to a function pointer; Swift cannot import it.
static inline sqlite3_destructor_type _Nonnull cs_sqlite_transient(void) { return SQLITE_TRANSIENT; }
/// SQLITE_STATIC likewise (0 as a function pointer): SQLite uses the caller's bytes without copying.
static inline sqlite3_destructor_type _Nullable cs_sqlite_static(void) { return SQLITE_STATIC; }
/// sqlite3_config is variadic; Swift cannot call it. Turns off SQLite's memory statistics, which
/// otherwise take a global mutex around every allocation SQLite makes. Only valid before SQLite
/// is initialized (returns SQLITE_MISUSE afterwards, changing nothing).
static inline int cs_sqlite_disable_memstatus(void) { return sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0); }
#endif
