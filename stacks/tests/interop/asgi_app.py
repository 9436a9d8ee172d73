"""uvicorn (h11) + starlette for the interop tests (stacks/tests/interop/main.rs).

    python3 asgi_app.py

Listens on 127.0.0.1:0 the way `uvicorn app --port N` does, prints
"READY <port>" on stdout, and serves with uvicorn's h11 protocol on the
asyncio loop, which sets TCP_NODELAY on every connection. With
--sockets-without-nodelay it binds the way `uvicorn --workers N` (and
`--reload`) do instead: the socket is made by uvicorn's Config.bind_socket,
and its connections run without TCP_NODELAY (Nagle on). Routes:

  GET /stream?len=N  N random bytes through starlette's StreamingResponse,
                     16 KiB per piece: chunked, and uvicorn writes the final
                     0\\r\\n\\r\\n in its own transport.write() after the last
                     data chunk (h11's EndOfMessage).
  GET /cl?len=N      N random bytes through starlette's Response
                     (Content-Length).
  GET /stats         JSON counters, its own connections excluded.

Counted at the server: `accepted` TCP connections (connection_made of the h11
protocol), `served` connections that carried a request other than /stats,
`requests` other than /stats.
"""

import os
import sys
import threading

import uvicorn
from starlette.applications import Starlette
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from uvicorn.protocols.http.h11_impl import H11Protocol

PIECE = 16 * 1024
DATA = os.urandom(1 << 20)
COUNTS = {"accepted": 0, "stats_connections": 0, "served": 0, "requests": 0}
# Client port -> state of the connection from that port. A port belongs to
# one open connection at a time, so the entry is replaced on each connect.
CONNECTIONS = {}


class CountingH11Protocol(H11Protocol):
    def connection_made(self, transport):
        COUNTS["accepted"] += 1
        peer = transport.get_extra_info("peername")
        CONNECTIONS[peer[1]] = {"served": False, "stats": False}
        super().connection_made(transport)


def connection(request):
    return CONNECTIONS.setdefault(request.client.port, {"served": False, "stats": False})


def length(request):
    return min(int(request.query_params.get("len", "0")), len(DATA))


def count_request(request):
    COUNTS["requests"] += 1
    state = connection(request)
    if not state["served"]:
        state["served"] = True
        COUNTS["served"] += 1


async def stream(request):
    count_request(request)
    n = length(request)

    async def pieces():
        for off in range(0, n, PIECE):
            yield DATA[off : min(off + PIECE, n)]

    return StreamingResponse(pieces(), media_type="application/octet-stream")


async def content_length(request):
    count_request(request)
    return Response(DATA[: length(request)], media_type="application/octet-stream")


async def stats(request):
    state = connection(request)
    if not state["stats"]:
        state["stats"] = True
        COUNTS["stats_connections"] += 1
    return JSONResponse(
        {
            "accepted": COUNTS["accepted"] - COUNTS["stats_connections"],
            "served": COUNTS["served"],
            "requests": COUNTS["requests"],
            "uvicorn": uvicorn.__version__,
        }
    )


app = Starlette(
    routes=[Route("/stream", stream), Route("/cl", content_length), Route("/stats", stats)]
)


def exit_with_parent():
    # The test process holds our stdin; it closes when the test goes away.
    sys.stdin.read()
    os._exit(0)


class ReportingServer(uvicorn.Server):
    """Prints the port it listens on once it is ready."""

    async def startup(self, sockets=None):
        await super().startup(sockets)
        if self.started:
            port = self.servers[0].sockets[0].getsockname()[1]
            print(f"READY {port}", flush=True)


def main():
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=0,
        http=CountingH11Protocol,
        loop="asyncio",
        lifespan="off",
        access_log=False,
        log_level="warning",
        # `--timeout-keep-alive S`, as uvicorn's command line (default 5).
        timeout_keep_alive=float(sys.argv[sys.argv.index("--timeout-keep-alive") + 1])
        if "--timeout-keep-alive" in sys.argv
        else 5,
    )
    threading.Thread(target=exit_with_parent, daemon=True).start()
    if "--sockets-without-nodelay" in sys.argv:
        # What `uvicorn --workers N` and `--reload` do: the parent binds the
        # socket (Config.bind_socket: protocol 0), and asyncio sets
        # TCP_NODELAY only on sockets of protocol IPPROTO_TCP.
        sock = config.bind_socket()
        print(f"READY {sock.getsockname()[1]}", flush=True)
        uvicorn.Server(config).run(sockets=[sock])
    else:
        # `uvicorn app --port N`: asyncio binds, every connection has TCP_NODELAY.
        ReportingServer(config).run()


if __name__ == "__main__":
    main()
