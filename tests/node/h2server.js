// Node's own HTTP/2 server (cleartext, prior knowledge: h2c) for
// tests/http2_node.rs, through `NodeH2` in tests/support/mod.rs. Node 20, no
// npm packages.
//
//   node h2server.js [--max-streams N] [--max-session-memory MB] [--idle-timeout MS] [--tls CERT KEY] [--tap]
//
// Listens on 127.0.0.1:0, prints "READY <port>" on stdout, and exits when its
// stdin closes (the test process went away). Without --max-streams the
// server keeps Node's defaults: its SETTINGS announce no
// SETTINGS_MAX_CONCURRENT_STREAMS, and a session refuses new streams once it
// holds 10 MB (`maxSessionMemory`). With --max-streams N it announces N.
// With --max-session-memory MB a session holds up to MB megabytes instead
// (Node's `maxSessionMemory`). With --idle-timeout MS a session idle for MS
// (no byte either way) is closed gracefully: GOAWAY NO_ERROR, then the
// connection once its streams are done (counted in idle_closes), as servers
// close idle HTTP/2 connections.
//
// Paths (every response 200 unless said otherwise):
//   /len/N      N bytes with content-length, in 16 KiB writes, each waiting
//               for 'drain' when write() says the stream's buffer is full.
//   /nolen/N    the same without content-length.
//   /whole/N    N bytes with content-length in one end() call, as an app
//               answering with a Buffer does: Node queues the whole body on
//               the stream and sends it as flow control allows.
//   /sse        text/event-stream, one event every 20 ms, never ends.
//   /trickle    application/octet-stream, no content-length, 1 KiB every
//               50 ms, never ends.
//   /stall      a head without content-length (with ?cl=N: content-length N),
//               then nothing until the client resets the stream.
//   /small      "small body\n", with content-length.
//   /calm/N     as /len/N, except one stream in the server's life: the first
//               /calm/ stream to arrive on a session after the client reset
//               two streams of that session (RST_STREAM CANCEL, any path) is
//               refused with RST_STREAM ENHANCE_YOUR_CALM before any head
//               (a rate limit hit once; counted in calm_refused).
//   /stats      the counters below as a flat JSON object; its own sessions and
//               streams are not counted.
//   anything else: 404.
// Endless and stalled responses stop (their timers are cleared) when their
// stream closes, whoever closes it.
//
// Counters (streams and sessions that carried a request other than /stats):
//   streams_opened, streams_open (now), streams_max_open (the most open at
//   once, over all sessions, as JavaScript sees them: a stream's 'close'
//   event can come a little after nghttp2 closed it, so this can exceed the
//   announced limit), streams_ended (closed normally, code NO_ERROR, both
//   sides done; Node itself sends RST_STREAM NO_ERROR after a complete
//   response when the request's side was not read, as here);
//   rst_cancel, rst_stream_closed, rst_no_error, rst_other: streams closed by
//   the client's RST_STREAM, by its code (CANCEL = 8, STREAM_CLOSED = 5,
//   NO_ERROR = 0 before the response was complete, anything else), and
//   rst_other_codes ("code:count ...") for the others. A RST_STREAM for a
//   stream the server has already closed never reaches JavaScript (nghttp2
//   ignores it): late resets, such as h2's STREAM_CLOSED answers to DATA for
//   streams it forgot, are not counted here;
//   streams_closed_by_session: streams closed because their session ended
//   (an error, a GOAWAY, the connection closed);
//   stream_errors: 'error' events on streams;
//   refused: streams the client opened that never reached JavaScript: Node
//   refuses a new stream it cannot hold (its session memory is full) with
//   RST_STREAM ENHANCE_YOUR_CALM before its 'stream' event (and at times
//   fails the session: "The user callback function failed"). Counted per
//   session as the streams the client opened
//   (client stream ids are odd and consecutive: the last id nghttp2
//   processed, `session.state.lastProcStreamID`, says how many) minus those
//   that reached JavaScript;
//   sessions, sessions_closed, session_errors, sessions_broken (sessions that
//   ended with an error or with streams still open), goaways_received (from
//   the client), goaway_codes ("code:count ..."), frame_errors (frames Node
//   failed to send), bytes_written (response body bytes handed to Node);
//   errors: the first few error messages, for the test's failure messages.
'use strict';

const http2 = require('node:http2');

const args = process.argv.slice(2);
const flag = (name) => {
  const i = args.indexOf(name);
  if (i < 0) return undefined;
  const n = Number(args[i + 1]);
  if (!Number.isInteger(n) || n < 0) {
    process.stderr.write(`${name} needs a whole number, got ${args[i + 1]}\n`);
    process.exit(2);
  }
  return n;
};

const { NGHTTP2_NO_ERROR, NGHTTP2_CANCEL, NGHTTP2_STREAM_CLOSED } = http2.constants;
const CHUNK = Buffer.alloc(16 * 1024, 'h');
const KIB = Buffer.alloc(1024, 't');
const SMALL = Buffer.from('small body\n');

const c = {
  streams_opened: 0,
  streams_open: 0,
  streams_max_open: 0,
  streams_ended: 0,
  rst_cancel: 0,
  rst_stream_closed: 0,
  rst_no_error: 0,
  rst_other: 0,
  streams_closed_by_session: 0,
  stream_errors: 0,
  sessions: 0,
  sessions_closed: 0,
  session_errors: 0,
  sessions_broken: 0,
  goaways_received: 0,
  frame_errors: 0,
  bytes_written: 0,
  calm_refused: 0,
  idle_closes: 0,
};
const rstOther = new Map();
const goawayCodes = new Map();
// Refusals of sessions that have closed, and the sessions still open.
let refusedClosed = 0;
const live = new Set();

const bump = (map, key) => map.set(key, (map.get(key) || 0) + 1);
const codes = (map) => [...map].map(([k, v]) => `${k}:${v}`).join(' ');
// Distinct error messages and how often each was seen.
const errors = new Map();
const note = (what, err) => {
  const key = `${what}: ${(err && err.code) || ''} ${(err && err.message) || ''}`.trim();
  if (errors.has(key) || errors.size < 16) bump(errors, key);
};
// Streams the client opened in session `s` that never reached JavaScript:
// client stream ids are odd and consecutive, so the last id nghttp2 processed
// tells how many the client opened.
const refusedIn = (s) => Math.max(0, (lastProc(s) + 1) / 2 - s.seen);
const lastProc = (s) => {
  if (!s.session.destroyed) {
    const id = s.session.state.lastProcStreamID;
    if (Number.isInteger(id)) s.lastProc = Math.max(s.lastProc, id);
  }
  return Math.max(s.lastProc, s.maxId);
};

function stats() {
  let refused = refusedClosed;
  for (const s of live) refused += refusedIn(s);
  return JSON.stringify({
    ...c,
    refused,
    rst_other_codes: codes(rstOther),
    goaway_codes: codes(goawayCodes),
    errors: [...errors].map(([k, n]) => `${k} (x${n})`).join(' | '),
    max_concurrent_streams: maxStreams === undefined ? 'default' : maxStreams,
    tap: args.includes('--tap') ? tap.report() : '',
  });
}

// Writes `n` bytes in 16 KiB writes, waiting for 'drain' when the stream's
// buffer is full; stops when the stream closes.
function pump(stream, n) {
  let left = n;
  const go = () => {
    while (left > 0) {
      if (stream.closed || stream.destroyed) return;
      const piece = left >= CHUNK.length ? CHUNK : CHUNK.subarray(0, left);
      left -= piece.length;
      c.bytes_written += piece.length;
      if (!stream.write(piece)) {
        stream.once('drain', go);
        return;
      }
    }
    if (!stream.closed && !stream.destroyed) stream.end();
  };
  stream.once('close', () => stream.removeListener('drain', go));
  go();
}

// Writes `piece` every `ms` until the stream closes.
function endless(stream, ms, piece) {
  const timer = setInterval(() => {
    if (stream.closed || stream.destroyed) return;
    const data = typeof piece === 'function' ? piece() : piece;
    c.bytes_written += data.length;
    stream.write(data);
  }, ms);
  stream.once('close', () => clearInterval(timer));
}

// Whether /calm/ has refused its one stream.
let calmDone = false;

function serve(stream, path, query, s) {
  const parts = path.split('/');
  switch (parts[1]) {
    case 'calm':
      if (!calmDone && s.cancels >= 2) {
        calmDone = true;
        c.calm_refused += 1;
        stream.close(http2.constants.NGHTTP2_ENHANCE_YOUR_CALM);
        return;
      }
    // falls through: served as /len/N
    case 'len':
    case 'nolen': {
      const n = Number(parts[2]);
      if (parts.length !== 3 || !Number.isInteger(n) || n < 0) break;
      const head = { ':status': 200, 'content-type': 'application/octet-stream' };
      if (parts[1] !== 'nolen') head['content-length'] = n;
      stream.respond(head);
      pump(stream, n);
      return;
    }
    case 'sse': {
      stream.respond({ ':status': 200, 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
      let i = 0;
      endless(stream, 20, () => Buffer.from(`id: ${++i}\ndata: event ${i}\n\n`));
      return;
    }
    case 'trickle':
      stream.respond({ ':status': 200, 'content-type': 'application/octet-stream' });
      endless(stream, 50, KIB);
      return;
    case 'stall': {
      const head = { ':status': 200, 'content-type': 'application/octet-stream' };
      const cl = query.get('cl');
      if (cl !== null) head['content-length'] = Number(cl);
      stream.respond(head);
      return;
    }
    case 'whole': {
      const n = Number(parts[2]);
      if (parts.length !== 3 || !Number.isInteger(n) || n < 0) break;
      stream.respond({ ':status': 200, 'content-type': 'application/octet-stream', 'content-length': n });
      c.bytes_written += n;
      stream.end(Buffer.alloc(n, 'w'));
      return;
    }
    case 'small':
      stream.respond({ ':status': 200, 'content-type': 'text/plain', 'content-length': SMALL.length });
      c.bytes_written += SMALL.length;
      stream.end(SMALL);
      return;
    default:
      break;
  }
  stream.respond({ ':status': 404, 'content-length': 0 });
  stream.end();
}

const maxStreams = flag('--max-streams');
const options = {};
if (maxStreams !== undefined) options.settings = { maxConcurrentStreams: maxStreams };
const maxSessionMemory = flag('--max-session-memory');
if (maxSessionMemory !== undefined) options.maxSessionMemory = maxSessionMemory;
const idleTimeout = flag('--idle-timeout');
// --tls CERT.pem KEY.pem: HTTP/2 over TLS (ALPN h2 only) instead of h2c.
const tls = args.indexOf('--tls');
if (tls >= 0) {
  const fs = require('node:fs');
  options.cert = fs.readFileSync(args[tls + 1]);
  options.key = fs.readFileSync(args[tls + 2]);
}
const server = tls >= 0 ? http2.createSecureServer(options) : http2.createServer(options);

server.on('session', (session) => {
  if (idleTimeout !== undefined) {
    session.setTimeout(idleTimeout, () => {
      c.idle_closes += 1;
      session.close();
    });
  }
  const s = { session, seen: 0, maxId: -1, lastProc: -1, counted: false, open: 0, errored: false, cancels: 0 };
  // The last stream id nghttp2 processed is readable only until the session
  // is destroyed: note it just before, whatever destroys it (an nghttp2
  // error, the socket closing, a GOAWAY).
  const destroy = session.destroy;
  session.destroy = function (...a) {
    lastProc(s);
    return destroy.apply(this, a);
  };
  session.on('error', (err) => {
    s.errored = true;
    if (s.counted) {
      c.session_errors += 1;
      note('session error', err);
    }
  });
  session.on('goaway', (code) => {
    if (s.counted) {
      c.goaways_received += 1;
      bump(goawayCodes, code);
    }
  });
  session.on('frameError', (type, code, id) => {
    if (s.counted) {
      c.frame_errors += 1;
      note('frame error', { code: `type ${type} code ${code} stream ${id}`, message: '' });
    }
  });
  session.on('close', () => {
    if (!s.counted) return;
    live.delete(s);
    refusedClosed += refusedIn(s);
    c.sessions_closed += 1;
    if (s.errored || s.open > 0) c.sessions_broken += 1;
  });
  session.on('stream', (stream, headers) => {
    const url = new URL(headers[':path'] || '/', 'http://localhost');
    if (url.pathname === '/stats') {
      stream.on('error', () => {});
      const body = Buffer.from(stats());
      stream.respond({ ':status': 200, 'content-type': 'application/json', 'content-length': body.length });
      stream.end(body);
      return;
    }
    if (!s.counted) {
      s.counted = true;
      c.sessions += 1;
      live.add(s);
    }
    s.seen += 1;
    s.maxId = Math.max(s.maxId, stream.id);
    s.open += 1;
    c.streams_opened += 1;
    c.streams_open += 1;
    c.streams_max_open = Math.max(c.streams_max_open, c.streams_open);
    // A reset with a code other than NO_ERROR and CANCEL is an 'error' on the
    // stream: without a listener it would take the process down.
    stream.on('error', (err) => {
      c.stream_errors += 1;
      if (err.code !== 'ERR_HTTP2_STREAM_ERROR') note('stream error', err);
    });
    stream.once('close', () => {
      s.open -= 1;
      c.streams_open -= 1;
      const code = stream.rstCode;
      if (session.destroyed || session.closed) {
        c.streams_closed_by_session += 1;
      } else if (code === NGHTTP2_NO_ERROR) {
        // Both sides done; or the client reset with NO_ERROR before the
        // whole response was sent ('aborted': before the response's end()
        // call; not finished: with writes still queued).
        if (stream.aborted || !stream.writableFinished) c.rst_no_error += 1;
        else c.streams_ended += 1;
      } else if (code === NGHTTP2_CANCEL) {
        c.rst_cancel += 1;
        s.cancels += 1;
      } else if (code === NGHTTP2_STREAM_CLOSED) {
        c.rst_stream_closed += 1;
      } else {
        c.rst_other += 1;
        bump(rstOther, code);
      }
    });
    serve(stream, url.pathname, url.searchParams, s);
  });
});
server.on('sessionError', () => {});

// --tap (for investigations, not used by the tests): clients connect to a
// TCP relay in front of the server that reads the frames going through it,
// reported in /stats as `tap`. The relay adds a hop and its socket buffers:
// more bytes can be in flight than without it.
const FRAME = { DATA: 0, HEADERS: 1, RST_STREAM: 3, SETTINGS: 4, GOAWAY: 7 };
const tap = {
  connections: [],
  // The connections that carried more than one request (not /stats alone).
  counted() {
    return this.connections.filter((t) => t.c2s_headers > 1);
  },
  report() {
    const sum = (key) => this.counted().reduce((n, t) => n + t[key], 0);
    const merge = (key) => {
      const all = new Map();
      for (const t of this.counted()) for (const [k, v] of t[key]) all.set(k, (all.get(k) || 0) + v);
      return codes(all);
    };
    return (
      `connections ${this.counted().length}; client: ${sum('c2s_headers')} HEADERS, ` +
      `RST_STREAM [${merge('c2s_rst')}] of which ${sum('c2s_rst_late')} for streams already reset or ended, ` +
      `GOAWAY [${merge('c2s_goaway')}]; server: SETTINGS max_concurrent_streams ` +
      `[${merge('s2c_max_streams')}], RST_STREAM [${merge('s2c_rst')}], GOAWAY [${merge('s2c_goaway')}], ` +
      `${sum('s2c_data_bytes')} DATA bytes, of which ${sum('s2c_data_after_rst')} frames / ` +
      `${sum('s2c_bytes_after_rst')} bytes for streams the client had reset`
    );
  },
};

// Calls `frame(type, flags, id, payload)` for each frame of a direction of
// an HTTP/2 connection, payload only for the small frames it needs.
function frames(skip, frame) {
  let head = Buffer.alloc(0);
  let want = -1; // payload bytes still to come for the current frame
  let keep = null; // the payload kept, or null when skipped
  let cur = null;
  return (chunk) => {
    let at = 0;
    while (at < chunk.length) {
      if (skip > 0) {
        const n = Math.min(skip, chunk.length - at);
        skip -= n;
        at += n;
        continue;
      }
      if (want < 0) {
        const n = Math.min(9 - head.length, chunk.length - at);
        head = Buffer.concat([head, chunk.subarray(at, at + n)]);
        at += n;
        if (head.length < 9) return;
        cur = { len: head.readUIntBE(0, 3), type: head[3], flags: head[4], id: head.readUInt32BE(5) & 0x7fffffff };
        head = Buffer.alloc(0);
        want = cur.len;
        keep = cur.type === FRAME.DATA || cur.type === FRAME.HEADERS ? null : [];
      }
      const n = Math.min(want, chunk.length - at);
      if (keep) keep.push(chunk.subarray(at, at + n));
      want -= n;
      at += n;
      if (want === 0) {
        frame(cur.type, cur.flags, cur.id, keep ? Buffer.concat(keep) : null, cur.len);
        want = -1;
      }
    }
  };
}

function relay(client, port) {
  const t = {
    c2s_headers: 0,
    c2s_rst: new Map(),
    c2s_rst_late: 0,
    c2s_goaway: new Map(),
    s2c_max_streams: new Map(),
    s2c_rst: new Map(),
    s2c_goaway: new Map(),
    s2c_data_bytes: 0,
    s2c_data_after_rst: 0,
    s2c_bytes_after_rst: 0,
  };
  tap.connections.push(t);
  const reset = new Set(); // streams the client reset
  const done = new Set(); // streams the server ended or reset
  const upstream = require('node:net').connect(port, '127.0.0.1');
  client.setNoDelay(true);
  upstream.setNoDelay(true);
  const c2s = frames(24, (type, flags, id, payload) => {
    if (type === FRAME.HEADERS) t.c2s_headers += 1;
    if (type === FRAME.RST_STREAM) {
      if (reset.has(id) || done.has(id)) t.c2s_rst_late += 1;
      reset.add(id);
      bump(t.c2s_rst, payload.readUInt32BE(0));
    }
    if (type === FRAME.GOAWAY) bump(t.c2s_goaway, `${payload.readUInt32BE(4)}(${payload.subarray(8)})`);
  });
  const s2c = frames(0, (type, flags, id, payload, len) => {
    if (type === FRAME.DATA) {
      t.s2c_data_bytes += len;
      if (reset.has(id)) {
        t.s2c_data_after_rst += 1;
        t.s2c_bytes_after_rst += len;
      }
      if (flags & 1) done.add(id);
    }
    if (type === FRAME.HEADERS && flags & 1) done.add(id);
    if (type === FRAME.RST_STREAM) {
      done.add(id);
      bump(t.s2c_rst, payload.readUInt32BE(0));
    }
    if (type === FRAME.GOAWAY) bump(t.s2c_goaway, `${payload.readUInt32BE(4)}(${payload.subarray(8)})`);
    if (type === FRAME.SETTINGS && !(flags & 1)) {
      let announced = 'none';
      for (let i = 0; i + 6 <= payload.length; i += 6) {
        if (payload.readUInt16BE(i) === 3) announced = payload.readUInt32BE(i + 2);
      }
      bump(t.s2c_max_streams, announced);
    }
  });
  client.on('data', (d) => c2s(d));
  upstream.on('data', (d) => s2c(d));
  client.pipe(upstream);
  upstream.pipe(client);
  const end = () => {
    client.destroy();
    upstream.destroy();
  };
  client.on('error', end);
  upstream.on('error', end);
  client.on('close', end);
  upstream.on('close', end);
}

server.listen(0, '127.0.0.1', () => {
  if (!args.includes('--tap')) {
    process.stdout.write(`READY ${server.address().port}\n`);
    return;
  }
  const port = server.address().port;
  const front = require('node:net').createServer((client) => relay(client, port));
  front.listen(0, '127.0.0.1', () => process.stdout.write(`READY ${front.address().port}\n`));
});
// Exit with the test process: its end of our stdin closes when it goes away.
process.stdin.on('end', () => process.exit(0));
process.stdin.on('close', () => process.exit(0));
process.stdin.resume();
