// Package envcheck finds settings that were meant but misspelled: an
// environment variable such as CHECKOUT_ADMN_KEY is otherwise ignored
// without a word, and the program runs with the default it was meant to
// replace.
package envcheck

import (
	"slices"
	"strings"
)

// Server names the local server's (checkout-server) settings.
var Server = []string{
	"CHECKOUT_ADDR", "CHECKOUT_DATA_DIR", "CHECKOUT_TABLE_PREFIX", "CHECKOUT_ADMIN_KEY",
	"CHECKOUT_SWEEP_INTERVAL", "CHECKOUT_AUTO_CREATE_TASKS", "CHECKOUT_LEASE_SHARDS",
	"CHECKOUT_STATUS_SHARDS", "CHECKOUT_CLAIM_SHARDS", "CHECKOUT_FEED_SHARDS",
	"CHECKOUT_WEBHOOK_URL", "CHECKOUT_WEBHOOK_SECRET", "CHECKOUT_WEBHOOK_RETRY_FOR",
	"CHECKOUT_WEBHOOK_DEAD_LETTERS",
}

// CLI names the settings of checkout, the CLI (and its MCP server).
var CLI = []string{
	"CHECKOUT_URL", "CHECKOUT_API_KEY", "CHECKOUT_AGENT", "CHECKOUT_RUN_ID",
	"CHECKOUT_PROFILE", "CHECKOUT_CONFIG",
}

// Settings names every CHECKOUT_ variable a program of this product reads
// from a user's environment. A variable named here is never reported,
// whichever program looks, since one shell often sets both programs'.
var Settings = slices.Concat(Server, CLI)

// Slip is a variable that is no setting, and the setting it is closest to.
type Slip struct{ Name, Meant string }

// maxEdits is how far a name may be from a setting to be taken for it: a
// letter left out, added, changed, or two letters swapped, twice.
const maxEdits = 2

// Slips returns the variables of environ ("NAME=value", as os.Environ)
// that are not in Settings but spell, in any case, a setting of own with
// at most two slips, each with that setting, in the order of environ.
// Other programs' variables that happen to start with CHECKOUT_ are left
// alone unless they are that close to one of own.
func Slips(environ []string, own []string) []Slip {
	var out []Slip
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if slices.Contains(Settings, name) || !strings.HasPrefix(strings.ToUpper(name), "CHECKOUT") {
			continue
		}
		best, bestD := "", maxEdits+1
		for _, s := range own {
			if d := distance(strings.ToUpper(name), s); d < bestD {
				best, bestD = s, d
			}
		}
		if best != "" {
			out = append(out, Slip{name, best})
		}
	}
	return out
}

// distance is the optimal string alignment distance of a and b: the edits
// (insert, delete, replace, swap of neighbours) that make one the other.
func distance(a, b string) int {
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}
