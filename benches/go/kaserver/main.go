// Command kaserver is the Go 1.27 net/http HTTP/1.1 server of the keepalive
// bench (`cargo bench --bench keepalive`): net/http's server, HTTP/1 only,
// with an idle timeout (http.Server.IdleTimeout), the standard library only.
//
//	kaserver [-idle-timeout 1s] [-len 65536]
//
// Listens on 127.0.0.1:0, prints "READY <port> <go version>" on stdout, and
// exits when its stdin closes (the bench went away). Every request, whatever
// its path and method, has its body read to its end and is answered 200 with
// -len bytes and a content-length. Each request the server read is written on
// stdout as "REQ <client port> <method> <request target>" before it is
// answered, so that the bench can tell which requests reached the server and
// which reached it twice (a unique id in the query) and on which connection
// (the client's port).
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"
)

var (
	mu  sync.Mutex
	out = bufio.NewWriter(os.Stdout)
)

// say writes one line on stdout at once.
func say(format string, args ...any) {
	mu.Lock()
	defer mu.Unlock()
	fmt.Fprintf(out, format+"\n", args...)
	out.Flush()
}

func main() {
	idle := flag.Duration("idle-timeout", time.Second, "http.Server.IdleTimeout")
	n := flag.Int("len", 64*1024, "bytes in every response body")
	flag.Parse()
	body := []byte(strings.Repeat("g", *n))
	length := strconv.Itoa(len(body))
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	srv := &http.Server{
		Protocols:   &protocols,
		IdleTimeout: *idle,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, port, _ := net.SplitHostPort(r.RemoteAddr)
			say("REQ %s %s %s", port, r.Method, r.RequestURI)
			io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "application/octet-stream")
			w.Header().Set("Content-Length", length)
			w.Write(body)
		}),
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, "kaserver:", err)
		os.Exit(1)
	}
	say("READY %d %s", ln.Addr().(*net.TCPAddr).Port, runtime.Version())
	// Exit with the bench: its end of our stdin closes when it goes away.
	go func() {
		io.Copy(io.Discard, os.Stdin)
		os.Exit(0)
	}()
	if err := srv.Serve(ln); err != nil {
		fmt.Fprintln(os.Stderr, "kaserver:", err)
		os.Exit(1)
	}
}
