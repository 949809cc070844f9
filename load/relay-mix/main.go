// relay-mix: the client of `npm run bench:relay-mix` (bench/relay-mix.ts), a big relay's traffic at
// once: many connections each holding live subscriptions, publishers sending signed events at a fixed
// rate, and closed-loop one-shot REQs. One binary, three roles, each run as its own process(es):
//
//	relay-mix subscribe --url URL --source 127.0.0.2 --first 0 --conns 16000 …
//	relay-mix publish   --url URL --source 127.0.1.1 --rate 20 --seconds 60 --out published.jsonl …
//	relay-mix query     --url URL --source 127.0.1.2 --vus 20 --seconds 60 …
//
// A process holds at most one descriptor per connection and RLIMIT_NOFILE is per process, so the
// orchestrator spreads the subscribers over several processes, each from its own loopback source
// address (each has its own ~28,000 ephemeral ports). Every process writes JSON lines on stdout.
package main

import (
	"fmt"
	"os"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: relay-mix subscribe|publish|query|pubkeys [flags] (-h for flags)")
		os.Exit(2)
	}
	switch os.Args[1] {
	case "subscribe":
		runSubscribe(os.Args[2:])
	case "publish":
		runPublish(os.Args[2:])
	case "query":
		runQuery(os.Args[2:])
	case "pubkeys": // the publishers' pubkeys, one a line: relay-mix pubkeys SEED N
		if len(os.Args) != 4 {
			fmt.Fprintln(os.Stderr, "usage: relay-mix pubkeys SEED N")
			os.Exit(2)
		}
		var n int
		fmt.Sscan(os.Args[3], &n)
		for _, p := range authorPubkeys(os.Args[2], n) {
			fmt.Println(p)
		}
	default:
		fmt.Fprintf(os.Stderr, "unknown role %q\n", os.Args[1])
		os.Exit(2)
	}
}
