#include <libpq-fe.h>

// PG_DIAG_SQLSTATE is a character-literal macro ('C'), which Swift does not import.
static const int calling_pg_diag_sqlstate = PG_DIAG_SQLSTATE;
