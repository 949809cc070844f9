package main

// What every role shares: the publishers' keys (derived from a seed, so every process knows the
// same pubkeys without exchanging them), the latency histogram, the WebSocket dialer bound to a
// source address, and JSON lines on stdout for the orchestrator (bench/relay-mix.ts).

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/btcsuite/btcd/btcec/v2"
	"github.com/btcsuite/btcd/btcec/v2/schnorr"
	"github.com/gorilla/websocket"
)

// authorKey is the secret key of publisher author i: sha256("relay-mix/<seed>/<i>") as a scalar.
func authorKey(seed string, i int) *btcec.PrivateKey {
	h := sha256.Sum256([]byte(fmt.Sprintf("relay-mix/%s/%d", seed, i)))
	k, _ := btcec.PrivKeyFromBytes(h[:])
	return k
}

// authorPubkeys are the x-only pubkeys (hex) of authors 0..n-1.
func authorPubkeys(seed string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = hex.EncodeToString(schnorr.SerializePubKey(authorKey(seed, i).PubKey()))
	}
	return out
}

// newRand is a deterministic generator for one purpose and index (a connection's subscriptions).
func newRand(seed string, purpose string, i uint64) *rand.Rand {
	h := sha256.Sum256([]byte(seed + "/" + purpose))
	return rand.New(rand.NewPCG(binary.LittleEndian.Uint64(h[:8])^i, binary.LittleEndian.Uint64(h[8:16])+i))
}

// idKey is the first 8 bytes of an event id (hex), enough to tell a run's events apart.
func idKey(idHex string) uint64 {
	if len(idHex) < 16 {
		return 0
	}
	var b [8]byte
	if _, err := hex.Decode(b[:], []byte(idHex[:16])); err != nil {
		return 0
	}
	return binary.BigEndian.Uint64(b[:])
}

// Histogram of latencies in microseconds, in buckets 1 % wide (bucket b holds [1.01^b, 1.01^(b+1)) µs),
// so the orchestrator can add up the processes' histograms and read percentiles to within 1 %.
type Histogram struct {
	mu      sync.Mutex
	Buckets map[int]int64 `json:"buckets"`
	N       int64         `json:"n"`
	SumUs   float64       `json:"sumUs"`
	MaxUs   float64       `json:"maxUs"`
}

func newHistogram() *Histogram { return &Histogram{Buckets: map[int]int64{}} }

var logStep = math.Log(1.01)

func (h *Histogram) Add(d time.Duration) {
	us := float64(d.Nanoseconds()) / 1e3
	if us < 1 {
		us = 1
	}
	b := int(math.Floor(math.Log(us) / logStep))
	h.mu.Lock()
	h.Buckets[b]++
	h.N++
	h.SumUs += us
	if us > h.MaxUs {
		h.MaxUs = us
	}
	h.mu.Unlock()
}

// out writes one JSON line to stdout (the orchestrator's channel); stderr is for people.
var outMu sync.Mutex

func out(v map[string]any) {
	b, _ := json.Marshal(v)
	outMu.Lock()
	os.Stdout.Write(append(b, '\n'))
	outMu.Unlock()
}

func logf(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }

// raiseFileLimit sets the soft open-file limit to the hard one (Go does this too since 1.19; done
// here explicitly so the figure can be reported).
func raiseFileLimit() uint64 {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return 0
	}
	l.Cur = l.Max
	_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l)
	_ = syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l)
	return l.Cur
}

// cpuSeconds of this process (user + system), from getrusage.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

// rssKB is this process' VmRSS.
func rssKB() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	var kb int64
	for _, line := range splitLines(string(b)) {
		if n, _ := fmt.Sscanf(line, "VmRSS: %d kB", &kb); n == 1 {
			return kb
		}
	}
	return 0
}

func splitLines(s string) []string {
	var lines []string
	start := 0
	for i := 0; i < len(s); i++ {
		if s[i] == '\n' {
			lines = append(lines, s[start:i])
			start = i + 1
		}
	}
	return append(lines, s[start:])
}

// writeBuffers are shared by every connection of the process: a connection holds a write buffer only
// while it writes, which is what keeps 16,000 mostly idle connections cheap.
var writeBuffers = &sync.Pool{}

// dialer opens WebSockets from a given loopback source address (127.0.0.x): each source address has
// its own ~28,000 ephemeral ports towards the relay's one address and port.
func dialer(source string, timeout time.Duration) *websocket.Dialer {
	nd := &net.Dialer{Timeout: timeout}
	if source != "" {
		nd.LocalAddr = &net.TCPAddr{IP: net.ParseIP(source)}
	}
	return &websocket.Dialer{
		NetDialContext:   nd.DialContext,
		HandshakeTimeout: timeout,
		ReadBufferSize:   1024,
		WriteBufferSize:  1024,
		WriteBufferPool:  writeBuffers,
	}
}
