package main

// relay-mix publish: K publisher connections sending freshly signed events (BIP-340) at a fixed
// rate, on a fixed schedule (event i at start + i/rate, round-robin over the connections). Times
// EVENT → OK, and writes what it sent (id, author, kind, tags, send time, OK) to --out for the
// subscribers to count their deliveries against.

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/btcsuite/btcd/btcec/v2"
	"github.com/btcsuite/btcd/btcec/v2/schnorr"
	"github.com/gorilla/websocket"
)

type signer struct {
	seed    string
	keys    map[int]*btcec.PrivateKey
	pubkeys []string
}

func (s *signer) key(i int) *btcec.PrivateKey {
	k := s.keys[i]
	if k == nil {
		k = authorKey(s.seed, i)
		s.keys[i] = k
	}
	return k
}

// sign returns the EVENT message and the event id.
func (s *signer) sign(author, kind int, createdAt int64, tags [][]string, content string) ([]byte, string) {
	ser, _ := marshalNoEscape([]any{0, s.pubkeys[author], createdAt, kind, tags, content})
	id := sha256.Sum256(ser)
	sig, err := schnorr.Sign(s.key(author), id[:])
	if err != nil {
		panic(err)
	}
	idHex := hex.EncodeToString(id[:])
	ev := map[string]any{
		"id": idHex, "pubkey": s.pubkeys[author], "created_at": createdAt, "kind": kind, "tags": tags,
		"content": content, "sig": hex.EncodeToString(sig.Serialize()),
	}
	msg, _ := marshalNoEscape([]any{"EVENT", ev})
	return msg, idHex
}

func marshalNoEscape(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(b.Bytes(), "\n"), nil
}

const filler = "gm nostr relay note zap key sign event filter query index fast post reply thread world hello bitcoin lightning client server tag pubkey coffee music art photo dev code build ship"

func runPublish(args []string) {
	fs := flag.NewFlagSet("publish", flag.ExitOnError)
	url := fs.String("url", "ws://127.0.0.1:8008", "relay URL")
	source := fs.String("source", "", "source address to bind")
	conns := fs.Int("conns", 4, "publisher connections")
	rate := fs.Float64("rate", 20, "events per second, all connections together")
	seconds := fs.Float64("seconds", 60, "how long to publish")
	okWait := fs.Duration("ok-wait", 10*time.Second, "how long to wait for the last OKs")
	seed := fs.String("seed", "relay-mix", "seed of the authors' keys")
	authors := fs.Int("authors", 10000, "publisher authors")
	tags := fs.Int("tags", 1000, "hashtags")
	outFile := fs.String("out", "published.jsonl", "where to write what was sent")
	fs.Parse(args)
	raiseFileLimit()

	sg := &signer{seed: *seed, keys: map[int]*btcec.PrivateKey{}, pubkeys: authorPubkeys(*seed, *authors)}
	d := dialer(*source, 10*time.Second)
	var mu sync.Mutex
	var events []Published
	pending := map[string]int{}
	okHist := newHistogram()
	var okFalseSample string
	var okTrue, okFalse, notices int
	// Connect first, then wait for "start" on stdin: the publishers are connected before the
	// subscribers' ramp, as a busy relay's publishers already are, and a relay that is full by then
	// refuses the subscribers, not the publishers. A connection that cannot be opened is reported.
	var cs []*websocket.Conn
	var connectErr string
	for i := 0; i < *conns; i++ {
		var c *websocket.Conn
		var err error
		for attempt := 0; attempt < 3; attempt++ {
			if c, _, err = d.Dial(*url, nil); err == nil {
				break
			}
			time.Sleep(500 * time.Millisecond)
		}
		if err != nil {
			connectErr = err.Error()
			continue
		}
		cs = append(cs, c)
		go func() {
			for {
				_, msg, err := c.ReadMessage()
				now := time.Now().UnixNano()
				if err != nil {
					return
				}
				var m []json.RawMessage
				if json.Unmarshal(msg, &m) != nil || len(m) < 1 {
					continue
				}
				var verb string
				json.Unmarshal(m[0], &verb)
				if verb == "NOTICE" {
					mu.Lock()
					notices++
					mu.Unlock()
					continue
				}
				if verb != "OK" || len(m) < 3 {
					continue
				}
				var id string
				var ok bool
				json.Unmarshal(m[1], &id)
				json.Unmarshal(m[2], &ok)
				mu.Lock()
				if i, found := pending[id]; found {
					delete(pending, id)
					okHist.Add(time.Duration(now - events[i].SentNs))
					events[i].OKNs = now
					if ok {
						events[i].OK = "true"
						okTrue++
					} else {
						events[i].OK = "false"
						okFalse++
						if len(m) > 3 {
							okFalseSample = string(m[3])
						}
					}
				}
				mu.Unlock()
			}
		}()
	}

	out(map[string]any{"type": "connected", "conns": len(cs), "connectError": connectErr})
	waitForStart()
	if len(cs) == 0 {
		*seconds = 0
	}
	lag := newHistogram()
	cpu0 := cpuSeconds()
	start := time.Now()
	var prevID string
	prevAuthor := 0
	for i := 0; ; i++ {
		at := start.Add(time.Duration(float64(i) / *rate * float64(time.Second)))
		if at.Sub(start).Seconds() >= *seconds {
			break
		}
		if wait := time.Until(at); wait > 0 {
			time.Sleep(wait)
		}
		r := newRand(*seed, "pub", uint64(i))
		author := r.IntN(*authors)
		e := Published{Author: author, CreatedAt: time.Now().Unix(), OK: "none"}
		var tg [][]string
		var content string
		x := r.Float64()
		switch {
		case x < 0.80 || prevID == "":
			e.Kind = 1
			for n := r.IntN(4); len(e.P) < n; {
				p := r.IntN(*authors)
				if p != author && !containsInt(e.P, p) {
					e.P = append(e.P, p)
				}
			}
			for _, p := range e.P {
				tg = append(tg, []string{"p", sg.pubkeys[p]})
			}
			if r.Float64() < 0.1 {
				e.T = []int{r.IntN(*tags)}
				tg = append(tg, []string{"t", tagName(e.T[0])})
			}
			k := 20 + r.IntN(len(filler)-20)
			content = fmt.Sprintf("relay-mix %d %s", i, filler[:k])
		case x < 0.95:
			e.Kind, e.E, e.P, content = 7, prevID, []int{prevAuthor}, "+"
			tg = [][]string{{"e", prevID}, {"p", sg.pubkeys[prevAuthor]}}
		default:
			e.Kind, e.E, e.P = 6, prevID, []int{prevAuthor}
			tg = [][]string{{"e", prevID}, {"p", sg.pubkeys[prevAuthor]}}
		}
		if tg == nil {
			tg = [][]string{}
		}
		msg, id := sg.sign(author, e.Kind, e.CreatedAt, tg, content)
		e.ID = id
		if e.Kind == 1 {
			prevID, prevAuthor = id, author
		}
		now := time.Now()
		lag.Add(now.Sub(at))
		e.SentNs = now.UnixNano()
		mu.Lock()
		events = append(events, e)
		pending[id] = len(events) - 1
		mu.Unlock()
		if err := cs[i%len(cs)].WriteMessage(websocket.TextMessage, msg); err != nil {
			out(map[string]any{"type": "error", "error": "publish: " + err.Error()})
			break
		}
	}
	elapsed := time.Since(start).Seconds()
	for deadline := time.Now().Add(*okWait); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		mu.Lock()
		n := len(pending)
		mu.Unlock()
		if n == 0 {
			break
		}
	}
	mu.Lock()
	defer mu.Unlock()
	f, err := os.Create(*outFile)
	if err != nil {
		out(map[string]any{"type": "error", "error": err.Error()})
		os.Exit(1)
	}
	w := bufio.NewWriter(f)
	for i := range events {
		b, _ := json.Marshal(&events[i])
		w.Write(append(b, '\n'))
	}
	w.Flush()
	f.Close()
	out(map[string]any{
		"type": "result", "sent": len(events), "okTrue": okTrue, "okFalse": okFalse, "okNone": len(pending),
		"okFalseSample": okFalseSample, "notices": notices, "conns": len(cs), "connectError": connectErr, "seconds": elapsed, "ok": okHist, "lag": lag,
		"cpuSeconds": cpuSeconds() - cpu0, "rssKB": rssKB(), "out": *outFile,
	})
	for _, c := range cs {
		c.Close()
	}
}

func containsInt(xs []int, x int) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// waitForStart blocks until the orchestrator writes "start" on stdin (at once when stdin is closed).
func waitForStart() {
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		if in.Text() == "start" {
			return
		}
	}
}
