package main

// relay-mix subscribe: one process's share of the subscriber connections. It opens them at a bounded
// rate from one source address, sends each connection's 3-10 live REQs, and records every EVENT it
// receives (event id, connection, subscription, arrival time). Told `finish FILE` on stdin (the
// publisher's list of what it sent), it works out which of its subscriptions each event should have
// reached and reports deliveries, missed deliveries, duplicates and publish → delivery latency.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"
)

const (
	connPending = iota
	connOpen
	connFailed
	connDropped
)

type delivery struct {
	key  uint64
	recv int64
	conn uint32
	sub  uint8
}

type subscriber struct {
	url, source, seed string
	first, count      int
	authors, tags     int
	pubkeys           []string

	state                                                             []atomic.Int32
	since                                                             []int64
	eose                                                              []atomic.Int32
	nsubs                                                             []uint8
	opened, failed, retries, ready, dropped, closed, notices, initial atomic.Int64
	finishing                                                         atomic.Bool
	closedSample, noticeSample, failSample                            atomic.Value

	mu         sync.Mutex
	deliveries []delivery
}

func runSubscribe(args []string) {
	fs := flag.NewFlagSet("subscribe", flag.ExitOnError)
	url := fs.String("url", "ws://127.0.0.1:8008", "relay URL")
	source := fs.String("source", "", "source address to bind (127.0.0.x)")
	first := fs.Int("first", 0, "global index of this process's first connection")
	count := fs.Int("conns", 1000, "connections")
	rate := fs.Float64("connect-rate", 1000, "new connections per second")
	inflight := fs.Int("inflight", 200, "connection attempts in flight at once")
	retries := fs.Int("retries", 2, "retries of a failed connection attempt")
	timeout := fs.Duration("timeout", 10*time.Second, "timeout of one connection attempt (TCP + WebSocket handshake)")
	rampTimeout := fs.Duration("ramp-timeout", 120*time.Second, "give up on connections (and EOSEs) not done by then")
	seed := fs.String("seed", "relay-mix", "seed of the authors' keys and the subscriptions")
	authors := fs.Int("authors", 10000, "publisher authors")
	tags := fs.Int("tags", 1000, "hashtags")
	fs.Parse(args)

	limit := raiseFileLimit()
	s := &subscriber{url: *url, source: *source, seed: *seed, first: *first, count: *count, authors: *authors, tags: *tags}
	s.pubkeys = authorPubkeys(*seed, *authors)
	s.state = make([]atomic.Int32, *count)
	s.since = make([]int64, *count)
	s.eose = make([]atomic.Int32, *count)
	s.nsubs = make([]uint8, *count)
	s.deliveries = make([]delivery, 0, 1<<16)
	if uint64(*count)+64 > limit {
		logf("subscribe: %d connections but the open-file limit is %d: the last ones will fail", *count, limit)
	}

	ctx, cancel := context.WithTimeout(context.Background(), *rampTimeout)
	defer cancel()
	d := dialer(*source, *timeout)
	sem := make(chan struct{}, *inflight)
	start := time.Now()
	go func() { // progress, once a second, until the ramp is over
		for ctx.Err() == nil {
			time.Sleep(time.Second)
			out(s.stats("progress", start))
		}
	}()
	var dials sync.WaitGroup
	for i := 0; i < *count; i++ {
		if wait := time.Until(start.Add(time.Duration(float64(i) / *rate * float64(time.Second)))); wait > 0 {
			time.Sleep(wait)
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			for j := i; j < *count; j++ {
				s.state[j].Store(connFailed)
				s.failed.Add(1)
			}
			s.failSample.Store("ramp timeout before the attempt")
			break
		}
		dials.Add(1)
		go s.connect(ctx, d, i, *retries, sem, &dials)
	}
	dials.Wait()
	// Every attempt has ended: wait for the EOSEs of the open connections.
	for ctx.Err() == nil && s.ready.Load()+s.failed.Load()+s.dropped.Load() < int64(*count) {
		time.Sleep(50 * time.Millisecond)
	}
	st := s.stats("ready", start)
	st["rampSeconds"] = time.Since(start).Seconds()
	st["fileLimit"] = limit
	out(st)
	cancel()

	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		line := strings.TrimSpace(in.Text())
		switch {
		case line == "stats":
			out(s.stats("stats", start))
		case strings.HasPrefix(line, "finish "):
			s.finishing.Store(true)
			s.finish(strings.TrimPrefix(line, "finish "))
			os.Exit(0)
		}
	}
	os.Exit(0)
}

func (s *subscriber) stats(kind string, start time.Time) map[string]any {
	m := map[string]any{
		"type": kind, "source": s.source, "conns": s.count, "opened": s.opened.Load(), "failed": s.failed.Load(),
		"retries": s.retries.Load(), "ready": s.ready.Load(), "dropped": s.dropped.Load(), "closed": s.closed.Load(),
		"notices": s.notices.Load(), "rssKB": rssKB(), "cpuSeconds": cpuSeconds(), "elapsed": time.Since(start).Seconds(),
	}
	for k, v := range map[string]*atomic.Value{"closedSample": &s.closedSample, "noticeSample": &s.noticeSample, "failSample": &s.failSample} {
		if x := v.Load(); x != nil {
			m[k] = x
		}
	}
	return m
}

func (s *subscriber) connect(ctx context.Context, d *websocket.Dialer, i, retries int, sem chan struct{}, dials *sync.WaitGroup) {
	var c *websocket.Conn
	var err error
	for attempt := 0; ; attempt++ {
		c, _, err = d.DialContext(ctx, s.url, nil)
		if err == nil || attempt >= retries || ctx.Err() != nil {
			break
		}
		s.retries.Add(1)
		select {
		case <-time.After(time.Duration(200<<attempt) * time.Millisecond):
		case <-ctx.Done():
		}
	}
	<-sem
	if err != nil {
		s.state[i].Store(connFailed)
		s.failed.Add(1)
		s.failSample.Store(err.Error())
		dials.Done()
		return
	}
	c.SetReadLimit(1 << 20)
	since := time.Now().Unix()
	s.since[i] = since
	subs := makeSubs(newRand(s.seed, "conn", uint64(s.first+i)), s.authors, s.tags, since)
	s.nsubs[i] = uint8(len(subs))
	s.state[i].Store(connOpen)
	s.opened.Add(1)
	for j := range subs {
		msg := fmt.Appendf(nil, `["REQ","s%d",%s]`, j, subs[j].JSON(s.pubkeys))
		if err := c.WriteMessage(websocket.TextMessage, msg); err != nil {
			break
		}
	}
	dials.Done()
	s.read(c, i)
}

var (
	prefixEvent  = []byte(`["EVENT","s`)
	prefixEose   = []byte(`["EOSE","s`)
	prefixClosed = []byte(`["CLOSED","s`)
	prefixNotice = []byte(`["NOTICE",`)
	idField      = []byte(`"id":"`)
)

// subIndex reads the digits after `"s` in a message that starts with prefix.
func subIndex(msg, prefix []byte) int {
	n := 0
	for _, ch := range msg[len(prefix):] {
		if ch < '0' || ch > '9' {
			break
		}
		n = n*10 + int(ch-'0')
	}
	return n
}

func (s *subscriber) read(c *websocket.Conn, i int) {
	nsubs := int32(s.nsubs[i])
	var eosed uint16 // bit j: subscription j has had its EOSE
	// The stored part of subscription j is over (EOSE, or CLOSED: no EOSE will come); all of them
	// over makes the connection live.
	settle := func(j int) {
		if j < 16 && eosed&(1<<j) == 0 {
			eosed |= 1 << j
			if s.eose[i].Add(1) == nsubs {
				s.ready.Add(1)
			}
		}
	}
	for {
		_, msg, err := c.ReadMessage()
		now := time.Now().UnixNano()
		if err != nil {
			if !s.finishing.Load() {
				s.state[i].Store(connDropped)
				s.dropped.Add(1)
				if s.eose[i].Load() >= nsubs {
					s.ready.Add(-1)
				}
			}
			c.Close()
			return
		}
		switch {
		case bytes.HasPrefix(msg, prefixEvent):
			j := subIndex(msg, prefixEvent)
			if eosed&(1<<j) == 0 {
				s.initial.Add(1)
			}
			k := bytes.Index(msg, idField)
			if k < 0 || k+len(idField)+16 > len(msg) {
				continue
			}
			key := idKey(string(msg[k+len(idField) : k+len(idField)+16]))
			s.mu.Lock()
			s.deliveries = append(s.deliveries, delivery{key: key, recv: now, conn: uint32(i), sub: uint8(j)})
			s.mu.Unlock()
		case bytes.HasPrefix(msg, prefixEose):
			settle(subIndex(msg, prefixEose))
		case bytes.HasPrefix(msg, prefixClosed):
			// The relay ended a subscription: it counts as done for the ramp, and every event it
			// should have carried from now on as missed.
			s.closed.Add(1)
			s.closedSample.Store(string(msg))
			settle(subIndex(msg, prefixClosed))
		case bytes.HasPrefix(msg, prefixNotice):
			s.notices.Add(1)
			s.noticeSample.Store(string(msg))
		}
	}
}

type recKey struct {
	ev   int32
	conn uint32
	sub  uint8
}

type recVal struct {
	count int32
	first int64
}

func (s *subscriber) finish(file string) {
	f, err := os.Open(file)
	if err != nil {
		out(map[string]any{"type": "error", "error": err.Error()})
		return
	}
	defer f.Close()
	var events []Published
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var e Published
		if json.Unmarshal(sc.Bytes(), &e) == nil {
			events = append(events, e)
		}
	}
	byKey := make(map[uint64]int32, len(events))
	for i := range events {
		byKey[idKey(events[i].ID)] = int32(i)
	}
	s.mu.Lock()
	deliveries := s.deliveries
	s.mu.Unlock()
	rec := make(map[recKey]*recVal, len(deliveries))
	var unknown, unacked int64
	for _, d := range deliveries {
		ev, ok := byKey[d.key]
		if !ok {
			unknown++
			continue
		}
		k := recKey{ev, d.conn, d.sub}
		if v := rec[k]; v != nil {
			v.count++
			if d.recv < v.first {
				v.first = d.recv
			}
		} else {
			rec[k] = &recVal{1, d.recv}
		}
	}
	// Index of this process's subscriptions by the author, #p and #t values they name (each of ours
	// names exactly one of these, or only an #e nobody publishes).
	type ref struct {
		conn uint32
		sub  uint8
	}
	byAuthor := map[int][]ref{}
	byP := map[int][]ref{}
	byT := map[int][]ref{}
	subsOf := make([][]Sub, s.count)
	for i := 0; i < s.count; i++ {
		st := s.state[i].Load()
		if st != connOpen && st != connDropped {
			continue
		}
		subsOf[i] = makeSubs(newRand(s.seed, "conn", uint64(s.first+i)), s.authors, s.tags, s.since[i])
		for j, sb := range subsOf[i] {
			r := ref{uint32(i), uint8(j)}
			for _, a := range sb.Authors {
				byAuthor[a] = append(byAuthor[a], r)
			}
			for _, p := range sb.P {
				byP[p] = append(byP[p], r)
			}
			for _, t := range sb.T {
				byT[t] = append(byT[t], r)
			}
		}
	}
	lat := newHistogram()
	var expected, delivered, missed, duplicates, unexpected, missedDropped int64
	seen := map[ref]bool{}
	for ei := range events {
		e := &events[ei]
		clear(seen)
		if e.OK == "true" {
			check := func(r ref) {
				if seen[r] {
					return
				}
				seen[r] = true
				if !subsOf[r.conn][r.sub].Matches(e) {
					return
				}
				expected++
				if v := rec[recKey{int32(ei), r.conn, r.sub}]; v != nil {
					delivered++
					lat.Add(time.Duration(v.first - e.SentNs))
				} else {
					missed++
					if s.state[r.conn].Load() == connDropped {
						missedDropped++
					}
				}
			}
			for _, r := range byAuthor[e.Author] {
				check(r)
			}
			for _, p := range e.P {
				for _, r := range byP[p] {
					check(r)
				}
			}
			for _, t := range e.T {
				for _, r := range byT[t] {
					check(r)
				}
			}
		}
	}
	for k, v := range rec {
		duplicates += int64(v.count - 1)
		e := &events[k.ev]
		if e.OK != "true" {
			unacked++
			continue
		}
		if subsOf[k.conn] == nil || int(k.sub) >= len(subsOf[k.conn]) || !subsOf[k.conn][k.sub].Matches(e) {
			unexpected++
		}
	}
	st := s.stats("result", time.Now())
	st["events"] = len(events)
	st["expected"] = expected
	st["delivered"] = delivered
	st["missed"] = missed
	st["missedOnDropped"] = missedDropped
	st["duplicates"] = duplicates
	st["unexpected"] = unexpected
	st["unknownEvents"] = unknown
	st["deliveredUnacked"] = unacked
	st["initialEvents"] = s.initial.Load()
	st["latency"] = lat
	out(st)
}
