package node

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/gossiptrain/gossiptrain/peerlog"
)

// The lines "gossiptrain cluster" follows in a peer's log (package
// peerlog) are the ones a node writes, with the fields cluster reads.
func TestNodeLogsWhatClusterReads(t *testing.T) {
	lb := &logBuf{}
	cfg := fastConfig("peerlog")
	cfg.StatusAddr = "127.0.0.1:0"
	startNode(t, cfg, zerolog.New(lb), "n")
	want := map[string]bool{peerlog.Listening: false, peerlog.StatusListening: false}
	waitFor(t, 5*time.Second, func() (bool, string) {
		for _, line := range bytes.Split([]byte(lb.String()), []byte("\n")) {
			var l struct{ Message, Addr string }
			if json.Unmarshal(line, &l) == nil && l.Addr != "" {
				if _, ok := want[l.Message]; ok {
					want[l.Message] = true
				}
			}
		}
		return want[peerlog.Listening] && want[peerlog.StatusListening], "missing lines with an addr field: " + lb.String()
	})
}
