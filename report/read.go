package report

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
)

// Run is a parsed report file.
type Run struct {
	Path    string
	Start   *Start
	Evals   []Eval
	Rounds  []Round
	Changes []Change
	Summary *Summary // nil when the run did not finish
}

// ReadFile parses a report file. Unknown record types and unknown fields are
// ignored (newer writers may add them); a line that is not JSON is an error
// naming the file and line.
func ReadFile(path string) (*Run, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("report: %w", err)
	}
	defer f.Close()
	r, err := Read(f, path)
	if err != nil {
		return nil, err
	}
	return r, nil
}

// Read parses a report from r; name is used in errors.
func Read(r io.Reader, name string) (*Run, error) {
	run := &Run{Path: name}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	line := 0
	for sc.Scan() {
		line++
		b := sc.Bytes()
		if len(b) == 0 {
			continue
		}
		var head struct {
			Type string `json:"type"`
		}
		if err := json.Unmarshal(b, &head); err != nil {
			return nil, fmt.Errorf("report: %s:%d: not a JSON object: %w", name, line, err)
		}
		var err error
		switch head.Type {
		case TypeStart:
			run.Start = new(Start)
			err = json.Unmarshal(b, run.Start)
		case TypeEval:
			var e Eval
			err = json.Unmarshal(b, &e)
			run.Evals = append(run.Evals, e)
		case TypeRound:
			var e Round
			err = json.Unmarshal(b, &e)
			run.Rounds = append(run.Rounds, e)
		case TypeChange:
			var c Change
			err = json.Unmarshal(b, &c)
			run.Changes = append(run.Changes, c)
		case TypeSummary:
			run.Summary = new(Summary)
			err = json.Unmarshal(b, run.Summary)
		}
		if err != nil {
			return nil, fmt.Errorf("report: %s:%d: %s record: %w", name, line, head.Type, err)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("report: %s:%d: %w", name, line, err)
	}
	return run, nil
}
