package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"testing"

	"github.com/btcsuite/btcd/btcec/v2"
	"github.com/btcsuite/btcd/btcec/v2/schnorr"
)

func TestSubscriptionsAreReproducible(t *testing.T) {
	a := makeSubs(newRand("s", "conn", 42), 1000, 100, 123)
	b := makeSubs(newRand("s", "conn", 42), 1000, 100, 123)
	if len(a) < 3 || len(a) > 10 {
		t.Fatalf("%d subscriptions, want 3-10", len(a))
	}
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	if string(ja) != string(jb) {
		t.Fatal("the same seed and index gave different subscriptions")
	}
}

func TestMatches(t *testing.T) {
	feed := Sub{Kinds: []int{1, 6}, Authors: []int{3, 7}, Since: 100}
	mentions := Sub{Kinds: []int{1, 6, 7}, P: []int{9}, Since: 100}
	tag := Sub{Kinds: []int{1}, T: []int{4}, Since: 100}
	thread := Sub{E: "ab", Since: 100}
	note := &Published{Author: 7, Kind: 1, CreatedAt: 100, P: []int{9, 2}, T: []int{4}}
	for name, c := range map[string]struct {
		s    Sub
		e    *Published
		want bool
	}{
		"feed":            {feed, note, true},
		"feed, too early": {Sub{Kinds: []int{1}, Authors: []int{7}, Since: 101}, note, false},
		"feed, other":     {feed, &Published{Author: 8, Kind: 1, CreatedAt: 100}, false},
		"mentions":        {mentions, note, true},
		"reaction":        {mentions, &Published{Author: 1, Kind: 7, CreatedAt: 200, P: []int{9}}, true},
		"reaction, kind":  {tag, &Published{Author: 1, Kind: 7, CreatedAt: 200, T: []int{4}}, false},
		"tag":             {tag, note, true},
		"thread":          {thread, note, false},
	} {
		if got := c.s.Matches(c.e); got != c.want {
			t.Errorf("%s: Matches = %v, want %v", name, got, c.want)
		}
	}
}

func TestSignedEventVerifies(t *testing.T) {
	sg := &signer{seed: "s", keys: map[int]*btcec.PrivateKey{}, pubkeys: authorPubkeys("s", 3)}
	msg, id := sg.sign(2, 1, 1700000000, [][]string{{"p", sg.pubkeys[0]}}, "hello <&>")
	var m []json.RawMessage
	if err := json.Unmarshal(msg, &m); err != nil || len(m) != 2 {
		t.Fatalf("not an EVENT message: %s", msg)
	}
	var ev struct {
		ID, Pubkey, Content, Sig string
		CreatedAt                int64 `json:"created_at"`
		Kind                     int
		Tags                     [][]string
	}
	if err := json.Unmarshal(m[1], &ev); err != nil {
		t.Fatal(err)
	}
	ser, _ := marshalNoEscape([]any{0, ev.Pubkey, ev.CreatedAt, ev.Kind, ev.Tags, ev.Content})
	sum := sha256.Sum256(ser)
	if hex.EncodeToString(sum[:]) != id || ev.ID != id {
		t.Fatal("id is not the hash of the NIP-01 serialization")
	}
	pkb, _ := hex.DecodeString(ev.Pubkey)
	pk, err := schnorr.ParsePubKey(pkb)
	if err != nil {
		t.Fatal(err)
	}
	sigb, _ := hex.DecodeString(ev.Sig)
	sig, err := schnorr.ParseSignature(sigb)
	if err != nil || !sig.Verify(sum[:], pk) {
		t.Fatal("signature does not verify")
	}
}
