// Command goserver is the Go 1.27 net/http HTTP/2 server the http2 bench
// measures the clients against (docs/BENCHMARKS.md section 9): cleartext
// HTTP/2 with prior knowledge (h2c), net/http's own HTTP/2 server with its
// defaults, the standard library only. Its paths are those of the Node
// server of the tests (tests/node/h2server.js).
//
//	goserver [-max-streams N] [-tls-cert CERT.pem -tls-key KEY.pem]
//
// Listens on 127.0.0.1:0, prints "READY <port>" on stdout, and exits when
// its stdin closes (the bench went away). Without -max-streams the server
// announces net/http's default SETTINGS_MAX_CONCURRENT_STREAMS (250); with
// it, N (http.Server.HTTP2.MaxConcurrentStreams). With -tls-cert it serves
// TLS instead of h2c, offering h2 and http/1.1 by ALPN as net/http does by
// default (it picks h2 when the client offers it).
//
// Paths (every response 200 unless said otherwise):
//
//	/len/N      N bytes with content-length, in 16 KiB writes.
//	/slow/N     the same, its head written only after ?ms=D milliseconds
//	            (100 if not given): a slow backend behind the server.
//	/nolen/N    the same without content-length (each write flushed, so
//	            net/http never sets one).
//	/sse        text/event-stream, one event every 20 ms, never ends.
//	/trickle    application/octet-stream, no content-length, 1 KiB every
//	            50 ms, never ends.
//	/stall      a head without content-length (with ?cl=N: content-length
//	            N), then nothing until the client resets the stream.
//	/small      "small body\n", with content-length.
//	/stats      {"conns":C,"requests":R,"open":O,"max_open":M}: TCP
//	            connections accepted (its own included), requests other than
//	            /stats, handlers running now and the most at once.
//	anything else: 404.
//
// A handler stops when its request's context ends (the client reset the
// stream, or the connection closed) or a write fails.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

var (
	chunk = []byte(strings.Repeat("h", 16*1024))
	kib   = []byte(strings.Repeat("t", 1024))
	small = []byte("small body\n")

	conns, requests, open, maxOpen atomic.Int64
)

// pump writes n bytes in 16 KiB writes, flushing each when flush is set.
func pump(w http.ResponseWriter, n int, flush bool) {
	f := w.(http.Flusher)
	for n > 0 {
		piece := chunk[:min(n, len(chunk))]
		if _, err := w.Write(piece); err != nil {
			return
		}
		if flush {
			f.Flush()
		}
		n -= len(piece)
	}
}

// endless writes piece() every period until the request's context ends.
func endless(ctx context.Context, w http.ResponseWriter, period time.Duration, piece func() []byte) {
	f := w.(http.Flusher)
	w.WriteHeader(http.StatusOK)
	f.Flush()
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if _, err := w.Write(piece()); err != nil {
				return
			}
			f.Flush()
		}
	}
}

func serve(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/stats" {
		fmt.Fprintf(w, `{"conns":%d,"requests":%d,"open":%d,"max_open":%d}`,
			conns.Load(), requests.Load(), open.Load(), maxOpen.Load())
		return
	}
	requests.Add(1)
	now := open.Add(1)
	defer open.Add(-1)
	for {
		m := maxOpen.Load()
		if now <= m || maxOpen.CompareAndSwap(m, now) {
			break
		}
	}
	h := w.Header()
	parts := strings.Split(r.URL.Path, "/")
	switch {
	case len(parts) == 3 && parts[1] == "slow":
		n, err := strconv.Atoi(parts[2])
		if err != nil || n < 0 {
			break
		}
		delay := 100
		if ms := r.URL.Query().Get("ms"); ms != "" {
			if d, err := strconv.Atoi(ms); err == nil && d >= 0 {
				delay = d
			}
		}
		select {
		case <-r.Context().Done():
			return
		case <-time.After(time.Duration(delay) * time.Millisecond):
		}
		h.Set("Content-Type", "application/octet-stream")
		h.Set("Content-Length", strconv.Itoa(n))
		w.WriteHeader(http.StatusOK)
		pump(w, n, false)
		return
	case len(parts) == 3 && (parts[1] == "len" || parts[1] == "nolen"):
		n, err := strconv.Atoi(parts[2])
		if err != nil || n < 0 {
			break
		}
		h.Set("Content-Type", "application/octet-stream")
		if parts[1] == "len" {
			h.Set("Content-Length", strconv.Itoa(n))
		}
		w.WriteHeader(http.StatusOK)
		pump(w, n, parts[1] == "nolen")
		return
	case r.URL.Path == "/sse":
		h.Set("Content-Type", "text/event-stream")
		h.Set("Cache-Control", "no-cache")
		i := 0
		endless(r.Context(), w, 20*time.Millisecond, func() []byte {
			i++
			return []byte(fmt.Sprintf("id: %d\ndata: event %d\n\n", i, i))
		})
		return
	case r.URL.Path == "/trickle":
		h.Set("Content-Type", "application/octet-stream")
		endless(r.Context(), w, 50*time.Millisecond, func() []byte { return kib })
		return
	case r.URL.Path == "/stall":
		h.Set("Content-Type", "application/octet-stream")
		if cl := r.URL.Query().Get("cl"); cl != "" {
			h.Set("Content-Length", cl)
		}
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
		return
	case r.URL.Path == "/small":
		h.Set("Content-Type", "text/plain")
		h.Set("Content-Length", strconv.Itoa(len(small)))
		w.Write(small)
		return
	}
	h.Set("Content-Length", "0")
	w.WriteHeader(http.StatusNotFound)
}

func main() {
	maxStreams := flag.Int("max-streams", 0, "SETTINGS_MAX_CONCURRENT_STREAMS to announce (0: net/http's default)")
	tlsCert := flag.String("tls-cert", "", "serve TLS (ALPN h2 and http/1.1) with this certificate (PEM) instead of h2c")
	tlsKey := flag.String("tls-key", "", "the certificate's private key (PEM), with -tls-cert")
	flag.Parse()
	var protocols http.Protocols
	if *tlsCert != "" {
		protocols.SetHTTP1(true)
		protocols.SetHTTP2(true)
	} else {
		protocols.SetUnencryptedHTTP2(true)
	}
	srv := &http.Server{
		Handler:   http.HandlerFunc(serve),
		Protocols: &protocols,
		ConnState: func(_ net.Conn, s http.ConnState) {
			if s == http.StateNew {
				conns.Add(1)
			}
		},
	}
	if *maxStreams > 0 {
		srv.HTTP2 = &http.HTTP2Config{MaxConcurrentStreams: *maxStreams}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, "goserver:", err)
		os.Exit(1)
	}
	out := bufio.NewWriter(os.Stdout)
	fmt.Fprintf(out, "READY %d\n", ln.Addr().(*net.TCPAddr).Port)
	out.Flush()
	// Exit with the bench: its end of our stdin closes when it goes away.
	go func() {
		io.Copy(io.Discard, os.Stdin)
		os.Exit(0)
	}()
	if *tlsCert != "" {
		err = srv.ServeTLS(ln, *tlsCert, *tlsKey)
	} else {
		err = srv.Serve(ln)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "goserver:", err)
		os.Exit(1)
	}
}
