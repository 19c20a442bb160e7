"""A client of ratelimitd's HTTP API (standard library only), with ASGI and WSGI middlewares."""
from .client import (Client, Decision, Error, Limit, RateLimited, Reservation, Settlement,
                     Unavailable)
from .middleware import ASGIMiddleware, WSGIMiddleware

__all__ = ["Client", "Decision", "Error", "Limit", "RateLimited", "Reservation", "Settlement",
           "Unavailable", "ASGIMiddleware", "WSGIMiddleware"]
__version__ = "0.1.0"
