package lease

import "time"

// ClockMargin is the clock skew between processes that heartbeats and
// the death cache allow for (alive.go).
const ClockMargin = clockMargin

// SpreadClaims makes s's next claims start from a window of w candidates,
// as if its recent claims had lost races to claimers elsewhere.
func SpreadClaims(s *Store, w int) {
	s.claims.mu.Lock()
	defer s.claims.mu.Unlock()
	s.claims.learned, s.claims.learnedAt = float64(w), s.clock()
}

// WaitForGraphLock sets how long s's changes of blocked_by wait for the
// graph's lock before answering ErrBusy.
func WaitForGraphLock(s *Store, d time.Duration) { s.graphWait = d }

// OnGraphWalk makes s call f after each level of a cycle walk is read.
func OnGraphWalk(s *Store, f func()) { s.walked = f }

// LimitDependents sets how many tasks one task of s may block.
func LimitDependents(s *Store, n int) { s.maxDependents = n }

// LimitRegistryPage sets how many queue names one page of s's queue
// registry holds.
func LimitRegistryPage(s *Store, n int) { s.registryPage = n }

// PollClaims sets how often s's waiting claims look again when nothing
// wakes them.
func PollClaims(s *Store, d time.Duration) { s.claimPoll = d }

// ClaimsAsleep is how many of s's waiting claims are between two looks.
func ClaimsAsleep(s *Store) int { return int(s.claims.asleep.Load()) }

// ClaimWakes is how many wakes s has sent to its waiting claims (a claim
// waiting on several queues woken for all gets one for each).
func ClaimWakes(s *Store) int { return int(s.claims.wakes.Load()) }
