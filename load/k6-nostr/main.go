// k6 with the k6/x/nostr module built in: `npm run load:build-k6-nostr` builds it into load/bin/k6-nostr.
// It is the k6 of scripts/install-k6.sh's version, plus the module in ./nostr.
package main

import (
	"go.k6.io/k6/cmd"

	_ "github.com/pgrelay/pgrelay/load/k6-nostr/nostr"
)

func main() {
	cmd.Execute()
}
