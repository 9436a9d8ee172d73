// Command goclient is the Go 1.27 client the benches measure beside the
// Rust clients (docs/BENCHMARKS.md): what net/http does, with its own
// defaults, when a caller closes a response body it did not read.
//
//	goclient seq -url URL -n N [-read-one] [-ca CA.pem -servername localhost]
//	goclient far -url URL -n N [-read-one] -ca CA.pem -servername localhost
//	goclient h2 -url URL -callers C -n N -secs S [-ca CA.pem -servername localhost [-alpn]] [-timeout D] [-latency]
//	goclient endless -drop-url URL -drops D -url URL
//	goclient keepalive -url URL -close-ms F -offsets-us O,O,... [-methods GET,POST] [-trials N] [-stagger-ms S] [-id-base B]
//
// seq: N sequential GETs over HTTP/1.1, plain for an http:// URL, TLS for
// an https:// URL (trusting CA.pem). Each response's status is checked and
// its body closed unread, or after one Read of up to 16 KiB with -read-one
// (the Rust clients' "one frame"): Go 1.27 then drains the rest in the
// background (up to 256 KiB within 50 ms) to keep the connection, or closes
// it. The transport is http.DefaultTransport's clone, so its defaults are
// Go's (MaxIdleConnsPerHost 2, timeouts, keep-alives), with only:
//   - TLSClientConfig (https:// only): trust CA.pem, verify (and send SNI)
//     servername, ALPN http/1.1 only, as the Rust clients offer;
//   - ForceAttemptHTTP2 false and an empty TLSNextProto: HTTP/2 is never
//     tried, so every request is HTTP/1.1 as for the Rust clients.
//
// far: seq for https:// URLs only (the far bench's origins are TLS).
//
// h2: C goroutines share one client and send GETs until N were sent in all
// or S seconds passed, each body closed unread right after the head (which
// resets the stream). An http:// URL is h2c with prior knowledge
// (Protocols: unencrypted HTTP/2 only), an https:// URL is TLS trusting
// CA.pem: ALPN h2 alone (Protocols: HTTP/2 only), or with -alpn, as Go's
// default transport does, h2 and http/1.1 (Protocols: HTTP/1 and HTTP/2,
// NextProtos h2, http/1.1), speaking what the server picks. With -timeout D
// (a Go duration such as 3s) each request runs under a context of its own
// that expires after D (the request then fails; the context is cancelled
// once the body is closed). With -latency the line also gives each
// request's time from the call to its head or its failure (p50_ms, p99_ms,
// nearest rank, failed requests included), when the last failure came
// (last_failure_ms from the start, 0 without failures), the growth of the
// process's resident memory over the run (rss_growth_kib: VmRSS in
// /proc/self/status before the first request and after the last) and its
// most resident memory (max_rss_kib: VmHWM; not getrusage's ru_maxrss,
// which Linux carries over from the process that started this one).
//
// endless: one h2c client (prior knowledge) and one caller: D GETs of
// -drop-url (an endless body), each closed right after its head, then one
// GET of -url; elapsed_ms is that last request's time from sending to its
// head (60 s at most: then it fails), sent is D + 1.
//
// keepalive: the keep-alive race of the keepalive bench. N trials per
// method (-methods, interleaved), started -stagger-ms apart and run in
// parallel; trial k (counting across methods) has a client (a clone of
// http.DefaultTransport, HTTP/1.1 only) of its own, sends GET URL?id=B+2k
// and closes its body unread (Go drains it in the background), then sends
// METHOD URL?id=B+2k+1 (POST with a small body) at the instant the first
// response arrived + F ms (the server's measured idle close) + its offset,
// offsets taken in turn from -offsets-us (microseconds); it sleeps to 3 ms
// before that instant, then spins. Both requests carry their id in an
// x-request-id header too. The line's "trials" string gives each trial as
// "METHOD,offset_us,id,connections,attempts,result" separated by ";":
// connections the client dialed (httptrace ConnectDone without error),
// attempts the connections the second request was given (GotConn: more than
// one when the Transport sent it again), and result "ok" or the second
// request's error (",", ";" and quotes replaced), "first: ERROR" when the
// first request failed; sent is the number of trials, failed those whose
// second request failed.
//
// No Client.Timeout (its timer would cancel the request, and so the
// background drain, at Close); one deadline for the whole run instead, as a
// guard against a hung run. Prints one JSON line on stdout; exits 0 unless
// the arguments are wrong (2).
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptrace"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// A run's result; failed counts requests that errored or were not 200.
type result struct {
	Mode      string  `json:"mode"`
	Requests  *int64  `json:"requests,omitempty"`
	Sent      *int64  `json:"sent,omitempty"`
	Failed    int64   `json:"failed"`
	ElapsedMs float64 `json:"elapsed_ms"`
	// h2 -latency only.
	P50Ms         *float64 `json:"p50_ms,omitempty"`
	P99Ms         *float64 `json:"p99_ms,omitempty"`
	LastFailureMs *float64 `json:"last_failure_ms,omitempty"`
	RssGrowthKib  *int64   `json:"rss_growth_kib,omitempty"`
	MaxRssKib     *int64   `json:"max_rss_kib,omitempty"`
	// keepalive only: one entry per trial (see keepalive).
	Trials string `json:"trials,omitempty"`
	// Last: the only free text (the benches read the keys before it).
	FirstError string `json:"first_error"`
}

// failures counts failed requests and keeps the first one's message.
type failures struct {
	mu     sync.Mutex
	failed int64
	first  string
}

func (e *failures) add(err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.failed == 0 {
		e.first = err.Error()
	}
	e.failed++
}

// oneRead is the most -read-one reads before closing a body: the size of
// one chunk of the benches' chunked bodies.
const oneRead = 16 * 1024

// get sends one GET and closes the body after checking the status: unread,
// or after one Read of up to oneRead bytes when readOne is set. It says
// whether the request failed.
func get(ctx context.Context, client *http.Client, url string, readOne bool, errs *failures) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		errs.add(err)
		return true
	}
	resp, err := client.Do(req)
	if err != nil {
		errs.add(err)
		return true
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		errs.add(fmt.Errorf("status %s", resp.Status))
		return true
	}
	if readOne {
		if _, err := resp.Body.Read(make([]byte, oneRead)); err != nil && err != io.EOF {
			errs.add(err)
			return true
		}
	}
	return false
}

// statusKib is a figure of /proc/self/status in KiB (VmRSS: resident now,
// VmHWM: the most resident so far), 0 where it cannot be read.
func statusKib(key string) int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, key+":"); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err == nil {
				return n
			}
		}
	}
	return 0
}

// percentile is the nearest-rank p-th percentile of sorted, in ms.
func percentile(sorted []time.Duration, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	return millis(sorted[max(rank, 1)-1])
}

// seq runs mode seq, or far (which only takes https:// URLs).
func seq(mode string, args []string) result {
	fs := flag.NewFlagSet(mode, flag.ExitOnError)
	url := fs.String("url", "", "URL to GET (http:// or https://)")
	n := fs.Int("n", 30, "sequential requests")
	readOne := fs.Bool("read-one", false, "read once (up to 16 KiB) before closing each body")
	ca := fs.String("ca", "", "PEM certificate to trust (https://)")
	name := fs.String("servername", "localhost", "name to verify and send as SNI")
	fs.Parse(args)
	https := strings.HasPrefix(*url, "https://")
	if mode == "far" && !https {
		usage("far needs an https:// -url")
	}
	if !https && !strings.HasPrefix(*url, "http://") || *n < 1 || https && *ca == "" {
		usage(mode + " needs -url http(s)://..., -n >= 1, and -ca for https://")
	}
	t := http.DefaultTransport.(*http.Transport).Clone()
	if https {
		t.TLSClientConfig = tlsConfig(*ca, *name, "http/1.1")
	}
	t.ForceAttemptHTTP2 = false
	t.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	client := &http.Client{Transport: t}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var errs failures
	start := time.Now()
	for i := 0; i < *n; i++ {
		get(ctx, client, *url, *readOne, &errs)
	}
	elapsed := time.Since(start)
	requests := int64(*n)
	return result{Mode: mode, Requests: &requests, Failed: errs.failed, ElapsedMs: millis(elapsed), FirstError: errs.first}
}

func h2(args []string) result {
	fs := flag.NewFlagSet("h2", flag.ExitOnError)
	url := fs.String("url", "", "URL to GET (http:// for h2c, https:// for TLS)")
	callers := fs.Int("callers", 16, "goroutines sharing the client")
	n := fs.Int64("n", 1000, "requests to send in all")
	secs := fs.Float64("secs", 10, "stop sending after this many seconds")
	ca := fs.String("ca", "", "PEM certificate to trust (https://)")
	name := fs.String("servername", "localhost", "name to verify and send as SNI")
	alpn := fs.Bool("alpn", false, "offer h2 and http/1.1 by ALPN, not h2 alone (https:// only)")
	timeout := fs.Duration("timeout", 0, "each request's own time limit (0: none)")
	latency := fs.Bool("latency", false, "report latency percentiles, the last failure's time and memory")
	fs.Parse(args)
	https := strings.HasPrefix(*url, "https://")
	if !https && !strings.HasPrefix(*url, "http://") || *callers < 1 || *n < 1 || *secs <= 0 || https && *ca == "" || *alpn && !https {
		usage("h2 needs -url http(s)://..., -callers >= 1, -n >= 1, -secs > 0, and -ca for https:// (-alpn: https:// only)")
	}
	t := http.DefaultTransport.(*http.Transport).Clone()
	var protocols http.Protocols
	switch {
	case *alpn:
		protocols.SetHTTP1(true)
		protocols.SetHTTP2(true)
		t.TLSClientConfig = tlsConfig(*ca, *name, "h2", "http/1.1")
	case https:
		protocols.SetHTTP2(true)
		t.TLSClientConfig = tlsConfig(*ca, *name, "h2")
	default:
		protocols.SetUnencryptedHTTP2(true)
	}
	t.Protocols = &protocols
	client := &http.Client{Transport: t}
	budget := time.Duration(*secs * float64(time.Second))
	ctx, cancel := context.WithTimeout(context.Background(), budget+time.Minute)
	defer cancel()
	var errs failures
	var sent atomic.Int64
	var wg sync.WaitGroup
	// Per caller: each request's time, and the last failure's (from start).
	took := make([][]time.Duration, *callers)
	lastFailure := make([]time.Duration, *callers)
	rssBefore := statusKib("VmRSS")
	start := time.Now()
	for c := 0; c < *callers; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Since(start) < budget && sent.Add(1) <= *n {
				began := time.Now()
				reqCtx, cancel := ctx, context.CancelFunc(func() {})
				if *timeout > 0 {
					reqCtx, cancel = context.WithTimeout(ctx, *timeout)
				}
				failed := get(reqCtx, client, *url, false, &errs)
				cancel()
				if *latency {
					took[c] = append(took[c], time.Since(began))
					if failed {
						lastFailure[c] = time.Since(start)
					}
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	total := min(sent.Load(), *n)
	r := result{Mode: "h2", Sent: &total, Failed: errs.failed, ElapsedMs: millis(elapsed), FirstError: errs.first}
	if *latency {
		var all []time.Duration
		var last time.Duration
		for c := range took {
			all = append(all, took[c]...)
			last = max(last, lastFailure[c])
		}
		slices.Sort(all)
		p50, p99, lastMs := percentile(all, 50), percentile(all, 99), millis(last)
		growth := statusKib("VmRSS") - rssBefore
		maxRss := statusKib("VmHWM")
		r.P50Ms, r.P99Ms, r.LastFailureMs, r.RssGrowthKib, r.MaxRssKib = &p50, &p99, &lastMs, &growth, &maxRss
	}
	return r
}

func endless(args []string) result {
	fs := flag.NewFlagSet("endless", flag.ExitOnError)
	dropURL := fs.String("drop-url", "", "URL of the endless bodies to drop (http:// only)")
	drops := fs.Int("drops", 33, "bodies to drop after their heads")
	url := fs.String("url", "", "URL of the request timed to its head (http:// only)")
	fs.Parse(args)
	if !strings.HasPrefix(*dropURL, "http://") || !strings.HasPrefix(*url, "http://") || *drops < 0 {
		usage("endless needs -drop-url http://..., -url http://... and -drops >= 0")
	}
	t := http.DefaultTransport.(*http.Transport).Clone()
	var protocols http.Protocols
	protocols.SetUnencryptedHTTP2(true)
	t.Protocols = &protocols
	client := &http.Client{Transport: t}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var errs failures
	for i := 0; i < *drops; i++ {
		get(ctx, client, *dropURL, false, &errs)
	}
	last, stop := context.WithTimeout(ctx, time.Minute)
	defer stop()
	start := time.Now()
	get(last, client, *url, false, &errs)
	elapsed := time.Since(start)
	sent := int64(*drops + 1)
	return result{Mode: "endless", Sent: &sent, Failed: errs.failed, ElapsedMs: millis(elapsed), FirstError: errs.first}
}

func keepalive(args []string) result {
	fs := flag.NewFlagSet("keepalive", flag.ExitOnError)
	url := fs.String("url", "", "URL of the 64 KiB responses (http:// only); ?id=N is appended")
	closeMs := fs.Float64("close-ms", 0, "the server's idle close, from the end of a response (ms)")
	offsetsArg := fs.String("offsets-us", "", "offsets from the close, in microseconds, comma separated")
	methodsArg := fs.String("methods", "GET,POST", "methods of the second request, comma separated")
	trials := fs.Int("trials", 72, "trials per method")
	staggerMs := fs.Float64("stagger-ms", 60, "time between the starts of two trials (ms)")
	idBase := fs.Int64("id-base", 1, "the first id")
	fs.Parse(args)
	var offsets []time.Duration
	for _, o := range strings.Split(*offsetsArg, ",") {
		us, err := strconv.ParseInt(strings.TrimSpace(o), 10, 64)
		if err != nil {
			usage("keepalive: -offsets-us: " + err.Error())
		}
		offsets = append(offsets, time.Duration(us)*time.Microsecond)
	}
	methods := strings.Split(*methodsArg, ",")
	if !strings.HasPrefix(*url, "http://") || *closeMs <= 0 || *trials < 1 || *staggerMs <= 0 || len(offsets) == 0 {
		usage("keepalive needs -url http://..., -close-ms > 0, -offsets-us, -trials >= 1 and -stagger-ms > 0")
	}
	closeAfter := time.Duration(*closeMs * float64(time.Millisecond))
	stagger := time.Duration(*staggerMs * float64(time.Millisecond))
	n := *trials * len(methods)
	lines := make([]string, n)
	var errs failures
	var wg sync.WaitGroup
	start := time.Now()
	for k := 0; k < n; k++ {
		method := methods[k%len(methods)]
		offset := offsets[(k/len(methods))%len(offsets)]
		id := *idBase + 2*int64(k)
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(time.Until(start.Add(time.Duration(k) * stagger)))
			conns, attempts, err := keepaliveTrial(*url, method, id, closeAfter+offset)
			res := "ok"
			if err != nil {
				errs.add(err)
				res = strings.NewReplacer(",", " ", ";", " ", `"`, "'").Replace(err.Error())
			}
			lines[k] = fmt.Sprintf("%s,%d,%d,%d,%d,%s", method, offset.Microseconds(), id+1, conns, attempts, res)
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	sent := int64(n)
	r := result{Mode: "keepalive", Sent: &sent, Failed: errs.failed, ElapsedMs: millis(elapsed), FirstError: errs.first}
	r.Trials = strings.Join(lines, ";")
	return r
}

// keepaliveTrial runs one trial of keepalive on a client of its own: the
// connections it dialed, the connections the second request was given, and
// the second request's error (or the first's, prefixed "first: ").
func keepaliveTrial(url, method string, id int64, wait time.Duration) (int64, int64, error) {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.ForceAttemptHTTP2 = false
	t.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	defer t.CloseIdleConnections()
	client := &http.Client{Transport: t}
	var conns, gotConns atomic.Int64
	trace := &httptrace.ClientTrace{
		ConnectDone: func(_, _ string, err error) {
			if err == nil {
				conns.Add(1)
			}
		},
		GotConn: func(httptrace.GotConnInfo) { gotConns.Add(1) },
	}
	ctx, cancel := context.WithTimeout(httptrace.WithClientTrace(context.Background(), trace), time.Minute)
	defer cancel()
	send := func(method string, id int64) (*http.Response, error) {
		var body io.Reader
		if method != http.MethodGet {
			body = strings.NewReader(fmt.Sprintf("post %d", id))
		}
		req, err := http.NewRequestWithContext(ctx, method, fmt.Sprintf("%s?id=%d", url, id), body)
		if err != nil {
			return nil, err
		}
		req.Header.Set("X-Request-Id", strconv.FormatInt(id, 10))
		resp, err := client.Do(req)
		if err == nil && resp.StatusCode != http.StatusOK {
			resp.Body.Close()
			return nil, fmt.Errorf("status %s", resp.Status)
		}
		return resp, err
	}
	first, err := send(http.MethodGet, id)
	if err != nil {
		return conns.Load(), 0, fmt.Errorf("first: %w", err)
	}
	first.Body.Close() // unread: Go 1.27 drains it in the background
	boundary := time.Now().Add(wait)
	time.Sleep(time.Until(boundary) - 3*time.Millisecond)
	for time.Now().Before(boundary) {
	}
	before := gotConns.Load()
	second, err := send(method, id+1)
	if err == nil {
		_, err = io.Copy(io.Discard, second.Body)
		second.Body.Close()
	}
	return conns.Load(), gotConns.Load() - before, err
}

// tlsConfig trusts the certificates in the PEM file and offers the protocols
// given, in that order.
func tlsConfig(caFile, serverName string, protos ...string) *tls.Config {
	pem, err := os.ReadFile(caFile)
	if err != nil {
		usage(err.Error())
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		usage("no certificate in " + caFile)
	}
	return &tls.Config{RootCAs: roots, ServerName: serverName, NextProtos: protos}
}

func millis(d time.Duration) float64 { return float64(d.Microseconds()) / 1e3 }

func usage(msg string) {
	fmt.Fprintln(os.Stderr, "goclient:", msg)
	fmt.Fprintln(os.Stderr, "usage: goclient seq -url URL -n N [-read-one] [-ca CA.pem -servername NAME]")
	fmt.Fprintln(os.Stderr, "       goclient far -url URL -n N [-read-one] -ca CA.pem -servername NAME")
	fmt.Fprintln(os.Stderr, "       goclient h2 -url URL -callers C -n N -secs S [-ca CA.pem -servername NAME [-alpn]] [-timeout D] [-latency]")
	fmt.Fprintln(os.Stderr, "       goclient endless -drop-url URL -drops D -url URL")
	fmt.Fprintln(os.Stderr, "       goclient keepalive -url URL -close-ms F -offsets-us O,O,... [-methods GET,POST] [-trials N] [-stagger-ms S] [-id-base B]")
	os.Exit(2)
}

func main() {
	if len(os.Args) < 2 {
		usage("no mode")
	}
	var r result
	switch os.Args[1] {
	case "seq", "far":
		r = seq(os.Args[1], os.Args[2:])
	case "h2":
		r = h2(os.Args[2:])
	case "endless":
		r = endless(os.Args[2:])
	case "keepalive":
		r = keepalive(os.Args[2:])
	default:
		usage("unknown mode " + os.Args[1])
	}
	out := json.NewEncoder(os.Stdout)
	out.SetEscapeHTML(false)
	out.Encode(r)
}
