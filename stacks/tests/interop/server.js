// Node http.createServer for the interop tests (stacks/tests/interop/main.rs).
//
//   node server.js [--keep-alive-timeout MS]
//
// Listens on 127.0.0.1:0 and prints "READY <port>" on stdout. Routes:
//   GET /chunked?len=N  N random bytes in several res.write() calls (chunked):
//                       pieces of min(16 KiB, ceil(N/4)), waiting for 'drain'
//                       when write() says the buffer is full.
//   GET /cl?len=N       N random bytes with Content-Length, one res.end().
//   GET /sse            text/event-stream, one event every 20 ms, never ends.
//   GET /stats          JSON counters (below); its own connections excluded.
//
// Counters, counted at the server: `accepted` TCP connections ('connection'
// events), `served` connections that carried at least one request other than
// /stats, `requests` (other than /stats), `sse_active` streams still open.
'use strict';

const http = require('node:http');
const crypto = require('node:crypto');
const { once } = require('node:events');

const args = process.argv.slice(2);
const flag = (name) => {
  const i = args.indexOf(name);
  return i >= 0 ? Number(args[i + 1]) : undefined;
};

const DATA = crypto.randomBytes(1 << 20);
const counts = { accepted: 0, stats_connections: 0, served: 0, requests: 0, sse_started: 0, sse_active: 0 };

const server = http.createServer({ noDelay: true }, (req, res) => {
  const url = new URL(req.url, 'http://localhost');
  const state = req.socket.interop;
  if (url.pathname === '/stats') {
    if (!state.stats) {
      state.stats = true;
      counts.stats_connections += 1;
    }
    const body = JSON.stringify({
      accepted: counts.accepted - counts.stats_connections,
      served: counts.served,
      requests: counts.requests,
      sse_started: counts.sse_started,
      sse_active: counts.sse_active,
      keep_alive_timeout_ms: server.keepAliveTimeout,
    });
    res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
    res.end(body);
    return;
  }
  counts.requests += 1;
  if (!state.served) {
    state.served = true;
    counts.served += 1;
  }
  const len = Math.min(Number(url.searchParams.get('len') || 0), DATA.length);
  switch (url.pathname) {
    case '/cl':
      res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': len });
      res.end(DATA.subarray(0, len));
      return;
    case '/chunked':
      writeChunked(res, len).catch(() => res.destroy());
      return;
    case '/sse':
      sse(res);
      return;
    default:
      res.writeHead(404, { 'content-length': 0 });
      res.end();
  }
});

async function writeChunked(res, len) {
  res.writeHead(200, { 'content-type': 'application/octet-stream' });
  const piece = Math.max(1, Math.min(16 * 1024, Math.ceil(len / 4)));
  for (let off = 0; off < len; off += piece) {
    if (!res.write(DATA.subarray(off, Math.min(off + piece, len)))) {
      await once(res, 'drain');
    }
  }
  res.end();
}

function sse(res) {
  counts.sse_started += 1;
  counts.sse_active += 1;
  res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
  let n = 0;
  const timer = setInterval(() => {
    n += 1;
    res.write(`id: ${n}\ndata: event ${n}\n\n`);
  }, 20);
  res.on('close', () => {
    clearInterval(timer);
    counts.sse_active -= 1;
  });
}

server.on('connection', (socket) => {
  counts.accepted += 1;
  socket.interop = { served: false, stats: false };
});

const keepAlive = flag('--keep-alive-timeout');
if (keepAlive !== undefined) {
  server.keepAliveTimeout = keepAlive;
}

server.listen(0, '127.0.0.1', () => {
  process.stdout.write(`READY ${server.address().port}\n`);
});
// Exit with the test process: its end of our stdin closes when it goes away.
process.stdin.on('end', () => process.exit(0));
process.stdin.resume();
