// The shared protocol examples (spec/agent-protocol.examples.json) against this agent: frames decode and re-encode to
// the same bytes, and each exchange, run on a real connection, is answered with replies, events and frames of the
// examples' shape. packages/agent-client/src/protocol.test.ts holds the TypeScript side to the same file.
package main

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"reflect"
	"sort"
	"strings"
	"syscall"
	"testing"
)

type exampleFrame struct {
	Name       string          `json:"name"`
	Hex        string          `json:"hex"`
	Type       byte            `json:"type"`
	Channel    uint32          `json:"channel"`
	JSON       json.RawMessage `json:"json"`
	PayloadHex *string         `json:"payloadHex"`
}

type exampleExchange struct {
	Call struct {
		Method string `json:"method"`
		Params any    `json:"params"`
	} `json:"call"`
	Reply  map[string]any   `json:"reply"`
	Send   []exampleFrame   `json:"send"`
	Events []map[string]any `json:"events"`
	Frames []exampleFrame   `json:"frames"`
}

type examples struct {
	Frames    []exampleFrame    `json:"frames"`
	Exchanges []exampleExchange `json:"exchanges"`
}

func loadExamples(t *testing.T) examples {
	t.Helper()
	raw, err := os.ReadFile("../spec/agent-protocol.examples.json")
	if err != nil {
		t.Fatalf("the shared examples: %v", err)
	}
	var ex examples
	if err := json.Unmarshal(raw, &ex); err != nil {
		t.Fatalf("the shared examples: %v", err)
	}
	return ex
}

func TestExampleFramesDecodeAndReencode(t *testing.T) {
	for _, ef := range loadExamples(t).Frames {
		b, err := hex.DecodeString(ef.Hex)
		if err != nil {
			t.Fatalf("%s: %v", ef.Name, err)
		}
		f, err := readFrame(strings.NewReader(string(b)))
		if err != nil || f.typ != ef.Type || f.channel != ef.Channel {
			t.Fatalf("%s: decoded %+v (%v), want type %d channel %d", ef.Name, f, err, ef.Type, ef.Channel)
		}
		if ef.JSON != nil {
			var got, want any
			if json.Unmarshal(f.payload, &got) != nil || json.Unmarshal(ef.JSON, &want) != nil || !reflect.DeepEqual(got, want) {
				t.Fatalf("%s: payload %s, want %s", ef.Name, f.payload, ef.JSON)
			}
		} else if ef.PayloadHex == nil || hex.EncodeToString(f.payload) != *ef.PayloadHex {
			t.Fatalf("%s: payload %x", ef.Name, f.payload)
		}
		if again := encodeFrame(f.typ, f.channel, f.payload); hex.EncodeToString(again) != ef.Hex {
			t.Fatalf("%s: re-encoded as %x", ef.Name, again)
		}
	}
}

func TestExampleExchangesAgainstTheAgent(t *testing.T) {
	if os.Geteuid() != 0 {
		// proc.start runs as the user "root" by default, which only root may switch to.
		t.Skip("needs root")
	}
	h := startTestAgent(t)
	reapWhileTesting(t, h.a)
	dir := t.TempDir()
	for i, ex := range loadExamples(t).Exchanges {
		ex.Call.Params = withDir(ex.Call.Params, dir)
		what := fmt.Sprintf("exchange %d (%s)", i, ex.Call.Method)
		result, perr := h.call(ex.Call.Method, ex.Call.Params)
		if want, ok := ex.Reply["error"].(map[string]any); ok {
			if perr == nil || perr.Code != want["code"] {
				t.Fatalf("%s: answered %s / %v, want error %v", what, result, perr, want["code"])
			}
		} else {
			if perr != nil {
				t.Fatalf("%s: %v", what, perr)
			}
			var got any
			json.Unmarshal(result, &got)
			if err := sameShape(got, ex.Reply["result"], "result"); err != nil {
				t.Fatalf("%s: %v\n got %s", what, err, result)
			}
		}
		for _, f := range ex.Send {
			payload, _ := hex.DecodeString(*f.PayloadHex)
			h.send(f.Type, f.Channel, payload)
		}
		for _, want := range ex.Events {
			// The event of this exchange: its name, and the process or stream the host chose.
			f := h.waitFor(fmt.Sprint(want["event"]), func(f frame) bool {
				var e map[string]any
				if f.typ != frameEvent || json.Unmarshal(f.payload, &e) != nil {
					return false
				}
				for _, k := range []string{"event", "id", "streamId"} {
					if w, ok := want[k]; ok && e[k] != w {
						return false
					}
				}
				return true
			})
			var got any
			json.Unmarshal(f.payload, &got)
			if err := sameShape(got, want, "event"); err != nil {
				t.Fatalf("%s: %v\n got %s", what, err, f.payload)
			}
		}
		for _, want := range ex.Frames {
			f := h.waitFor(fmt.Sprintf("frame %d on %d", want.Type, want.Channel), func(f frame) bool { return f.typ == want.Type && f.channel == want.Channel })
			if hex.EncodeToString(f.payload) != *want.PayloadHex {
				t.Fatalf("%s: frame %d on %d carries %x, want %s", what, want.Type, want.Channel, f.payload, *want.PayloadHex)
			}
		}
	}
}

// reapWhileTesting reaps the agent's children as its reaper does in a guest, until the test ends.
func reapWhileTesting(t *testing.T, a *agent) {
	exited := make(chan os.Signal, 16)
	signal.Notify(exited, syscall.SIGCHLD)
	done := make(chan struct{})
	t.Cleanup(func() {
		signal.Stop(exited)
		close(done)
	})
	go func() {
		for {
			select {
			case <-exited:
				a.reap()
			case <-done:
				return
			}
		}
	}()
}

// withDir replaces "$DIR" in every string of an example's params by dir.
func withDir(v any, dir string) any {
	switch x := v.(type) {
	case string:
		return strings.ReplaceAll(x, "$DIR", dir)
	case map[string]any:
		for k, e := range x {
			x[k] = withDir(e, dir)
		}
	case []any:
		for i, e := range x {
			x[i] = withDir(e, dir)
		}
	}
	return v
}

// sameShape: the same JSON kinds, objects with the same keys, array elements shaped like the example's first one.
func sameShape(got, want any, at string) error {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return fmt.Errorf("%s: %T, want an object", at, got)
		}
		if gk, wk := keys(g), keys(w); gk != wk {
			return fmt.Errorf("%s: keys %s, want %s", at, gk, wk)
		}
		for k := range w {
			if err := sameShape(g[k], w[k], at+"."+k); err != nil {
				return err
			}
		}
	case []any:
		g, ok := got.([]any)
		if !ok {
			return fmt.Errorf("%s: %T, want an array", at, got)
		}
		for i, e := range g {
			if len(w) > 0 {
				if err := sameShape(e, w[0], fmt.Sprintf("%s[%d]", at, i)); err != nil {
					return err
				}
			}
		}
	default:
		if fmt.Sprintf("%T", got) != fmt.Sprintf("%T", want) {
			return fmt.Errorf("%s: %v (%T), want a %T like %v", at, got, got, want, want)
		}
	}
	return nil
}

func keys(m map[string]any) string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return strings.Join(ks, ",")
}
