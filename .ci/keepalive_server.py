"""A local HTTP/1.1 keep-alive server for .ci/first_command.sh and
.ci/quickstart.sh: answers every GET with 64 KiB (Content-Length, TCP_NODELAY)
on 127.0.0.1, a free port, which it writes to the file named by its first
argument once it listens. With `--tls CERT.pem KEY.pem` after it, HTTPS
(TLS 1.2 and 1.3; with `--tls12` after those, TLS 1.2 and nothing newer).
Runs until killed."""
import http.server
import socket
import sys

BODY = b"x" * (64 * 1024)


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive

    def setup(self):
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(len(BODY)))
        self.end_headers()
        self.wfile.write(BODY)

    def log_message(self, *args):
        pass


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    # A client that drops bodies unread resets connections: not an error here.
    def handle_error(self, request, client_address):
        pass


server = Server(("127.0.0.1", 0), Handler)
if len(sys.argv) in (5, 6) and sys.argv[2] == "--tls":
    import ssl

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(sys.argv[3], sys.argv[4])
    if sys.argv[5:] == ["--tls12"]:
        context.maximum_version = ssl.TLSVersion.TLSv1_2
    server.socket = context.wrap_socket(server.socket, server_side=True)
with open(sys.argv[1] + ".tmp", "w") as f:
    f.write(str(server.server_address[1]))
import os

os.rename(sys.argv[1] + ".tmp", sys.argv[1])
server.serve_forever()
