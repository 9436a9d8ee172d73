"""uvicorn (h11) with a plain ASGI app, for the keepalive bench
(`cargo bench --bench keepalive`, benches/common/h1servers.rs).

    python3 h1asgi.py [--timeout-keep-alive S] [--len N]

uvicorn's `--timeout-keep-alive S` (default 1 here; uvicorn's own is 5),
its h11 protocol on the asyncio loop, no access log. Listens on
127.0.0.1:0 the way `uvicorn app --port N` does, prints
"READY <port> uvicorn <version> h11 <version>" on stdout. Every request,
whatever its path and method, has its body read to its end and is answered
200 with N bytes (default 65536) and a content-length. Each request the app
receives is written on stdout as "REQ <client port> <method> <request
target>" before it is answered, so that the bench can tell which requests
reached the server, which reached it twice (a unique id in the query) and on
which connection (the client's port). Exits when its stdin closes (the
bench went away). Needs uvicorn only (`bash benches/common/keepalive.sh`
installs it in a venv under target/).
"""

import argparse
import os
import sys
import threading

import h11
import uvicorn

ARGS = argparse.ArgumentParser()
ARGS.add_argument("--timeout-keep-alive", type=int, default=1)
ARGS.add_argument("--len", type=int, default=65536)
OPTS = ARGS.parse_args()
BODY = b"u" * OPTS.len
HEADERS = [(b"content-type", b"application/octet-stream"), (b"content-length", str(len(BODY)).encode())]


async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    query = scope["query_string"].decode("latin-1")
    target = scope["raw_path"].decode("latin-1") + ("?" + query if query else "")
    sys.stdout.write(f"REQ {scope['client'][1]} {scope['method']} {target}\n")
    sys.stdout.flush()
    more = True
    while more:
        message = await receive()
        more = message.get("more_body", False)
    await send({"type": "http.response.start", "status": 200, "headers": HEADERS})
    await send({"type": "http.response.body", "body": BODY})


def exit_with_parent():
    sys.stdin.read()
    os._exit(0)


class ReportingServer(uvicorn.Server):
    """Prints the port it listens on once it is ready."""

    async def startup(self, sockets=None):
        await super().startup(sockets)
        if self.started:
            port = self.servers[0].sockets[0].getsockname()[1]
            print(f"READY {port} uvicorn {uvicorn.__version__} h11 {h11.__version__}", flush=True)


def main():
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=0,
        http="h11",
        loop="asyncio",
        lifespan="off",
        access_log=False,
        log_level="warning",
        timeout_keep_alive=OPTS.timeout_keep_alive,
    )
    threading.Thread(target=exit_with_parent, daemon=True).start()
    ReportingServer(config).run()


if __name__ == "__main__":
    main()
