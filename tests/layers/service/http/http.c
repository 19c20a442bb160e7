#include "app/app.h"
#include "net/net.h"
#include "grpc/grpc.h" /* bad: protocols do not see each other */
#include "net/loop.h" /* bad: not the face of net/ */
#include <hiredis/hiredis.h> /* bad: a library of redis/ */
