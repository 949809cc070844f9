package main

// The live subscriptions a connection holds, and the published events: both are described by
// indices into the publishers' authors (0..authors-1) and hashtags (0..tags-1), so a subscriber
// process can tell exactly which of its subscriptions each published event should reach.

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
)

// Sub is one live subscription: a NIP-01 filter with `since` at the moment it was opened.
type Sub struct {
	Kinds   []int  // empty: any kind
	Authors []int  // author indices; nil: any author
	P       []int  // #p: author indices
	T       []int  // #t: hashtag indices
	E       string // #e: an id nobody publishes (a thread that stays quiet)
	Since   int64
}

// The kinds of subscription a client holds, in the order a connection takes them (3 to 10 of them).
// Some never match anything the publishers send (profiles, zaps, long-form, a quiet thread): most of
// a real client's subscriptions are idle.
const subKinds = 10

func makeSubs(r *rand.Rand, authors, tags int, since int64) []Sub {
	n := 3 + r.IntN(8)
	me := r.IntN(authors)
	pick := func(lo, hi int) []int {
		k := lo + r.IntN(hi-lo+1)
		if k > authors {
			k = authors
		}
		set := make(map[int]bool, k)
		out := make([]int, 0, k)
		for len(out) < k {
			a := r.IntN(authors)
			if !set[a] {
				set[a] = true
				out = append(out, a)
			}
		}
		return out
	}
	subs := make([]Sub, 0, n)
	for i := 0; i < n; i++ {
		var s Sub
		switch i % subKinds {
		case 0: // home feed: notes and reposts of the people followed
			s = Sub{Kinds: []int{1, 6}, Authors: pick(10, 40)}
		case 1: // mentions
			s = Sub{Kinds: []int{1, 6, 7}, P: []int{me}}
		case 2: // profiles of the people followed (publishers send no kind 0: never matches)
			s = Sub{Kinds: []int{0}, Authors: pick(5, 20)}
		case 3: // a list feed
			s = Sub{Kinds: []int{1}, Authors: pick(3, 10)}
		case 4: // a hashtag
			s = Sub{Kinds: []int{1}, T: []int{r.IntN(tags)}}
		case 5: // reactions to me (overlaps with mentions: a reaction reaches both)
			s = Sub{Kinds: []int{7}, P: []int{me}}
		case 6: // a thread nobody replies to
			var b [32]byte
			for j := range b {
				b[j] = byte(r.IntN(256))
			}
			s = Sub{E: hex.EncodeToString(b[:])}
		case 7: // a second feed
			s = Sub{Kinds: []int{1, 6}, Authors: pick(10, 40)}
		case 8: // zaps to me (never sent)
			s = Sub{Kinds: []int{9735}, P: []int{me}}
		case 9: // long-form by the people followed (never sent)
			s = Sub{Kinds: []int{30023}, Authors: pick(5, 20)}
		}
		s.Since = since
		subs = append(subs, s)
	}
	return subs
}

// JSON renders the subscription as a NIP-01 filter.
func (s *Sub) JSON(pubkeys []string) []byte {
	f := map[string]any{"since": s.Since}
	if len(s.Kinds) > 0 {
		f["kinds"] = s.Kinds
	}
	hexes := func(idx []int) []string {
		out := make([]string, len(idx))
		for i, a := range idx {
			out[i] = pubkeys[a]
		}
		return out
	}
	if s.Authors != nil {
		f["authors"] = hexes(s.Authors)
	}
	if s.P != nil {
		f["#p"] = hexes(s.P)
	}
	if s.T != nil {
		ts := make([]string, len(s.T))
		for i, t := range s.T {
			ts[i] = tagName(t)
		}
		f["#t"] = ts
	}
	if s.E != "" {
		f["#e"] = []string{s.E}
	}
	b, _ := json.Marshal(f)
	return b
}

func tagName(i int) string { return fmt.Sprintf("rmtag%d", i) }

// Published is one event as the publisher sent it, in the file the subscribers read at the end.
type Published struct {
	ID        string `json:"id"`
	Author    int    `json:"a"`
	Kind      int    `json:"k"`
	CreatedAt int64  `json:"c"`
	P         []int  `json:"p,omitempty"`
	T         []int  `json:"t,omitempty"`
	E         string `json:"e,omitempty"`
	SentNs    int64  `json:"s"`
	OKNs      int64  `json:"o,omitempty"` // when the OK arrived
	// OK is "true", "false" or "none" (no OK before the publisher gave up waiting).
	OK string `json:"ok"`
}

func (s *Sub) Matches(e *Published) bool {
	if len(s.Kinds) > 0 && !slices.Contains(s.Kinds, e.Kind) {
		return false
	}
	if s.Authors != nil && !slices.Contains(s.Authors, e.Author) {
		return false
	}
	if s.P != nil && !intersects(s.P, e.P) {
		return false
	}
	if s.T != nil && !intersects(s.T, e.T) {
		return false
	}
	if s.E != "" && s.E != e.E {
		return false
	}
	return e.CreatedAt >= s.Since
}

func intersects(a, b []int) bool {
	for _, x := range a {
		if slices.Contains(b, x) {
			return true
		}
	}
	return false
}
