package lease

// SpreadClaims makes s's next claims start from a window of w candidates,
// as if its recent claims had lost races to claimers elsewhere.
func SpreadClaims(s *Store, w int) {
	s.claims.mu.Lock()
	defer s.claims.mu.Unlock()
	s.claims.learned = float64(w)
}
