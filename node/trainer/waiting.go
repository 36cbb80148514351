package trainer

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// waitingFor says, for a person, what a core whose run does not move
// waits for and from whom, from its Debug text (train.Core.Debug, which
// the stall line logs whole at debug level): the requests this worker
// sent that are not answered (its pushes and pulls, per peer), and the
// rounds this peer's owner cannot apply for want of some member's
// contribution. At most `most` items; "" when Debug names none. Lines it
// cannot read are left out, so a change of Debug's format costs detail,
// never an error (TestWaitingFor, TestStalledRunFailsNamingThePeer).
func waitingFor(debug string, most int) string {
	type reqKey struct{ op, to string }
	var order []reqKey
	reqs := map[reqKey][]string{}     // the rounds asked for
	tries := map[reqKey]int{}         // the most times one was sent again
	requires := map[string][]string{} // owner round -> the members it requires
	contributed := map[string][]string{}
	var rounds []string
	for line := range strings.SplitSeq(debug, "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) >= 7 && f[0] == "request" && f[3] == "to" && f[5] == "round":
			// request ID OP to PEER round R through T shards [...] tries N
			k := reqKey{f[2], f[4]}
			if _, ok := reqs[k]; !ok {
				order = append(order, k)
			}
			if !slices.Contains(reqs[k], f[6]) {
				reqs[k] = append(reqs[k], f[6])
			}
			if n := len(f); f[n-2] == "tries" {
				if v, err := strconv.Atoi(f[n-1]); err == nil {
					tries[k] = max(tries[k], v)
				}
			}
		case len(f) >= 5 && f[0] == "round" && f[4] == "requires":
			// round R (configuration C) requires [peer/id peer/id]
			r := f[1]
			if _, ok := requires[r]; !ok {
				rounds = append(rounds, r)
			}
			requires[r] = bracketList(f[5:])
		case len(f) >= 5 && f[0] == "round" && f[2] == "contribution" && f[3] == "from":
			// round R contribution from peer/id shards [...]
			contributed[f[1]] = append(contributed[f[1]], f[4])
		}
	}
	var items []string
	for _, k := range order {
		s := fmt.Sprintf("a reply from %s to its %s of round %s", k.to, k.op, strings.Join(reqs[k], ", "))
		switch n := tries[k]; n {
		case 0:
		case 1:
			s += " (sent again once)"
		default:
			s += fmt.Sprintf(" (sent again %d times)", n)
		}
		items = append(items, s)
	}
	for _, r := range rounds {
		var missing []string
		for _, m := range requires[r] {
			if !slices.Contains(contributed[r], m) {
				missing = append(missing, strings.SplitN(m, "/", 2)[0])
			}
		}
		if len(missing) > 0 {
			items = append(items, fmt.Sprintf("the contributions of %s to round %s (as an owner)", strings.Join(missing, ", "), r))
		}
	}
	if len(items) > most {
		items = append(items[:most], fmt.Sprintf("%d more", len(items)-most))
	}
	return strings.Join(items, "; ")
}

// bracketList reads the fields of a Go-formatted list "[a b c]".
func bracketList(f []string) []string {
	var out []string
	for _, s := range f {
		s = strings.TrimPrefix(s, "[")
		end := strings.HasSuffix(s, "]")
		s = strings.TrimSuffix(s, "]")
		if s != "" {
			out = append(out, s)
		}
		if end {
			break
		}
	}
	return out
}
