"""Fake servers of the platforms and providers, on 127.0.0.1."""

from __future__ import annotations

from http.server import ThreadingHTTPServer


class HTTPServer(ThreadingHTTPServer):
    """A threaded HTTP server whose listen queue takes a burst of connections, as a real
    platform's does: with the standard library's 5, the sixth of 50 connections opened at
    once waited for the kernel's retry, a second later."""

    request_queue_size = 128
