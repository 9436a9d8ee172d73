// Node 20's http.createServer for the keepalive bench (`cargo bench --bench
// keepalive`, benches/common/h1servers.rs): HTTP/1.1 with an idle timeout.
//
//   node h1server.js [--keep-alive-timeout MS] [--len N]
//
// keepAliveTimeout MS (default 1000; Node's own default is 5000): Node sends
// `Keep-Alive: timeout=<MS/1000>` on every response. Listens on
// 127.0.0.1:0 and prints "READY <port> <node version>" on stdout. Every
// request, whatever its path and method, has its body read to its end and is
// answered 200 with N bytes (default 65536) and a content-length. Each
// request the server read is written on stdout as "REQ <client port>
// <method> <request target>" when it arrives, so that the bench can tell
// which requests reached the server, which reached it twice (a unique id in
// the query) and on which connection (the client's port). Exits when its
// stdin closes (the bench went away).
'use strict';

const http = require('node:http');

const args = process.argv.slice(2);
const flag = (name, fallback) => {
  const i = args.indexOf(name);
  return i >= 0 ? Number(args[i + 1]) : fallback;
};

const BODY = Buffer.alloc(flag('--len', 65536), 'n');

const server = http.createServer({ noDelay: true }, (req, res) => {
  // Pipes are written synchronously on Linux: the line is out before the answer.
  process.stdout.write(`REQ ${req.socket.remotePort} ${req.method} ${req.url}\n`);
  req.resume();
  req.on('end', () => {
    res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': BODY.length });
    res.end(BODY);
  });
});
server.keepAliveTimeout = flag('--keep-alive-timeout', 1000);

server.listen(0, '127.0.0.1', () => {
  process.stdout.write(`READY ${server.address().port} node ${process.version}\n`);
});
process.stdin.on('end', () => process.exit(0));
process.stdin.resume();
