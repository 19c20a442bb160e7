#include "app/app.h"
#include "http/http.h" /* bad: redis sees no protocol */
#include "missing.h" /* bad: not in the tree */
