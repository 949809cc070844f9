module github.com/pgrelay/pgrelay/load/relay-mix

go 1.25.0

require (
	github.com/btcsuite/btcd/btcec/v2 v2.3.5
	github.com/gorilla/websocket v1.5.3
)

require (
	github.com/btcsuite/btcd/chaincfg/chainhash v1.0.1 // indirect
	github.com/decred/dcrd/crypto/blake256 v1.0.0 // indirect
	github.com/decred/dcrd/dcrec/secp256k1/v4 v4.0.1 // indirect
)
