// Package nostr is the k6/x/nostr module: a Nostr relay client for k6 scripts that reads a REQ's
// answer in Go. A script calls `conn.req(subId, filters, timeoutMs)` once per REQ; the module sends
// it, reads every message up to the subscription's EOSE (or CLOSED, NOTICE, a timeout, the socket
// closing) and returns what it saw: how many EVENTs for the subscription, and the time from the REQ
// to its end.
//
// Why: k6's own k6/ws hands every message to the script (a goroutine hop through a channel, a
// metric sample, a copy into a JavaScript string and a call into the VU). At ~270 EVENTs per REQ
// that is ~1 ms of CPU per REQ on this project's machines, two thirds of the two cores the relay
// also runs on, so the ladder measured the client as much as the relay. Here a message costs its
// frame header and a look at its first bytes; the rest of it is read and discarded unparsed, as the
// k6/ws script also never parsed an EVENT.
//
// What it checks: a message counts as an EVENT of the subscription only if it starts with
// `["EVENT",<sub id as JSON>,`; EOSE and CLOSED must name the subscription; the relay's messages
// are compact JSON (no space after `[` or `,`), as NIP-01 relays send them.
package nostr

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/gorilla/websocket"
	"go.k6.io/k6/js/modules"
)

func init() {
	modules.Register("k6/x/nostr", new(RootModule))
}

// RootModule is the module k6 registers; it makes one instance per VU.
type RootModule struct{}

// ModuleInstance is the module as one VU sees it.
type ModuleInstance struct {
	vu modules.VU
}

// NewModuleInstance implements modules.Module.
func (*RootModule) NewModuleInstance(vu modules.VU) modules.Instance {
	return &ModuleInstance{vu: vu}
}

// Exports implements modules.Instance: `import { connect } from 'k6/x/nostr'`.
func (m *ModuleInstance) Exports() modules.Exports {
	return modules.Exports{Named: map[string]any{"connect": m.Connect}}
}

// Conn is one WebSocket to a relay; its methods run on the VU's goroutine, one at a time.
type Conn struct {
	ws *websocket.Conn
	// head holds the start of each message, enough to tell what it is.
	head []byte
	// broken is why the socket can no longer be used ("" while it can): gorilla/websocket returns
	// the same error for every read after a failed one.
	broken string
	vu     modules.VU
}

// ReqResult is what Conn.Req saw: `ok` when the subscription's EOSE came.
type ReqResult struct {
	OK bool `js:"ok"`
	// Events is the number of EVENT messages for the subscription before its end.
	Events int `js:"events"`
	// Ms is the time from sending the REQ to reading its end, in milliseconds.
	Ms float64 `js:"ms"`
	// Reason is why it ended without EOSE: closed, notice, timeout, ws-close or ws-error.
	Reason string `js:"reason"`
	// Message is the start of the CLOSED or NOTICE message, or the socket error.
	Message string `js:"message"`
}

// headBytes is how much of each message is read to classify it (a sub id is at most 64 characters
// on this relay; a longer one only shortens the logged CLOSED/NOTICE text).
const headBytes = 256

// readBufferBytes: the socket is read this much at a time (gorilla/websocket's default is 4 KB, a
// read system call per ~6 events of ~650 bytes).
const readBufferBytes = 64 << 10

// Connect opens a WebSocket to the relay (ws:// or wss://). It fails in the init context, where
// a VU makes no connections.
func (m *ModuleInstance) Connect(url string) (*Conn, error) {
	if m.vu.State() == nil {
		return nil, errors.New("nostr.connect: call it from the default function, not the init context")
	}
	ctx := m.vu.Context()
	dialer := websocket.Dialer{HandshakeTimeout: 30 * time.Second, Proxy: http.ProxyFromEnvironment, ReadBufferSize: readBufferBytes}
	ws, resp, err := dialer.DialContext(ctx, url, nil)
	if resp != nil && resp.Body != nil {
		_ = resp.Body.Close()
	}
	if err != nil {
		if resp != nil {
			return nil, fmt.Errorf("nostr.connect %s: %w (HTTP %d)", url, err, resp.StatusCode)
		}
		return nil, fmt.Errorf("nostr.connect %s: %w", url, err)
	}
	return &Conn{ws: ws, head: make([]byte, headBytes), vu: m.vu}, nil
}

// Broken is why the connection can no longer be used, or "" while it can.
func (c *Conn) Broken() string {
	return c.broken
}

// Send writes one text message (a CLOSE, say).
func (c *Conn) Send(text string) error {
	if c.broken != "" {
		return errors.New(c.broken)
	}
	if err := c.ws.WriteMessage(websocket.TextMessage, []byte(text)); err != nil {
		c.broken = err.Error()
		return err
	}
	return nil
}

// Req sends `["REQ",subId,filters]` (filters: the REQ's filter objects as JSON text, comma-separated,
// without brackets) and reads until the subscription's EOSE, CLOSED, a NOTICE, the socket's end, or
// timeoutMs.
func (c *Conn) Req(subID string, filters string, timeoutMs float64) ReqResult {
	if c.broken != "" {
		return ReqResult{Reason: "ws-error", Message: c.broken}
	}
	sub := jsonString(subID)
	event := []byte(`["EVENT",` + sub + `,`)
	eose := []byte(`["EOSE",` + sub + `]`)
	closed := []byte(`["CLOSED",` + sub + `,`)
	notice := []byte(`["NOTICE",`)

	started := time.Now()
	if err := c.ws.SetReadDeadline(started.Add(time.Duration(timeoutMs * float64(time.Millisecond)))); err != nil {
		return c.fail("ws-error", err)
	}
	// The context is this iteration's: k6 ending the test mid-REQ ends the read (as a timeout).
	defer context.AfterFunc(c.vu.Context(), func() { _ = c.ws.SetReadDeadline(time.Now()) })()
	if err := c.ws.WriteMessage(websocket.TextMessage, []byte(`["REQ",`+sub+`,`+filters+`]`)); err != nil {
		return c.fail("ws-error", err)
	}
	result := ReqResult{}
	for {
		kind, r, err := c.ws.NextReader()
		if err != nil {
			return c.ended(result, err)
		}
		if kind != websocket.TextMessage {
			continue // the relay sends text only; anything else is skipped unread (NextReader discards it)
		}
		n, err := io.ReadFull(r, c.head)
		if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
			return c.ended(result, err)
		}
		head := c.head[:n]
		switch {
		case bytes.HasPrefix(head, event):
			result.Events++
		case bytes.Equal(head, eose):
			result.OK = true
			result.Ms = msSince(started)
			return result
		case bytes.HasPrefix(head, closed):
			result.Reason, result.Message = "closed", string(head)
			result.Ms = msSince(started)
			return result
		case bytes.HasPrefix(head, notice):
			result.Reason, result.Message = "notice", string(head)
			result.Ms = msSince(started)
			return result
		}
		// Anything else (AUTH, another subscription's message) is read past: the next NextReader
		// discards what is left of it.
	}
}

// Close sends a close frame and closes the socket.
func (c *Conn) Close() {
	if c.broken == "" {
		_ = c.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(time.Second))
		c.broken = "closed"
	}
	_ = c.ws.Close()
}

func (c *Conn) fail(reason string, err error) ReqResult {
	c.broken = err.Error()
	return ReqResult{Reason: reason, Message: err.Error()}
}

// ended: the read failed before the subscription ended (a timeout, the relay closing, an error).
func (c *Conn) ended(result ReqResult, err error) ReqResult {
	c.broken = err.Error()
	result.Ms = 0
	result.Message = err.Error()
	var netErr interface{ Timeout() bool }
	var closeErr *websocket.CloseError
	switch {
	case errors.As(err, &netErr) && netErr.Timeout():
		result.Reason = "timeout"
	case errors.As(err, &closeErr):
		result.Reason = "ws-close"
	default:
		result.Reason = "ws-error"
	}
	return result
}

// jsonString is s as a JSON string, as JSON.stringify writes it (no HTML escaping): what the relay
// puts in its messages.
func jsonString(s string) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)
	return strings.TrimSuffix(b.String(), "\n")
}

func msSince(t time.Time) float64 {
	return float64(time.Since(t).Microseconds()) / 1000
}
