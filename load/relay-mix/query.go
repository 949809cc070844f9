package main

// relay-mix query: V closed-loop VUs, each on its own connection, sending one-shot REQs in turn from
// a small mix (the newest 50 notes, a feed of 20 authors, a #p query; limit 50 each), reading to EOSE,
// then CLOSE. Reports REQ/s and REQ → EOSE latency, overall and per shape.

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"
)

var shapeNames = []string{"kinds1-limit50", "authors20-feed", "p-mentions"}

func runQuery(args []string) {
	fs := flag.NewFlagSet("query", flag.ExitOnError)
	url := fs.String("url", "ws://127.0.0.1:8008", "relay URL")
	source := fs.String("source", "", "source address to bind")
	vus := fs.Int("vus", 20, "closed-loop VUs (one connection each)")
	seconds := fs.Float64("seconds", 60, "how long to send REQs")
	timeout := fs.Duration("timeout", 10*time.Second, "REQ → EOSE timeout")
	pubkeysFile := fs.String("pubkeys", "", "file of hex pubkeys to query (a seeded corpus' authors); default: the publishers'")
	seed := fs.String("seed", "relay-mix", "seed of the publishers' keys")
	authors := fs.Int("authors", 10000, "publisher authors")
	fs.Parse(args)
	raiseFileLimit()

	var pubkeys []string
	if *pubkeysFile != "" {
		b, err := os.ReadFile(*pubkeysFile)
		if err != nil {
			out(map[string]any{"type": "error", "error": err.Error()})
			os.Exit(1)
		}
		for _, l := range strings.Split(string(b), "\n") {
			if l = strings.TrimSpace(l); len(l) == 64 {
				pubkeys = append(pubkeys, l)
			}
		}
	} else {
		pubkeys = authorPubkeys(*seed, *authors)
	}
	d := dialer(*source, 10*time.Second)
	all := newHistogram()
	shapes := []*Histogram{newHistogram(), newHistogram(), newHistogram()}
	var reqs, events, errs, timeouts atomic.Int64
	var errSample atomic.Value
	// Connect every VU first, then wait for "start" on stdin (see publish).
	conns := make([]*websocket.Conn, *vus)
	connected := 0
	var connectErr string
	for v := range conns {
		c, _, err := d.Dial(*url, nil)
		if err != nil {
			connectErr = err.Error()
			continue
		}
		c.SetReadLimit(16 << 20)
		conns[v] = c
		connected++
	}
	out(map[string]any{"type": "connected", "conns": connected, "connectError": connectErr})
	// Until "start", each VU sends a small REQ every 5 s and reads its answer: a WebSocket ping from
	// the relay is answered only while the connection is read, and a relay drops connections that
	// do not answer its pings (the ramp of 100,000 subscribers takes minutes).
	started := make(chan struct{})
	var idle sync.WaitGroup
	for v, c := range conns {
		if c == nil {
			continue
		}
		idle.Add(1)
		go func() {
			defer idle.Done()
			for n := 0; ; n++ {
				select {
				case <-started:
					return
				case <-time.After(5 * time.Second):
				}
				sid := fmt.Sprintf("k%d", n)
				if c.WriteMessage(websocket.TextMessage, fmt.Appendf(nil, `["REQ","%s",{"kinds":[1],"limit":1}]`, sid)) != nil {
					conns[v] = nil
					return
				}
				c.SetReadDeadline(time.Now().Add(*timeout))
				for {
					_, msg, err := c.ReadMessage()
					if err != nil {
						c.Close()
						conns[v] = nil
						return
					}
					if bytes.HasPrefix(msg, []byte(`["EOSE","`+sid+`"`)) || bytes.HasPrefix(msg, []byte(`["CLOSED","`+sid+`"`)) {
						break
					}
				}
				c.SetReadDeadline(time.Time{})
				c.WriteMessage(websocket.TextMessage, fmt.Appendf(nil, `["CLOSE","%s"]`, sid))
			}
		}()
	}
	waitForStart()
	close(started)
	idle.Wait()
	cpu0 := cpuSeconds()
	start := time.Now()
	deadline := start.Add(time.Duration(*seconds * float64(time.Second)))
	var wg sync.WaitGroup
	for v := 0; v < *vus; v++ {
		wg.Add(1)
		go func(v int) {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(v), 7))
			c := conns[v]
			for n := 0; time.Now().Before(deadline); n++ {
				if c == nil {
					var err error
					if c, _, err = d.Dial(*url, nil); err != nil {
						errs.Add(1)
						errSample.Store("connect: " + err.Error())
						c = nil
						time.Sleep(time.Second)
						continue
					}
					c.SetReadLimit(16 << 20)
				}
				shape := (v + n) % 3
				var filter map[string]any
				switch shape {
				case 0:
					filter = map[string]any{"kinds": []int{1}, "limit": 50}
				case 1:
					as := make([]string, 20)
					for i := range as {
						as[i] = pubkeys[r.IntN(len(pubkeys))]
					}
					filter = map[string]any{"kinds": []int{1, 6}, "authors": as, "limit": 50}
				case 2:
					filter = map[string]any{"#p": []string{pubkeys[r.IntN(len(pubkeys))]}, "limit": 50}
				}
				sid := fmt.Sprintf("q%d", n)
				fj, _ := json.Marshal(filter)
				t0 := time.Now()
				if err := c.WriteMessage(websocket.TextMessage, fmt.Appendf(nil, `["REQ","%s",%s]`, sid, fj)); err != nil {
					errs.Add(1)
					errSample.Store("write: " + err.Error())
					c.Close()
					c = nil
					continue
				}
				evPrefix := []byte(`["EVENT","` + sid + `"`)
				eosePrefix := []byte(`["EOSE","` + sid + `"`)
				closedPrefix := []byte(`["CLOSED","` + sid + `"`)
				c.SetReadDeadline(t0.Add(*timeout))
				got := 0
				ok := false
				for {
					_, msg, err := c.ReadMessage()
					if err != nil {
						if strings.Contains(err.Error(), "timeout") {
							timeouts.Add(1)
						}
						errs.Add(1)
						errSample.Store("read: " + err.Error())
						c.Close()
						c = nil
						break
					}
					if bytes.HasPrefix(msg, evPrefix) {
						got++
					} else if bytes.HasPrefix(msg, eosePrefix) {
						ok = true
						break
					} else if bytes.HasPrefix(msg, closedPrefix) || bytes.HasPrefix(msg, []byte(`["NOTICE"`)) {
						errs.Add(1)
						errSample.Store(string(msg))
						break
					}
				}
				if ok {
					el := time.Since(t0)
					if time.Now().Before(deadline) {
						reqs.Add(1)
						events.Add(int64(got))
						all.Add(el)
						shapes[shape].Add(el)
					}
					c.WriteMessage(websocket.TextMessage, fmt.Appendf(nil, `["CLOSE","%s"]`, sid))
				}
			}
			if c != nil {
				c.Close()
			}
		}(v)
	}
	wg.Wait()
	elapsed := time.Since(start).Seconds()
	res := map[string]any{
		"type": "result", "vus": *vus, "reqs": reqs.Load(), "events": events.Load(), "errors": errs.Load(), "timeouts": timeouts.Load(),
		"seconds": *seconds, "elapsed": elapsed, "latency": all, "shapes": map[string]any{}, "cpuSeconds": cpuSeconds() - cpu0, "connected": connected, "connectError": connectErr, "rssKB": rssKB(), "pubkeys": len(pubkeys),
	}
	for i, h := range shapes {
		res["shapes"].(map[string]any)[shapeNames[i]] = h
	}
	if x := errSample.Load(); x != nil {
		res["errorSample"] = x
	}
	out(res)
}
